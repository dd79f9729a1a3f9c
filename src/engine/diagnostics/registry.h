#pragma once
// The `scaleinv diagnose` measurements as rows (docs/design.md "Where new things go": a
// measurement): one row per diagnostic, its subcommand name, one line saying what it measures, its
// options declared once beside their defaults (diagnostics.h), and its run, which renders the
// table, the JSON and the figures the same way for every row. cli/cmd_diagnose.cpp turns each row
// into a subcommand with the shared --seeds, --json, --plot and --quiet; a new diagnostic is its
// .cpp (options, run_*, *_table, *_json, plot_*) and one row in registry.cpp.
//
// Nothing here parses a command line: a row declares its options to an OptionSink, which the CLI
// implements with CLI11. Nothing here writes files but the figures, into the directory its plot is
// given (UserError, option --plot, when gnuplot fails).
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace scaleinv::diag {

// Where a row declares its options: one call per option, with the flag, the field it sets and its
// help text. `inputs` marks values that name files the command reads (presets or TOML tables,
// data directories), so that the CLI can refuse an output over them.
class OptionSink {
 public:
  virtual ~OptionSink() = default;
  virtual void value(const std::string& flag, int& field, const std::string& help) = 0;
  virtual void value(const std::string& flag, double& field, const std::string& help) = 0;
  virtual void value(const std::string& flag, std::string& field, const std::string& help, bool inputs = false) = 0;
  // Comma-separated lists.
  virtual void list(const std::string& flag, std::vector<int>& field, const std::string& help) = 0;
  virtual void list(const std::string& flag, std::vector<double>& field, const std::string& help) = 0;
  virtual void list(const std::string& flag, std::vector<std::string>& field, const std::string& help,
                    bool inputs = false) = 0;
  // A switch: present sets field to `set_to` (true: --rmsnorm; false: --no-pre-ln).
  virtual void flag(const std::string& flag, bool& field, bool set_to, const std::string& help) = 0;
};

// What a run gives: the table for a person, the JSON for a program, and its figures drawn into a
// directory on request.
struct DiagnosticOutput {
  std::string table;
  nlohmann::json json;
  std::function<void(const std::string& dir)> plot;
};

// Runs the diagnostic on the options its row declared (a progress bar on stderr when asked).
using DiagnosticRun = std::function<DiagnosticOutput(bool show_progress)>;

struct Diagnostic {
  std::string name;     // the subcommand: alignment, transport, diversity, init-stats, depth-scaling
  std::string summary;  // one line for --help
  // Fresh options at their defaults, every one declared to `sink` (--seeds among them); returns
  // the run over those options, to be called once parsing has filled them.
  std::function<DiagnosticRun(OptionSink& sink)> bind;
};

// Every diagnostic, in the order `scaleinv diagnose --help` lists them.
const std::vector<Diagnostic>& diagnostics();

}  // namespace scaleinv::diag
