// Alignment exponents of seed 000 eqs. (18)-(20), measured (src/engine/diagnostics/diagnostics.h).
//
// For each width d and seed: build the model, take one fixed batch of the markov source, record
// every layer's input h_l at init, run T optimizer steps on that batch, record again. With W_l the
// weight at init (the raw tensor: the forward multiplier d^-a_l is outside W_l in eq. (1) and
// cancels from every ratio anyway), dW_l = W_l(T) - W_l(0) and dh_l = h_l(T) - h_l(0):
//
//   omega ratio  RMS(W_l dh_l)  / (RMS(W_l)  RMS(dh_l))      ~ d^omega_l   (eq. 18)
//   alpha ratio  RMS(dW_l h_l)  / (RMS(dW_l) RMS(h_l))       ~ d^alpha_l   (eq. 19)
//   u ratio      RMS(dW_l dh_l) / (RMS(dW_l) RMS(dh_l))      ~ d^u_l       (eq. 20)
//
// RMS is over every entry: of the [tokens, d] activations, the [out, in] weights and the
// [tokens, out] products, so at the readout the products' RMS is over the vocab-size outputs.
// These three terms are exactly dh_{l+1} = d^-a_l (W_l dh_l + dW_l h_l + dW_l dh_l) for a linear layer.
// The exponent is the log-log slope of the ratio over widths; its interval is over seeds.
//
// Bigram (seed 000 eq. 1): every layer l = 1..L+1 (h_l = the recorded activations in forward order,
// by role). GPT: the readout only, whose input is LN_f(h_L) (recomputed with the model's own final
// norm from the top of its recorded stream).
#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/util/errors.h"
#include "brain/util/fraction.h"
#include "engine/runtime/tensor_rms.h"
#include "engine/diagnostics/diag_detail.h"
#include "engine/diagnostics/diagnostics.h"
#include "engine/models/layers.h"
#include "brain/models/model_kinds.h"
#include "brain/theory/width_theory.h"

