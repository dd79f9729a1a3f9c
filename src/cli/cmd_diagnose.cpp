// `scaleinv diagnose alignment|transport|diversity|init-stats|depth-scaling [options] [--json PATH]`
// The diagnostics beside the coordinate check (src/measure/diagnostics.h): each prints a table on
// stdout, optionally writes JSON (atomically), and shows a progress bar across its grid on stderr.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "core/atomic_file.h"
#include "core/gnuplot.h"
#include "measure/diagnostics.h"

namespace scaleinv {

namespace {

struct Common {
  std::string json, plot;
  bool quiet = false;
};

void add_common(CLI::App* c, Common& o, int& seeds) {
  c->add_option("--seeds", seeds, "seeds per point (the interval is over seeds)");
  writes(c->add_option("--json", o.json, "also write the result as JSON to this path (atomic)"));
  writes(c->add_option("--plot", o.plot, "also draw DIR/<diagnostic>.svg and .png (gnuplot)"), /*dir=*/true);
  c->add_flag("--quiet", o.quiet, "no progress bar");
}

// One diagnostic's run: a missing gnuplot refused before the measurement (not after it), the
// measurement, then its table, --json and --plot.
template <class Options, class Result>
void measure(const Common& o, Options& opts, Result (*run)(const Options&), std::string (*table)(const Result&),
             nlohmann::json (*json)(const Result&), void (*plot)(const Result&, const std::string&)) {
  if (!o.plot.empty()) require_gnuplot("--plot");
  opts.show_progress = !o.quiet;
  const Result r = run(opts);
  std::fputs(table(r).c_str(), stdout);
  std::fflush(stdout);
  if (!o.json.empty()) write_file_atomic(o.json, json(r).dump(2) + "\n");
  if (!o.plot.empty()) plot(r, o.plot);
}

// The options every diagnostic shares, added after its own (so --help lists them last), and its
// run when its subcommand is chosen: measure, then exit 0.
template <class Options, class Result>
void add_common_and_run(CLI::App* s, const std::shared_ptr<Options>& o, int& exit_code,
                        Result (*run)(const Options&), std::string (*table)(const Result&),
                        nlohmann::json (*json)(const Result&), void (*plot)(const Result&, const std::string&)) {
  auto c = std::make_shared<Common>();
  add_common(s, *c, o->seeds);
  s->callback([o, c, &exit_code, run, table, json, plot] {
    measure(*c, *o, run, table, json, plot);
    exit_code = 0;
  });
}

// `diagnose alignment`: seed 000's alignment exponents across widths (measure/alignment.cpp).
void add_alignment(CLI::App* cmd, int& exit_code) {
  auto o = std::make_shared<diag::AlignmentOptions>();
  auto* s = cmd->add_subcommand("alignment", "omega, alpha, u of seed 000 eqs. (18)-(20) across widths");
  s->add_option("--model", o->model, "bigram (every layer) or gpt (the readout)");
  reads(s->add_option("--param", o->params, "presets or TOML files, comma-separated (default sp)")->delimiter(','));
  s->add_option("--optimizer", o->optimizer, "sgd, adam, adamw, sign, adafactor, muon (default adam)");
  s->add_option("--lr", o->lr, "base LR at the table's base width (default 0.01)");
  s->add_option("--beta1", o->beta1, "Adam beta1 (default 0.9)");
  s->add_option("--widths", o->widths, "widths, comma-separated (default 64,...,1024)")->delimiter(',');
  s->add_option("--depth", o->depth, "bigram: hidden layers L; gpt: blocks (default 2)");
  s->add_option("--steps", o->steps, "optimizer steps on the fixed batch before measuring (default 1)");
  s->add_option("--batch", o->batch, "sequences in the fixed batch (default 16)");
  s->add_option("--seq-len", o->seq_len, "tokens per sequence (default 32)");
  s->add_option("--vocab", o->vocab, "markov vocabulary = readout outputs (default 64)");
  s->add_option("--activation", o->activation, "bigram nonlinearity (default linear)");
  s->add_flag("--rmsnorm", o->rmsnorm, "bigram with RMSNorm between layers (seed 000 A.1.3)");
  s->add_option("--head-dim", o->head_dim, "gpt head dimension (default 16)");
  s->add_option("--block", o->block, "gpt block placement pre|post|keel (default pre)");
  add_common_and_run(s, o, exit_code, diag::run_alignment, diag::alignment_table,
                     diag::alignment_json, diag::plot_alignment);
}

// `diagnose transport`: the post-LN backward transport against depth (measure/transport.cpp).
void add_transport(CLI::App* cmd, int& exit_code) {
  auto o = std::make_shared<diag::TransportOptions>();
  auto* s = cmd->add_subcommand("transport", "post-LN backward transport ||prod alpha B_l|| against depth (eqs. 33, 35)");
  s->add_option("--model", o->model, "linear (random linear f, default) or gpt (its post/keel blocks at init)");
  s->add_option("--depths", o->depths, "depths L, comma-separated (default 2,4,...,64)")->delimiter(',');
  s->add_option("--shortcuts", o->shortcuts, "alpha = L^s exponents, comma-separated (default 0,1)")->delimiter(',');
  s->add_option("--width", o->width, "width d (default 256)");
  s->add_option("--batch", o->batch, "linear: input vectors; gpt: sequences (default 16)");
  s->add_option("--norm", o->norm, "linear: rms (the seed's LN, default) or layer (mean-subtracting)");
  s->add_option("--power-iters", o->power_iters, "power iterations (default 30)");
  reads(s->add_option("--param", o->param, "gpt: width parameterization (its shortcut is replaced; default mup)"));
  s->add_option("--block", o->block, "gpt: post (default) or keel");
  s->add_option("--seq-len", o->seq_len, "gpt: tokens per sequence (default 16)");
  s->add_option("--head-dim", o->head_dim, "gpt: head dimension (default 16)");
  add_common_and_run(s, o, exit_code, diag::run_transport, diag::transport_table,
                     diag::transport_json, diag::plot_transport);
}

// `diagnose diversity`: the residual MLP's feature diversity exponent (measure/diversity.cpp).
void add_diversity(CLI::App* cmd, int& exit_code) {
  auto o = std::make_shared<diag::DiversityOptions>();
  auto* s = cmd->add_subcommand("diversity", "feature diversity exponent kappa (seed 004 Def. 5.6) of the residual MLP");
  reads(s->add_option("--param", o->params, "presets, TOML files or 'ode' (depth-mup at alpha=1, gamma=0); default depth-mup,ode")
            ->delimiter(','));
  s->add_option("--width", o->width, "width n (default 256)");
  s->add_option("--depth", o->depth, "blocks L >= 8 (default 64)");
  s->add_option("--steps", o->steps, "training steps (default 300)");
  s->add_option("--batch", o->batch, "training batch (default 64)");
  s->add_option("--optimizer", o->optimizer, "default adam");
  s->add_option("--lr", o->lr, "base LR (default 0.01)");
  s->add_option("--branch-mult", o->branch_mult, "block multiplier a (default 1)");
  s->add_option("--base-depth", o->base_depth, "base depth L0 (default 1: the branch is a L^-alpha)");
  s->add_option("--activation", o->activation, "relu (default), abs, ...");
  s->add_flag("--train-io", o->train_io, "train U and V too (seed 004 freezes them)");
  s->add_option("--lambdas", o->lambdas, "relative depths (default 0.25,0.5)")->delimiter(',');
  s->add_option("--data", o->data, "fashion_mnist (default) or gaussian");
  s->add_option("--fashion-dir", o->fashion_dir, "Fashion-MNIST directory");
  s->add_option("--in-dim", o->in_dim, "gaussian data: input dimension (default 784)");
  s->add_option("--eval-batch", o->eval_batch, "inputs d(eps) is averaged over (default 256)");
  add_common_and_run(s, o, exit_code, diag::run_diversity, diag::diversity_table,
                     diag::diversity_json, diag::plot_diversity);
}

// `diagnose init-stats`: attention-logit variance and the residual stream at init (measure/init_stats.cpp).
void add_init_stats(CLI::App* cmd, int& exit_code) {
  auto o = std::make_shared<diag::InitStatsOptions>();
  auto* s = cmd->add_subcommand("init-stats", "seed 002 section 5 at init: attention-logit variance, residual stream");
  s->add_option("--models", o->models, "gpt, vit or gpt,vit (default)")->delimiter(',');
  reads(s->add_option("--param", o->param, "parameterization (default standard)"));
  s->add_option("--widths", o->widths, "widths for the logit variance (default 64,...,512)")->delimiter(',');
  s->add_option("--depth", o->depth, "blocks for the logit variance (default 2)");
  s->add_option("--init-scales", o->init_scales, "init scales (C_Q C_K ~ s^4), at the second width")->delimiter(',');
  s->add_option("--stream-depth", o->stream_depth, "blocks of the residual-stream model (default 32)");
  s->add_option("--stream-width", o->stream_width, "its width (default 128)");
  s->add_option("--batch", o->batch, "sequences / images (default 4)");
  s->add_option("--seq-len", o->seq_len, "gpt tokens per sequence (default 32)");
  s->add_option("--head-dim", o->head_dim, "head dimension (default 16)");
  add_common_and_run(s, o, exit_code, diag::run_init_stats, diag::init_stats_table,
                     diag::init_stats_json, diag::plot_init_stats);
}

// `diagnose depth-scaling`: the residual MLP's activations and updates against depth (measure/depth_scaling.cpp).
void add_depth_scaling(CLI::App* cmd, int& exit_code) {
  auto o = std::make_shared<diag::DepthScalingOptions>();
  auto* s = cmd->add_subcommand("depth-scaling", "residual MLP: top activation and one-step update against depth");
  reads(s->add_option("--param", o->params, "presets, TOML files or 'ode' (default depth-mup,standard)")->delimiter(','));
  s->add_option("--depths", o->depths, "depths (default 4,8,...,128)")->delimiter(',');
  s->add_option("--width", o->width, "width (default 128)");
  s->add_option("--batch", o->batch, "fixed batch (default 64)");
  s->add_option("--optimizer", o->optimizer, "default adam");
  s->add_option("--lr", o->lr, "base LR (default 1e-3)");
  s->add_option("--activation", o->activation, "relu (default), abs, ...");
  s->add_flag_callback("--no-pre-ln", [o] { o->pre_ln = false; }, "no LN before W_l (seed 004 eq. 1)");
  s->add_flag("--train-io", o->train_io, "train U and V too (default: only the W_l)");
  s->add_option("--branch-mult", o->branch_mult, "block multiplier a (default 1)");
  s->add_option("--base-depth", o->base_depth, "base depth L0 (default 4)");
  s->add_option("--data", o->data, "gaussian (default) or fashion_mnist");
  s->add_option("--in-dim", o->in_dim, "gaussian data: input dimension (default 64)");
  add_common_and_run(s, o, exit_code, diag::run_depth_scaling, diag::depth_scaling_table,
                     diag::depth_scaling_json, diag::plot_depth_scaling);
}

}  // namespace

void add_diagnose_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "diagnose", "Measure alignment exponents, post-LN transport, feature diversity, init statistics, depth scaling");
  cmd->require_subcommand(1);
  add_alignment(cmd, exit_code);
  add_transport(cmd, exit_code);
  add_diversity(cmd, exit_code);
  add_init_stats(cmd, exit_code);
  add_depth_scaling(cmd, exit_code);
}

}  // namespace scaleinv
