// `scaleinv scales --model KIND --param NAME|FILE [--widths 64,128,...] [--depths 2,4,...]
//                 [--optimizer adam] [--seed S] [--json PATH] [--plot DIR] [--strict]
//                 [--config FILE] [--set key=value]...`
// The RMS of every operation's output (forward) and of every gradient (backward) at init, PASS where
// within a factor 2 of 1 (src/engine/opcheck/unit_scales.h). Exit 0, or 1 under --strict when a row fails; 2 on bad input.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/atomic_file.h"
#include "brain/util/gnuplot.h"
#include "brain/util/errors.h"
#include "engine/optim/optimizer.h"
#include "brain/train/config.h"
#include "engine/opcheck/unit_scales.h"
#include "brain/models/model_kinds.h"

namespace scaleinv {

namespace {

// Small defaults (without --config): the model row's scales_defaults (brain/models/model_kinds.h).
// An unknown kind gets none: the config's own check names it (model.kind).
std::vector<std::string> scales_defaults(const std::string& kind) {
  const ModelKind* k = find_model_kind(kind);
  return k ? k->scales_defaults : std::vector<std::string>{};
}

}  // namespace

void add_scales_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string model, param, optimizer, widths, depths, json, plot, config;
    std::vector<std::string> sets;
    int64_t seed = 0;
    bool strict = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("scales",
                                 "RMS of every op's output and gradient at init, PASS within a factor 2 of 1 "
                                 "(unit scaling)");
  cmd->add_option("--model", o->model, model_kind_list() + " (default: the config's, gpt)");
  reads(cmd->add_option("--param", o->param, "preset name or .toml file, e.g. u-mup, mup, standard"));
  cmd->add_option("--optimizer", o->optimizer, "optimizer family for the table's columns (default adamw)");
  cmd->add_option("--widths", o->widths, "comma-separated widths (default: the config's width)");
  cmd->add_option("--depths", o->depths, "comma-separated depths (default: the config's depth)");
  cmd->add_option("--seed", o->seed, "init seed (default 0)");
  writes(cmd->add_option("--json", o->json, "write every RMS value as JSON to this path"));
  writes(cmd->add_option("--plot", o->plot, "write DIR/scales.svg and .png (gnuplot)"), /*dir=*/true);
  cmd->add_flag("--strict", o->strict, "exit 1 if any row is outside the band");
  reads(cmd->add_option("--config", o->config, "TOML config as for train"));
  cmd->add_option("--set", o->sets, "override a config field: section.key=value (repeatable)");
  cmd->callback([o, &exit_code] {
    if (!o->plot.empty()) require_gnuplot("--plot");  // before the measurement, not after it
    const ConfigSource source(o->config.empty() ? "command line" : o->config);  // model.* checks name it
    std::vector<std::string> sets;
    if (o->config.empty()) sets = scales_defaults(o->model.empty() ? TrainConfig{}.model.kind : o->model);
    if (!o->model.empty()) sets.push_back("model.kind=" + toml_quote(o->model));
    if (!o->param.empty()) sets.push_back("param.name=" + toml_quote(o->param));
    if (!o->optimizer.empty()) sets.push_back("optim.kind=" + toml_quote(o->optimizer));
    sets.insert(sets.end(), o->sets.begin(), o->sets.end());
    ScalesConfig sc;
    sc.train = load_train_config(o->config, sets);
    try {
      optimizer_family(sc.train.optim.kind);
    } catch (const UserError&) {
      throw UserError("command line", "--optimizer", fmt::format("unknown optimizer '{}'", sc.train.optim.kind),
                      std::string("use one of ") + optimizer_kinds());
    }
    if (!o->widths.empty()) sc.widths = parse_int_list("--widths", o->widths);
    if (!o->depths.empty()) sc.depths = parse_int_list("--depths", o->depths);
    sc.seed = o->seed;
    const ScalesResult r = run_scales(sc);
    std::fputs(render_scales(r).c_str(), stdout);
    if (!o->json.empty()) {
      write_file_atomic(o->json, scales_to_json(r).dump(1) + "\n");
      std::printf("wrote %s\n", o->json.c_str());
    }
    if (!o->plot.empty()) std::printf("wrote %s.svg and .png\n", plot_scales(r, o->plot).c_str());
    exit_code = (o->strict && !r.pass()) ? 1 : 0;
  });
}

}  // namespace scaleinv