namespace scaleinv::diag {

namespace {

// The models the diagnostic builds, by their row's alignment trait (brain/models/model_kinds.h): the chain
// of seed 000 eq. 1 (every layer measured) and the transformer (its readout).
AlignmentView view_of(const std::string& model) {
  const ModelKind* k = find_model_kind(model);
  return k ? k->alignment : AlignmentView::None;
}
bool every_layer(const std::string& model) { return view_of(model) == AlignmentView::EveryLayer; }
bool readout_only(const std::string& model) { return view_of(model) == AlignmentView::Readout; }

// "use bigram (every layer) or gpt (the readout)"
std::string alignment_models_fix() {
  std::vector<std::string> names;
  for (const ModelKind& k : model_kinds())
    if (k.alignment != AlignmentView::None)
      names.push_back(k.name + (k.alignment == AlignmentView::EveryLayer ? " (every layer)" : " (the readout)"));
  return fmt::format("use {}", fmt::join(names, " or "));
}

struct Snapshot {
  std::vector<torch::Tensor> h;  // layer inputs, [N, d] each, in the order of `weights`
  std::vector<torch::Tensor> w;  // the weights (cloned), [out, in]
  torch::Tensor logits;          // [N, V]
};

// The layers' inputs, weights and logits, found by role (diag_detail.h): every layer's input (each
// recorded activation but the logits: the embedding's output feeds the first hidden matrix, the
// last hidden output the readout) and every hidden matrix then the readout; under a readout-only
// view (gpt) the readout's input, the model's final norm of the top of its stream.
Snapshot snapshot(Model& m, const ModelConfig& mc, const torch::Tensor& x) {
  torch::NoGradGuard ng;
  const detail::RecordedForward rec = detail::recorded_forward(m, x);
  Snapshot s;
  auto flat = [](const torch::Tensor& t) { return t.reshape({-1, t.size(-1)}).clone(); };
  for (size_t i = 0; i < rec.tensors.size(); ++i)
    if (rec.roles[i].role == Role::Readout) s.logits = flat(rec.tensors[i]);
  if (!s.logits.defined()) throw std::logic_error("alignment: the model recorded no logits (role readout)");
  if (every_layer(mc.kind)) {
    for (size_t i = 0; i < rec.tensors.size(); ++i)
      if (rec.roles[i].role != Role::Readout) s.h.push_back(flat(rec.tensors[i]));
    s.w = detail::hidden_weights(m);
    s.w.push_back(detail::readout_weight(m));
    if (s.h.size() != s.w.size())
      throw std::logic_error(fmt::format("alignment: {} recorded inputs for {} weights", s.h.size(), s.w.size()));
  } else {  // the readout's input: the final norm of the top of the stream
    const std::shared_ptr<NormGain> norm = detail::final_norm(m);
    if (!norm) throw std::logic_error("alignment: the model has no final norm before its readout");
    s.h.push_back(flat(norm->forward(detail::transformer_stream(rec).back())));
    s.w.push_back(detail::readout_weight(m));
  }
  return s;
}

double ratio(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& prod) {
  const double den = tensor_rms(a) * tensor_rms(b);
  return den > 0 ? tensor_rms(prod) / den : std::nan("");
}

void validate(const AlignmentOptions& o) {
  using detail::require;
  using detail::require_lr;
  require(view_of(o.model) != AlignmentView::None, "--model", fmt::format("unknown model '{}'", o.model), alignment_models_fix());
  require(!o.params.empty(), "--param", "no parameterization given", "e.g. --param sp,mup");
  detail::require_optimizer(o.optimizer);
  detail::require_grid(o.widths, "--widths");
  detail::require_activation(o.activation);
  require(o.depth >= 1, "--depth", fmt::format("depth {} < 1", o.depth), "give at least 1 hidden layer / block");
  try {  // by the flag's name (the model would name model.block)
    parse_placement(o.block);
  } catch (const UserError&) {
    require(false, "--block", fmt::format("unknown block placement '{}'", o.block), "use one of pre, post, keel");
  }
  require(o.steps >= 1, "--steps", fmt::format("steps {} < 1", o.steps), "give at least 1 optimizer step");
  require(o.seeds >= 1, "--seeds", fmt::format("seeds {} < 1", o.seeds), "give at least 1 seed (3 for an interval)");
  require_lr(o.lr, "--lr 0.01");
  require(o.beta1 >= 0 && o.beta1 < 1, "--beta1", fmt::format("beta1 {} is outside [0, 1)", o.beta1), "e.g. 0.9");
  require(o.batch >= 1, "--batch", fmt::format("batch {} < 1", o.batch), "e.g. --batch 16");
  require(o.seq_len >= 1, "--seq-len", fmt::format("seq-len {} < 1", o.seq_len), "e.g. --seq-len 32");
  require(o.vocab >= 2 && o.vocab <= 2048, "--vocab", fmt::format("vocab {} is outside [2, 2048]", o.vocab),
          "e.g. --vocab 64");
  if (readout_only(o.model)) {
    require(o.head_dim > 0, "--head-dim", fmt::format("head_dim {} < 1", o.head_dim), "e.g. --head-dim 16");
    for (int w : o.widths)
      require(w % o.head_dim == 0, "--widths",
              fmt::format("width {} is not a multiple of head_dim {}", w, o.head_dim),
              "use widths divisible by --head-dim");
  }
}

std::pair<int, int> top_pair(const AlignmentOptions& o) {
  std::vector<int> w = o.widths;
  std::sort(w.begin(), w.end());
  return {w[w.size() - 2], w.back()};
}

std::string verdict_between(const Fit& f, double a, const std::string& a_name, double b, const std::string& b_name) {
  const bool ca = f.contains(a), cb = f.contains(b);
  if (!std::isfinite(f.slope)) return "no measurement";
  if (ca && !cb) return "supports " + a_name;
  if (cb && !ca) return "supports " + b_name;
  if (ca && cb) return "cannot separate " + a_name + " from " + b_name + " (the interval covers both)";
  const bool nearer_a = std::fabs(f.slope - a) < std::fabs(f.slope - b);
  return fmt::format("excludes both; nearer {}", nearer_a ? a_name : b_name);
}

// One markov source per seed (its seed = the seed), shared by every width and table.
std::vector<Batch> seed_batches(const AlignmentOptions& o) {
  std::vector<Batch> batches;
  for (int s = 0; s < o.seeds; ++s) {
    DataConfig dc;
    dc.source = "markov";
    dc.vocab = o.vocab;
    dc.seq_len = o.seq_len;
    dc.markov_length = std::max<int64_t>(1 << 14, int64_t(4) * o.seq_len);
    dc.seed = s;
    batches.push_back(make_data(dc)->batch(Split::Train, 0, o.batch));
  }
  return batches;
}

// The columns of the two largest widths (smaller first), for the local slope.
struct TopColumns {
  size_t i1, i2;
};

TopColumns top_columns(const std::vector<double>& xs) {
  std::vector<size_t> order(xs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return xs[a] < xs[b]; });
  return {order[order.size() - 2], order.back()};
}

Fit top_fit(const std::vector<double>& xs, const TopColumns& top, const std::vector<std::vector<double>>& v) {
  std::vector<std::vector<double>> t;
  for (const auto& row : v) t.push_back({row[top.i1], row[top.i2]});
  return fit_slope({xs[top.i1], xs[top.i2]}, t, true, true);
}

// Measured layers: every layer of the bigram, the readout of gpt.
int measured_layers(const AlignmentOptions& o) { return every_layer(o.model) ? o.depth + 1 : 1; }

// A param's result with its layers named and every [seed][width] table sized, before measuring.
AlignmentParam empty_param(const AlignmentOptions& o, const std::string& param) {
  AlignmentParam ap;
  ap.param = param;
  for (int i = 0; i < measured_layers(o); ++i) {
    AlignmentLayer al;
    al.layer = every_layer(o.model) ? i + 1 : o.depth + 1;
    al.role = (readout_only(o.model) || i == o.depth) ? "readout" : "hidden";
    al.omega_ratio.assign(o.seeds, std::vector<double>(o.widths.size()));
    al.alpha_ratio = al.u_ratio = al.dh_in_rms = al.omega_ratio;
    ap.layers.push_back(std::move(al));
  }
  ap.logit_update_rms.assign(o.seeds, std::vector<double>(o.widths.size()));
  return ap;
}

ModelConfig model_config(const AlignmentOptions& o, int width) {
  ModelConfig mc;
  mc.kind = o.model;
  mc.width = width;
  mc.depth = o.depth;
  mc.vocab = o.vocab;
  mc.seq_len = o.seq_len;
  mc.activation = o.activation;
  mc.rmsnorm = o.rmsnorm;
  mc.head_dim = o.head_dim;
  mc.block = o.block;
  return mc;
}

// Width column wi, seed s: build the model, snapshot, train o.steps on the seed's batch, snapshot
// again, and record every layer's ratios and the logit update.
void measure_run(const AlignmentOptions& o, const ParamTable& table, OptFamily family, const ModelConfig& mc,
                 const Batch& b, size_t wi, int s, AlignmentParam& ap) {
  ScaleContext ctx{table, family, mc.width, mc.depth};
  torch::manual_seed(static_cast<uint64_t>(s));
  auto model = build_model(mc, ctx, Hyper{});
  Snapshot before = snapshot(*model, mc, b.x);
  auto opt = detail::make_diag_optimizer(*model, o.optimizer, o.lr, o.beta1);
  // A diverged step (NaN loss) leaves NaN ratios, which print and serialise as nan / null.
  detail::train_steps(*model, *opt, o.steps, [&](int64_t) { return b; });
  Snapshot after = snapshot(*model, mc, b.x);
  for (int i = 0; i < measured_layers(o); ++i) {
    const torch::Tensor& W = before.w[i];
    const torch::Tensor dW = after.w[i] - before.w[i];
    const torch::Tensor& h = before.h[i];
    const torch::Tensor dh = after.h[i] - before.h[i];
    AlignmentLayer& al = ap.layers[i];
    al.omega_ratio[s][wi] = ratio(W, dh, dh.matmul(W.t()));
    al.alpha_ratio[s][wi] = ratio(dW, h, h.matmul(dW.t()));
    al.u_ratio[s][wi] = ratio(dW, dh, dh.matmul(dW.t()));
    al.dh_in_rms[s][wi] = tensor_rms(dh);
  }
  ap.logit_update_rms[s][wi] = tensor_rms(after.logits - before.logits);
}

// The exponents: slopes over all widths and between the two largest.
void fit_exponents(const std::vector<double>& xs, const TopColumns& top, AlignmentParam& ap) {
  for (auto& al : ap.layers) {
    al.omega = fit_slope(xs, al.omega_ratio, true, true);
    al.alpha = fit_slope(xs, al.alpha_ratio, true, true);
    al.u = fit_slope(xs, al.u_ratio, true, true);
    al.dh_in = fit_slope(xs, al.dh_in_rms, true, true);
    al.omega_top = top_fit(xs, top, al.omega_ratio);
    al.alpha_top = top_fit(xs, top, al.alpha_ratio);
    al.u_top = top_fit(xs, top, al.u_ratio);
  }
  ap.logit_update = fit_slope(xs, ap.logit_update_rms, true, true);
  ap.logit_update_top = top_fit(xs, top, ap.logit_update_rms);
}

// The readout's omega against 1 and 1/2; for the bigram also the logit update against width_theory's
// two predictions (which it records in ap).
std::string readout_finding(const AlignmentOptions& o, const ParamTable& table, OptFamily family, const TopColumns& top,
                            AlignmentParam& ap) {
  const AlignmentLayer& ro = ap.layers.back();
  const std::string one = "omega_readout = 1 (muP's worst case)", half = "omega_readout = 1/2 (Everett et al.)";
  std::string finding = fmt::format(
      "readout omega = {} over all widths: {}; {} between d = {} and {}: {}", fit_text(ro.omega),
      verdict_between(ro.omega, 1.0, one, 0.5, half), fit_text(ro.omega_top), o.widths[top.i1], o.widths[top.i2],
      verdict_between(ro.omega_top, 1.0, one, 0.5, half));
  if (every_layer(o.model)) {
    ap.has_theory = true;
    Alignment a1, ah;
    a1.omega_readout = 1.0;
    ah.omega_readout = 0.5;
    const WidthTheory w1 = width_theory(table, family, o.depth, a1, o.rmsnorm);
    const WidthTheory wh = width_theory(table, family, o.depth, ah, o.rmsnorm);
    ap.pred_logit_omega1 = w1.dh(o.depth + 2);
    ap.pred_logit_omega_half = wh.dh(o.depth + 2);
    ap.assumed_omega_hidden = a1.omega_hidden;
    if (std::fabs(ap.pred_logit_omega1 - ap.pred_logit_omega_half) > kExponentTol) {
      auto v = [&](const Fit& f) {
        return verdict_between(f, ap.pred_logit_omega1, "omega_readout = 1", ap.pred_logit_omega_half,
                               "omega_readout = 1/2");
      };
      finding += fmt::format("; logit update slope {} over all widths ({}), {} between the two largest ({}), "
                             "against width_theory's {} if omega_readout = 1 or {} if 1/2",
                             fit_text(ap.logit_update), v(ap.logit_update), fit_text(ap.logit_update_top),
                             v(ap.logit_update_top), format_fraction(ap.pred_logit_omega1),
                             format_fraction(ap.pred_logit_omega_half));
    } else {
      finding += fmt::format("; the logit update ({}) cannot tell them apart under this table: width_theory "
                             "predicts {} either way",
                             fit_text(ap.logit_update), format_fraction(ap.pred_logit_omega1));
    }
  }
  return finding;
}

}  // namespace

