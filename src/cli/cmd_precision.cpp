// `scaleinv precision --config FILE [--set key=value]... [--formats bf16,e4m3,e5m2] [--json PATH] [--quiet]`
// Trains the config in fp32 and in each simulated format and reports, per tensor, the fraction of
// values that underflow to zero or saturate, and the loss against fp32 (src/engine/opcheck/precision_report.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/atomic_file.h"
#include "engine/opcheck/precision_report.h"
#include "brain/train/config.h"

namespace scaleinv {

void add_precision_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string config, formats = "bf16,e4m3,e5m2,fp8", json;
    std::vector<std::string> sets;
    int rows = 40;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("precision",
                                 "Train in fp32 and in simulated bf16 / fp8; per-tensor underflow and saturation, "
                                 "loss against fp32");
  reads(cmd->add_option("--config", o->config, "TOML config as for train (default: the built-in defaults)"));
  cmd->add_option("--set", o->sets, "override a config field: section.key=value (repeatable)");
  cmd->add_option("--formats", o->formats,
                  "comma-separated: bf16, e4m3, e5m2, fp8 = E4M3 forward + E5M2 gradients (fp32 always runs first)");
  writes(cmd->add_option("--json", o->json, "write losses and per-tensor counts as JSON"));
  cmd->add_option("--rows", o->rows, "tensors listed per format (default 40, worst first)")->check(CLI::Range(0, 100000));
  cmd->add_flag("--quiet", o->quiet, "no progress bars");
  cmd->callback([o, &exit_code] {
    const TrainConfig base = load_train_config(o->config, o->sets);
    std::vector<std::string> formats;
    std::string cur;
    for (char ch : o->formats + ",") {
      if (ch == ',') {
        if (!cur.empty()) formats.push_back(cur);
        cur.clear();
      } else if (ch != ' ') {
        cur += ch;
      }
    }
    const PrecisionReport r = run_precision(base, formats, !o->quiet);
    std::fputs(render_precision(r, o->rows).c_str(), stdout);
    if (!o->json.empty()) {
      write_file_atomic(o->json, precision_to_json(r).dump(1) + "\n");
      std::printf("wrote %s\n", o->json.c_str());
    }
    exit_code = 0;
  });
}

}  // namespace scaleinv
