// The diagnostics' rows (registry.h): each one's options, declared once here, and its run, table,
// JSON and figures (diagnostics.h).
#include "engine/diagnostics/registry.h"

#include <memory>

#include "engine/diagnostics/diagnostics.h"

namespace scaleinv::diag {

namespace {

// One row from a diagnostic's options type, its declarations and its four functions.
template <class Options, class Result>
Diagnostic row(std::string name, std::string summary, void (*declare)(OptionSink&, Options&),
               Result (*run)(const Options&), std::string (*table)(const Result&), nlohmann::json (*json)(const Result&),
               void (*plot)(const Result&, const std::string&)) {
  return Diagnostic{std::move(name), std::move(summary), [=](OptionSink& sink) -> DiagnosticRun {
                      auto o = std::make_shared<Options>();
                      declare(sink, *o);
                      sink.value("--seeds", o->seeds, "seeds per point (the interval is over seeds)");
                      return [=](bool show_progress) {
                        o->show_progress = show_progress;
                        auto r = std::make_shared<const Result>(run(*o));
                        return DiagnosticOutput{table(*r), json(*r), [r, plot](const std::string& dir) { plot(*r, dir); }};
                      };
                    }};
}

void declare_alignment(OptionSink& s, AlignmentOptions& o) {
  s.value("--model", o.model, "bigram (every layer) or gpt (the readout)");
  s.list("--param", o.params, "presets or TOML files, comma-separated (default sp)", true);
  s.value("--optimizer", o.optimizer, "sgd, adam, adamw, sign, adafactor, muon (default adam)");
  s.value("--lr", o.lr, "base LR at the table's base width (default 0.01)");
  s.value("--beta1", o.beta1, "Adam beta1 (default 0.9)");
  s.list("--widths", o.widths, "widths, comma-separated (default 64,...,1024)");
  s.value("--depth", o.depth, "bigram: hidden layers L; gpt: blocks (default 2)");
  s.value("--steps", o.steps, "optimizer steps on the fixed batch before measuring (default 1)");
  s.value("--batch", o.batch, "sequences in the fixed batch (default 16)");
  s.value("--seq-len", o.seq_len, "tokens per sequence (default 32)");
  s.value("--vocab", o.vocab, "markov vocabulary = readout outputs (default 64)");
  s.value("--activation", o.activation, "bigram nonlinearity (default linear)");
  s.flag("--rmsnorm", o.rmsnorm, true, "bigram with RMSNorm between layers (seed 000 A.1.3)");
  s.value("--head-dim", o.head_dim, "gpt head dimension (default 16)");
  s.value("--block", o.block, "gpt block placement pre|post|keel (default pre)");
}

void declare_transport(OptionSink& s, TransportOptions& o) {
  s.value("--model", o.model, "linear (random linear f, default) or gpt (its post/keel blocks at init)");
  s.list("--depths", o.depths, "depths L, comma-separated (default 2,4,...,64)");
  s.list("--shortcuts", o.shortcuts, "alpha = L^s exponents, comma-separated (default 0,1)");
  s.value("--width", o.width, "width d (default 256)");
  s.value("--batch", o.batch, "linear: input vectors; gpt: sequences (default 16)");
  s.value("--norm", o.norm, "linear: rms (the seed's LN, default) or layer (mean-subtracting)");
  s.value("--power-iters", o.power_iters, "power iterations (default 30)");
  s.value("--param", o.param, "gpt: width parameterization (its shortcut is replaced; default mup)", true);
  s.value("--block", o.block, "gpt: post (default) or keel");
  s.value("--seq-len", o.seq_len, "gpt: tokens per sequence (default 16)");
  s.value("--head-dim", o.head_dim, "gpt: head dimension (default 16)");
}

void declare_diversity(OptionSink& s, DiversityOptions& o) {
  s.list("--param", o.params, "presets, TOML files or 'ode' (depth-mup at alpha=1, gamma=0); default depth-mup,ode", true);
  s.value("--width", o.width, "width n (default 256)");
  s.value("--depth", o.depth, "blocks L >= 8 (default 64)");
  s.value("--steps", o.steps, "training steps (default 300)");
  s.value("--batch", o.batch, "training batch (default 64)");
  s.value("--optimizer", o.optimizer, "default adam");
  s.value("--lr", o.lr, "base LR (default 0.01)");
  s.value("--branch-mult", o.branch_mult, "block multiplier a (default 1)");
  s.value("--base-depth", o.base_depth, "base depth L0 (default 1: the branch is a L^-alpha)");
  s.value("--activation", o.activation, "relu (default), abs, ...");
  s.flag("--train-io", o.train_io, true, "train U and V too (seed 004 freezes them)");
  s.list("--lambdas", o.lambdas, "relative depths (default 0.25,0.5)");
  s.value("--data", o.data, "fashion_mnist (default) or gaussian");
  s.value("--fashion-dir", o.fashion_dir, "Fashion-MNIST directory");
  s.value("--in-dim", o.in_dim, "gaussian data: input dimension (default 784)");
  s.value("--eval-batch", o.eval_batch, "inputs d(eps) is averaged over (default 256)");
}

void declare_init_stats(OptionSink& s, InitStatsOptions& o) {
  s.list("--models", o.models, "gpt, vit or gpt,vit (default)");
  s.value("--param", o.param, "parameterization (default standard)", true);
  s.list("--widths", o.widths, "widths for the logit variance (default 64,...,512)");
  s.value("--depth", o.depth, "blocks for the logit variance (default 2)");
  s.list("--init-scales", o.init_scales, "init scales (C_Q C_K ~ s^4), at the second width");
  s.value("--stream-depth", o.stream_depth, "blocks of the residual-stream model (default 32)");
  s.value("--stream-width", o.stream_width, "its width (default 128)");
  s.value("--batch", o.batch, "sequences / images (default 4)");
  s.value("--seq-len", o.seq_len, "gpt tokens per sequence (default 32)");
  s.value("--head-dim", o.head_dim, "head dimension (default 16)");
}

void declare_depth_scaling(OptionSink& s, DepthScalingOptions& o) {
  s.list("--param", o.params, "presets, TOML files or 'ode' (default depth-mup,standard)", true);
  s.list("--depths", o.depths, "depths (default 4,8,...,128)");
  s.value("--width", o.width, "width (default 128)");
  s.value("--batch", o.batch, "fixed batch (default 64)");
  s.value("--optimizer", o.optimizer, "default adam");
  s.value("--lr", o.lr, "base LR (default 1e-3)");
  s.value("--activation", o.activation, "relu (default), abs, ...");
  s.flag("--no-pre-ln", o.pre_ln, false, "no LN before W_l (seed 004 eq. 1)");
  s.flag("--train-io", o.train_io, true, "train U and V too (default: only the W_l)");
  s.value("--branch-mult", o.branch_mult, "block multiplier a (default 1)");
  s.value("--base-depth", o.base_depth, "base depth L0 (default 4)");
  s.value("--data", o.data, "gaussian (default) or fashion_mnist");
  s.value("--in-dim", o.in_dim, "gaussian data: input dimension (default 64)");
}

}  // namespace

const std::vector<Diagnostic>& diagnostics() {
  static const std::vector<Diagnostic> rows = {
      row("alignment", "omega, alpha, u of seed 000 eqs. (18)-(20) across widths", declare_alignment, run_alignment,
          alignment_table, alignment_json, plot_alignment),
      row("transport", "post-LN backward transport ||prod alpha B_l|| against depth (eqs. 33, 35)", declare_transport,
          run_transport, transport_table, transport_json, plot_transport),
      row("diversity", "feature diversity exponent kappa (seed 004 Def. 5.6) of the residual MLP", declare_diversity,
          run_diversity, diversity_table, diversity_json, plot_diversity),
      row("init-stats", "seed 002 section 5 at init: attention-logit variance, residual stream", declare_init_stats,
          run_init_stats, init_stats_table, init_stats_json, plot_init_stats),
      row("depth-scaling", "residual MLP: top activation and one-step update against depth", declare_depth_scaling,
          run_depth_scaling, depth_scaling_table, depth_scaling_json, plot_depth_scaling),
  };
  return rows;
}

}  // namespace scaleinv::diag
