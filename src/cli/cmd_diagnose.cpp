// `scaleinv diagnose alignment|transport|diversity|init-stats|depth-scaling [options] [--json PATH]`
// The diagnostics beside the coordinate check, one subcommand per row of engine/diagnostics/registry.h:
// each prints a table on stdout, optionally writes JSON (atomically) and figures, and shows a
// progress bar across its grid on stderr.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/atomic_file.h"
#include "brain/util/gnuplot.h"
#include "engine/diagnostics/registry.h"

namespace scaleinv {

namespace {

// A row's options as CLI11 options of its subcommand.
class CliSink : public diag::OptionSink {
 public:
  explicit CliSink(CLI::App* app) : app_(app) {}
  void value(const std::string& flag, int& field, const std::string& help) override { app_->add_option(flag, field, help); }
  void value(const std::string& flag, double& field, const std::string& help) override { app_->add_option(flag, field, help); }
  void value(const std::string& flag, std::string& field, const std::string& help, bool inputs) override {
    CLI::Option* opt = app_->add_option(flag, field, help);
    if (inputs) reads(opt);
  }
  void list(const std::string& flag, std::vector<int>& field, const std::string& help) override {
    app_->add_option(flag, field, help)->delimiter(',');
  }
  void list(const std::string& flag, std::vector<double>& field, const std::string& help) override {
    app_->add_option(flag, field, help)->delimiter(',');
  }
  void list(const std::string& flag, std::vector<std::string>& field, const std::string& help, bool inputs) override {
    CLI::Option* opt = app_->add_option(flag, field, help)->delimiter(',');
    if (inputs) reads(opt);
  }
  void flag(const std::string& flag, bool& field, bool set_to, const std::string& help) override {
    bool* target = &field;
    app_->add_flag_callback(flag, [target, set_to] { *target = set_to; }, help);
  }

 private:
  CLI::App* app_;
};

struct Common {
  std::string json, plot;
  bool quiet = false;
};

// One row as a subcommand: its options, then the shared ones (so --help lists them last); when
// chosen, a missing gnuplot is refused before the measurement (not after it), then the
// measurement, its table, --json and --plot, and exit 0.
void add_row(CLI::App* cmd, const diag::Diagnostic& d, int& exit_code) {
  CLI::App* s = cmd->add_subcommand(d.name, d.summary);
  CliSink sink(s);
  diag::DiagnosticRun run = d.bind(sink);
  auto c = std::make_shared<Common>();
  writes(s->add_option("--json", c->json, "also write the result as JSON to this path (atomic)"));
  writes(s->add_option("--plot", c->plot, "also draw DIR/<diagnostic>.svg and .png (gnuplot)"), /*dir=*/true);
  s->add_flag("--quiet", c->quiet, "no progress bar");
  s->callback([run, c, &exit_code] {
    if (!c->plot.empty()) require_gnuplot("--plot");
    const diag::DiagnosticOutput out = run(!c->quiet);
    std::fputs(out.table.c_str(), stdout);
    std::fflush(stdout);
    if (!c->json.empty()) write_file_atomic(c->json, out.json.dump(2) + "\n");
    if (!c->plot.empty()) out.plot(c->plot);
    exit_code = 0;
  });
}

}  // namespace

void add_diagnose_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "diagnose", "Measure alignment exponents, post-LN transport, feature diversity, init statistics, depth scaling");
  cmd->require_subcommand(1);
  for (const diag::Diagnostic& d : diag::diagnostics()) add_row(cmd, d, exit_code);
}

}  // namespace scaleinv