AlignmentResult run_alignment(const AlignmentOptions& o) {
  validate(o);
  const OptFamily family = optimizer_family(o.optimizer);
  std::vector<ParamTable> tables;
  for (const auto& p : o.params) tables.push_back(detail::load_diag_param(p));

  const std::vector<Batch> batches = seed_batches(o);
  AlignmentResult r;
  r.opts = o;
  for (const Batch& b : batches)
    r.distinct_inputs += (every_layer(o.model) ? std::get<0>(at::_unique(b.x)).numel() : b.x.numel()) /
                         static_cast<double>(o.seeds);

  std::vector<double> xs(o.widths.begin(), o.widths.end());
  const TopColumns top = top_columns(xs);
  detail::Bar bar(o.show_progress, long(tables.size() * o.widths.size() * o.seeds), "alignment");
  for (size_t pi = 0; pi < tables.size(); ++pi) {
    const ParamTable& table = tables[pi];
    AlignmentParam ap = empty_param(o, o.params[pi]);
    for (size_t wi = 0; wi < o.widths.size(); ++wi) {
      for (int s = 0; s < o.seeds; ++s) {
        const ModelConfig mc = model_config(o, o.widths[wi]);
        measure_run(o, table, family, mc, batches[s], wi, s, ap);
        bar.tick(fmt::format("{} d={} seed {}", ap.param, mc.width, s));
      }
    }
    fit_exponents(xs, top, ap);
    ap.readout_finding = readout_finding(o, table, family, top, ap);
    r.params.push_back(std::move(ap));
  }
  bar.finish();
  return r;
}

