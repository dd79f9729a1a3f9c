#pragma once
// Option helpers shared by the subcommands.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace scaleinv {

// "64,128,256" (commas or spaces) -> {64, 128, 256}. UserError (where "command line", field
// `option`) on a non-integer item or an empty list.
std::vector<int> parse_int_list(const std::string& option, const std::string& text);

// A TOML string literal for a --set override (paths and names may hold any character).
std::string toml_quote(const std::string& s);

// Declares an option's values as files the command reads (`reads`) or writes (`writes`: a file,
// or with dir = true a directory it writes files into), beside the option's declaration
// (issue 63 class 1). Returns the option, for chaining.
CLI::Option* reads(CLI::Option* opt);
CLI::Option* writes(CLI::Option* opt, bool dir = false);

// Run once parsing ends, before any command's work (main.cpp): UserError naming the output's
// option when an output file given on the command line is one of the inputs given there (the
// same file, through a link or another spelling too), or an output directory is an input file;
// then registers every input with protect_input (brain/util/atomic_file.h), so that a file written
// deeper in the library (a report's files inside --out, a run's out_dir) is refused there too.
void refuse_outputs_over_inputs();

}  // namespace scaleinv
