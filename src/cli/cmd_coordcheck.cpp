// `scaleinv coordcheck --model bigram|resmlp|gpt|vit --param NAME|FILE --optimizer sgd|adam|adamw|sign|adafactor|muon
//                     --widths 64,128,... [--depths 4,8,...] [--experts 4,8,...] --steps T --seeds S [--lr X]
//                     [--json PATH] [--plot DIR] [--strict] [--config FILE] [--set key=value]...
//                     [--break readout-multiplier] [--omega-hidden X] [--omega-readout X]
//                     [--align-alpha X] [--align-u X] [--train-batches N] [--quantities LIST]
//                     [--device cpu|cuda] [--quiet]`
// Measures how every activation, gradient and update scales with width (and depth) and judges the
// slopes against the theory's exponents (engine/coordcheck/coordcheck.h). Exit 0, or 1 under --strict when a
// quantity deviates from theory or is unstable; 2 on bad input.
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
#include "engine/runtime/device.h"
#include "brain/util/errors.h"
#include "brain/util/fraction.h"
#include "engine/coordcheck/coordcheck.h"
#include "brain/models/model_kinds.h"
#include "engine/optim/optimizer.h"
#include "brain/train/config.h"

namespace scaleinv {

namespace {

// Small defaults (without --config): the model row's coordcheck_defaults (brain/models/model_kinds.h).
// The check is sharp for widths well above n = probe inputs + outputs (engine/coordcheck/coordcheck.h: the
// finite-size term), so the probe is small.
std::vector<std::string> default_sets(const std::string& kind) {
  return model_kind(kind, "command line", "--model").coordcheck_defaults;
}

// What the flags hold, read by the callback.
struct CoordcheckFlags {
  std::string model, param, optimizer, widths, depths, experts, json, plot, config, break_mode, device, quantities = "all";
  std::string omega_hidden = "1/2", omega_readout = "1", align_alpha = "1", align_u = "1";
  std::vector<std::string> sets;
  int steps = 3, seeds = 3;
  int64_t train_batches = 1;
  double lr = 0;
  bool strict = false, quiet = false;
};

void add_coordcheck_options(CLI::App* cmd, CoordcheckFlags& o) {
  cmd->add_option("--model", o.model, model_kind_list() + " (default: the config's, gpt)");
  reads(cmd->add_option("--param", o.param, "preset name or .toml file (default: the config's, mup)"));
  cmd->add_option("--optimizer", o.optimizer, "sgd, adam, adamw, sign, adafactor or muon (default: the config's, adamw)");
  cmd->add_option("--widths", o.widths, "comma-separated widths, e.g. 64,128,256 (default: the config's width)");
  cmd->add_option("--depths", o.depths, "comma-separated depths (default: the config's depth)");
  cmd->add_option("--experts", o.experts,
                  "comma-separated expert counts of a mixture (--model moe): an expert-count axis at every width, "
                  "first depth (default: the config's model.experts)");
  cmd->add_option("--steps", o.steps, "training steps T; quantities are recorded at steps 0..T (default 3)");
  cmd->add_option("--seeds", o.seeds, "number of seeds 0..S-1 (default 3); the interval is over seeds");
  cmd->add_option("--lr", o.lr, "base learning rate (default: the config's, 1e-3)");
  writes(cmd->add_option("--json", o.json, "write everything (rows, fits, raw RMS values) as JSON to this path"));
  writes(cmd->add_option("--plot", o.plot, "write SVG and PNG plots (gnuplot) into this directory"), /*dir=*/true);
  cmd->add_flag("--strict", o.strict, "exit 1 if any quantity deviates from theory or is unstable");
  reads(cmd->add_option("--config", o.config, "TOML config as for train (sections model, param, hp, optim, data, train)"));
  cmd->add_option("--set", o.sets, "override a config field: section.key=value (repeatable)");
  cmd->add_option("--break", o.break_mode,
                  "readout-multiplier: build the model with the readout multiplier exponent a = 0 (tests that the "
                  "check can fail; predictions keep the unbroken table)");
  cmd->add_option("--omega-hidden", o.omega_hidden, "alignment of W_l with dh_l, hidden layers (eq. 18; default 1/2)");
  cmd->add_option("--omega-readout", o.omega_readout, "alignment at the readout (eq. 18; default 1, as muP)");
  cmd->add_option("--align-alpha", o.align_alpha, "alignment of dW_l with h_l (eq. 19; default 1)");
  cmd->add_option("--align-u", o.align_u, "alignment of dW_l with dh_l (eq. 20; default 1)");
  cmd->add_option("--train-batches", o.train_batches,
                  "training steps cycle through this many fixed batches (default 1: train on the probe batch)");
  cmd->add_option("--quantities", o.quantities,
                  "what to measure: comma-separated h, dh, hgrad, wgrad, dw, wspec, dwspec or all (default all; the "
                  "spectral norms wspec, dwspec cost most at large widths)");
  cmd->add_option("--device", o.device,
                  "cpu or cuda: where every model trains (default: the config's train.device, cpu); the models are "
                  "initialised on the CPU either way, so both devices measure the same networks");
  cmd->add_flag("--quiet", o.quiet, "no progress bar");
}

// The run's config overrides: (file or coordcheck defaults), then the flags, then --set. A flag
// with a bad value is refused here, by the flag's name.
std::vector<std::string> config_overrides(const CoordcheckFlags& o) {
  std::vector<std::string> sets;
  std::string kind = o.model;
  if (o.config.empty()) {
    if (kind.empty()) kind = TrainConfig{}.model.kind;
    sets = default_sets(kind);
  }
  if (!o.model.empty()) sets.push_back("model.kind=" + toml_quote(o.model));
  if (!o.param.empty()) sets.push_back("param.name=" + toml_quote(o.param));
  if (!o.optimizer.empty()) {
    try {  // by the flag's name (the config would name optim.kind)
      optimizer_family(o.optimizer);
    } catch (const UserError&) {
      throw UserError("command line", "--optimizer", fmt::format("unknown optimizer '{}'", o.optimizer),
                      std::string("use one of ") + optimizer_kinds());
    }
    sets.push_back("optim.kind=" + toml_quote(o.optimizer));
  }
  if (o.lr != 0) {
    if (!(o.lr > 0))
      throw UserError("command line", "--lr", fmt::format("{} is not positive", o.lr), "give e.g. --lr 0.01");
    sets.push_back(fmt::format("optim.lr={:.17g}", o.lr));
  }
  // Upper bounds: every quantity is kept for every step, seed and shape (memory before any work),
  // and a coordinate check reads the first few steps (seed 000 judges the first).
  if (o.steps < 1 || o.steps > 10000)
    throw UserError("command line", "--steps", fmt::format("{} steps", o.steps), "use from 1 to 10000 steps");
  sets.push_back(fmt::format("train.steps={}", o.steps));
  if (!o.device.empty()) sets.push_back("train.device=" + toml_quote(o.device));
  sets.insert(sets.end(), o.sets.begin(), o.sets.end());
  return sets;
}

// The check the flags ask for: the run's config, its shapes, seeds, alignments and quantities.
CoordCheckConfig coordcheck_config(const CoordcheckFlags& o) {
  CoordCheckConfig cc;
  cc.train = load_train_config(o.config, config_overrides(o));
  if (o.config.empty()) cc.train.source = "command line";  // flags only: errors name the command line
  if (!o.widths.empty()) cc.widths = parse_int_list("--widths", o.widths);
  if (!o.depths.empty()) cc.depths = parse_int_list("--depths", o.depths);
  if (!o.experts.empty()) cc.experts = parse_int_list("--experts", o.experts);
  cc.steps = o.steps;
  if (o.seeds < 2 || o.seeds > 1000)  // the interval over seeds needs two
    throw UserError("command line", "--seeds", fmt::format("{} seed(s)", o.seeds), "use from 2 to 1000 seeds");
  cc.seeds.clear();
  for (int s = 0; s < o.seeds; ++s) cc.seeds.push_back(s);
  cc.train_batches = o.train_batches;
  cc.break_mode = o.break_mode;
  cc.align.omega_hidden = alignment_value("--omega-hidden", o.omega_hidden);
  cc.align.omega_readout = alignment_value("--omega-readout", o.omega_readout);
  cc.align.alpha = alignment_value("--align-alpha", o.align_alpha);
  cc.align.u = alignment_value("--align-u", o.align_u);
  cc.quantities = parse_coord_quantities(o.quantities, "command line");
  cc.show_progress = !o.quiet;
  return cc;
}

// The table on stdout, then --json and --plot; the exit code: 1 when --strict and a verdict failed.
int report_coordcheck(const CoordCheckResult& r, const CoordcheckFlags& o) {
  std::fputs(render_coordcheck(r).c_str(), stdout);
  if (!o.json.empty()) {
    write_file_atomic(o.json, coordcheck_to_json(r).dump(1) + "\n");
    std::printf("wrote %s\n", o.json.c_str());
  }
  if (!o.plot.empty()) {
    const auto stems = plot_coordcheck(r, o.plot);
    std::printf("wrote %zu plots (SVG and PNG) into %s\n", stems.size(), o.plot.c_str());
  }
  if (o.strict && !r.pass()) {
    // The last lines name each failed quantity and verdict.
    std::printf("strict: %zu failed verdicts\n", r.failures.size());
    for (const std::string& f : r.failures) std::printf("FAILED %s\n", f.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void add_coordcheck_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<CoordcheckFlags>();
  auto* cmd = app.add_subcommand("coordcheck",
                                 "Measure how activations, gradients and updates scale with width/depth and judge the "
                                 "slopes against the theory");
  add_coordcheck_options(cmd, *o);
  cmd->callback([o, &exit_code] {
    if (!o->device.empty()) resolve_device(o->device, "command line", "--device");  // before any work
    if (!o->plot.empty()) require_gnuplot("--plot");
    const CoordCheckResult r = run_coordcheck(coordcheck_config(*o));
    exit_code = report_coordcheck(r, *o);
  });
}

}  // namespace scaleinv
