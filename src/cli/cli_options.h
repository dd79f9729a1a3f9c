#pragma once
// Option helpers shared by the subcommands.
#include <string>
#include <vector>

namespace scaleinv {

// "64,128,256" (commas or spaces) -> {64, 128, 256}. UserError (where "command line", field
// `option`) on a non-integer item or an empty list.
std::vector<int> parse_int_list(const std::string& option, const std::string& text);

// A TOML string literal for a --set override (paths and names may hold any character).
std::string toml_quote(const std::string& s);

}  // namespace scaleinv