std::string alignment_table(const AlignmentResult& r) {
  const AlignmentOptions& o = r.opts;
  std::string s;
  s += fmt::format("alignment (seed 000 eqs. 18-20): model {} (L = {}{}), optimizer {} lr {} beta1 {}, {} step(s) on "
                   "one fixed batch ({} x {} markov tokens, vocab {}), widths {}, {} seed(s)\n",
                   o.model, o.depth, every_layer(o.model) ? fmt::format(", {}{}", o.activation, o.rmsnorm ? ", rmsnorm" : "") : "",
                   o.optimizer, o.lr, o.beta1, o.steps, o.batch, o.seq_len, o.vocab, fmt::join(o.widths, ", "), o.seeds);
  s += "exponent of d of each ratio (log-log slope over widths) [95% interval over seeds]; the seed's range is [1/2, 1]\n";
  s += fmt::format("distinct inputs in the fixed batch: {:.0f} (a one-step update has at most that rank: alpha -> 1 "
                   "only for d well above it)\n",
                   r.distinct_inputs);
  for (const auto& ap : r.params) {
    s += fmt::format("\nparam {}\n", ap.param);
    s += fmt::format("{:<6}{:<9}{:<26}{:<26}{:<26}{}\n", "layer", "role", "omega (W dh)", "alpha (dW h)", "u (dW dh)",
                     "RMS(dh_l) slope");
    for (const auto& al : ap.layers)
      s += fmt::format("{:<6}{:<9}{:<26}{:<26}{:<26}{}\n", al.layer, al.role, fit_text(al.omega), fit_text(al.alpha),
                       fit_text(al.u), fit_text(al.dh_in));
    s += fmt::format("between the two largest widths ({} and {}):\n", top_pair(o).first, top_pair(o).second);
    for (const auto& al : ap.layers)
      s += fmt::format("{:<6}{:<9}{:<26}{:<26}{}\n", al.layer, al.role, fit_text(al.omega_top),
                       fit_text(al.alpha_top), fit_text(al.u_top));
    s += fmt::format("logit update RMS(dh_{}) slope: {} (two largest widths: {})", o.depth + 2,
                     fit_text(ap.logit_update), fit_text(ap.logit_update_top));
    if (ap.has_theory)
      s += fmt::format("   (width_theory: {} if omega_readout = 1, {} if 1/2; omega_hidden assumed {})",
                       format_fraction(ap.pred_logit_omega1), format_fraction(ap.pred_logit_omega_half),
                       format_fraction(ap.assumed_omega_hidden));
    s += "\nfinding: " + ap.readout_finding + "\n";
  }
  return s;
}

nlohmann::json alignment_json(const AlignmentResult& r) {
  const AlignmentOptions& o = r.opts;
  nlohmann::json j;
  j["diagnostic"] = "alignment";
  j["options"] = {{"model", o.model},   {"params", o.params}, {"optimizer", o.optimizer}, {"lr", o.lr},
                  {"beta1", o.beta1},   {"widths", o.widths}, {"depth", o.depth},         {"steps", o.steps},
                  {"seeds", o.seeds},   {"batch", o.batch},   {"seq_len", o.seq_len},     {"vocab", o.vocab},
                  {"activation", o.activation}, {"rmsnorm", o.rmsnorm}, {"head_dim", o.head_dim}, {"block", o.block}};
  j["distinct_inputs"] = r.distinct_inputs;
  j["params"] = nlohmann::json::array();
  for (const auto& ap : r.params) {
    nlohmann::json p;
    p["param"] = ap.param;
    p["layers"] = nlohmann::json::array();
    for (const auto& al : ap.layers)
      p["layers"].push_back({{"layer", al.layer},
                             {"role", al.role},
                             {"omega", fit_json(al.omega)},
                             {"omega_top", fit_json(al.omega_top)},
                             {"alpha_top", fit_json(al.alpha_top)},
                             {"u_top", fit_json(al.u_top)},
                             {"alpha", fit_json(al.alpha)},
                             {"u", fit_json(al.u)},
                             {"dh_in", fit_json(al.dh_in)},
                             {"omega_ratio", al.omega_ratio},
                             {"alpha_ratio", al.alpha_ratio},
                             {"u_ratio", al.u_ratio},
                             {"dh_in_rms", al.dh_in_rms}});
    p["logit_update"] = fit_json(ap.logit_update);
    p["logit_update_top"] = fit_json(ap.logit_update_top);
    p["logit_update_rms"] = ap.logit_update_rms;
    if (ap.has_theory)
      p["theory"] = {{"logit_update_if_omega_readout_1", ap.pred_logit_omega1},
                     {"logit_update_if_omega_readout_half", ap.pred_logit_omega_half},
                     {"omega_hidden_assumed", ap.assumed_omega_hidden}};
    p["finding"] = ap.readout_finding;
    j["params"].push_back(p);
  }
  return j;
}

}  // namespace scaleinv::diag
