// Coordinate checks judged against the theory (see coordcheck.h).
// Read top to bottom: the layer map (theory <-> model), predictions, one run, the grid, judging.
// The outputs (table, JSON, plots) are in coord_render.cpp.
#include "measure/coordcheck.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/errors.h"
#include "core/fraction.h"
#include "core/progress.h"
#include "measure/coord_detail.h"
#include "measure/coord_recorder.h"
#include "data/data.h"
#include "models/layers.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "core/gnuplot.h"
#include "theory/theory_report.h"

namespace scaleinv {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using coord_detail::fmt_exp;
using coord_detail::quantity_info;
using coord_detail::QuantityInfo;

// ============================================================================================
// The layer map: which theory row every recorded activation and every parameter follows.
// From roles (role_layer_map below); a layer without one gets "no prediction" (still measured).
// ============================================================================================

enum class Target {
  SeedRow,      // row `capture + offset` of width_theory (seed 000 eq. 1 indexing; no capture: `offset`)
  Stream,       // residual stream / block activations: hidden activations (h of h_1, dh and h' the max over hidden)
  EmbeddingW,   // W_0 (row 0)
  HiddenW,      // a hidden W (max over rows 1..L)
  HiddenWQK,    // attention query/key: a hidden W, but see width_prediction (logit scale d_head^-p)
  ReadoutW,     // W_{L+1}
  Logits,       // h_{L+2}
  DepthTop,     // depth axis: the top of the residual stream (seed 004; seed 000 eqs. 29-31)
  DepthLogits,  // depth axis: the logits (readout of the top)
};

struct Mapping {
  bool found = false;
  Target target = Target::SeedRow;
  int row = 0;
  std::string what;
};

// map_layer(axis, weight, layer) gives the theory row of a layer.
using LayerMapper = std::function<Mapping(const std::string& axis, bool weight, const std::string& layer)>;

bool hidden_like(Role r) { return r != Role::Embedding && r != Role::Readout && r != Role::Vector; }

// The layer map from roles (coordcheck.h), one for the zoo's models and a user's: a chain (no
// hidden tensor in a repeated block) maps its i-th hidden output onto h_{i+1} and its i-th hidden
// matrix onto W_i of seed 000 eq. 1; with blocks, every hidden output is the residual stream and
// every block matrix a hidden W. Along depth (depth_rows: seed 004's residual MLP, the model
// depth_theory describes) the top of the stream ("top") and the readout's output are mapped.
LayerMapper role_layer_map(const std::vector<OwnCoordLayer>& layers, bool depth_rows) {
  bool blocks = false;
  for (const OwnCoordLayer& l : layers)
    if (l.role && hidden_like(*l.role) && l.in_block) blocks = true;
  std::map<std::string, Mapping> acts, weights;
  int hidden_acts = 0, hidden_weights = 0;
  for (const OwnCoordLayer& l : layers) {
    if (!l.role || *l.role == Role::Vector) continue;  // norm gains, biases: no prediction
    const Role r = *l.role;
    Mapping m;
    m.found = true;
    if (l.weight) {
      if (l.tied) continue;  // W_0 and W_{L+1} at once: no single row
      if (r == Role::Embedding) {
        m.target = Target::EmbeddingW;
        m.what = "W_0 (embedding)";
      } else if (r == Role::Readout) {
        m.target = Target::ReadoutW;
        m.what = "W_L+1 (readout)";
      } else if (blocks) {
        m.target = r == Role::AttnQ || r == Role::AttnK ? Target::HiddenWQK : Target::HiddenW;
        m.what = "hidden W";
      } else {
        m.row = ++hidden_weights;
        m.what = fmt::format("W_{} (hidden)", m.row);
      }
      weights[l.name] = m;
    } else {
      if (r == Role::Embedding) {
        m.row = 1;
        m.what = "h_1 (embedding output)";
      } else if (r == Role::Readout) {
        m.target = Target::Logits;
        m.what = "h_L+2 = logits";
      } else if (blocks) {
        m.target = Target::Stream;
        m.what = "hidden h (residual stream)";
      } else {
        m.row = ++hidden_acts + 1;
        m.what = fmt::format("h_{} (seed 000 eq. 1)", m.row);
      }
      acts[l.name] = m;
    }
  }
  return [acts, weights, depth_rows](const std::string& axis, bool weight, const std::string& name) {
    Mapping m;
    if (axis == "depth") {
      if (!depth_rows || weight) return m;
      m.found = true;
      if (name == "top") {
        m.target = Target::DepthTop;
        m.what = "top activation x_L (seed 004)";
        return m;
      }
      const auto it = acts.find(name);
      if (it != acts.end() && it->second.target == Target::Logits) {
        m.target = Target::DepthLogits;
        m.what = "logits f = V x_L (seed 004)";
        return m;
      }
      return Mapping{};
    }
    const auto& map = weight ? weights : acts;
    const auto it = map.find(name);
    return it == map.end() ? m : it->second;
  };
}

// ============================================================================================
// Predictions
// ============================================================================================

struct Pred {
  std::optional<double> e;
  std::string why;  // maps_to text
};

std::optional<double> max_opt(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

// The one-step exponents a target has in the width theory.
struct BaseExponents {
  std::optional<double> ws, dws;  // ||W|| at init, ||dW|| of one update
  std::optional<double> h, dh, hg, wg, dw;
  // dh is fed by an update that already grows with width (row `fed_row`, exponent `fed_e`): the
  // theory then compounds (W dh_l, dW dh_l with e(dh_l) > 0), exponents reached only once that
  // upstream update is >> 1 (eta d >> 1), not a finite-width prediction; see width_prediction.
  bool fed_by_growth = false;
  int fed_row = 0;
  double fed_e = 0;
};

// Row l's dh is computed from row l-1's (eqs. 16-23); rows 0 and 1 take no incoming dh.
void check_fed(const WidthTheory& w, int l, BaseExponents& b) {
  if (l < 2 || l - 1 >= static_cast<int>(w.layers.size())) return;
  const auto& in = w.layers[static_cast<size_t>(l - 1)].dh;
  if (in && *in > kExponentTol && !b.fed_by_growth) {
    b.fed_by_growth = true;
    b.fed_row = l - 1;
    b.fed_e = *in;
  }
}

BaseExponents base_exponents(const WidthTheory& w, const Mapping& m) {
  const int L = w.depth;
  auto row = [&](int l) -> const LayerExponents& { return w.layers.at(static_cast<size_t>(l)); };
  BaseExponents b;
  switch (m.target) {
    case Target::SeedRow:
      if (m.row < 0 || m.row >= static_cast<int>(w.layers.size())) return b;
      b.h = row(m.row).h;
      b.dh = row(m.row).dh;
      b.hg = row(m.row).h_grad;
      b.wg = row(m.row).w_grad;
      b.dw = row(m.row).dw;
      b.ws = row(m.row).w_spec;
      b.dws = row(m.row).dw_spec;
      check_fed(w, m.row, b);
      break;
    case Target::Stream:
      b.h = row(1).h;
      for (int l = 1; l <= L + 1; ++l) {
        b.dh = max_opt(b.dh, row(l).dh);
        b.hg = max_opt(b.hg, row(l).h_grad);
        check_fed(w, l, b);
      }
      break;
    case Target::EmbeddingW:
      b.wg = row(0).w_grad;
      b.dw = row(0).dw;
      b.ws = row(0).w_spec;
      b.dws = row(0).dw_spec;
      break;
    case Target::HiddenW:
    case Target::HiddenWQK:
      for (int l = 1; l <= L; ++l) {
        b.wg = max_opt(b.wg, row(l).w_grad);
        b.dw = max_opt(b.dw, row(l).dw);
        b.ws = max_opt(b.ws, row(l).w_spec);
        b.dws = max_opt(b.dws, row(l).dw_spec);
      }
      break;
    case Target::ReadoutW:
      b.wg = row(L + 1).w_grad;
      b.dw = row(L + 1).dw;
      b.ws = row(L + 1).w_spec;
      b.dws = row(L + 1).dw_spec;
      break;
    case Target::Logits:
      b.h = row(L + 2).h;
      b.dh = row(L + 2).dh;
      b.hg = row(L + 2).h_grad;
      check_fed(w, L + 2, b);
      break;
    default: break;
  }
  return b;
}

// From the one-step exponents to a step t (seed 000 1.2.1):
//   h(t) = h(0) + dh(t): exponent max(e_h, e_dh) for t >= 1;
//   dh after t updates: the one-step exponent;
//   h', W' at t >= 1: the init exponent while the parameterization is stable (the updates do not
//     change the weights' scale); after an unstable update the one-step theory says nothing;
//   dW at t >= 2: the one-step exponent while stable (for Adam too: its normalised update still
//     depends on how consistent successive gradients are, which an unstable update changes).
// qk_unmodelled: the head dimension grows with width (fixed head count) and the logit scale is
// d_head^-p with p != 1/2. Then the gradients of W_q, W_k carry an extra d_head^(1/2 - p) (the
// logits' gradient sums d_head terms incoherently at init, and the scale multiplies it), which
// the bigram theory does not model: their W' (and SGD's dW, which follows W') get no prediction.
Pred width_prediction(const WidthTheory& w, const Mapping& m, CoordQuantity q, int step, bool qk_unmodelled) {
  Pred p;
  if (m.target == Target::HiddenWQK && qk_unmodelled &&
      (q == CoordQuantity::WGrad ||
       ((q == CoordQuantity::DW || q == CoordQuantity::DWSpec) && w.family == OptFamily::SGD))) {
    p.why = "no prediction: d_head grows with width and the logit scale is not d_head^-1/2, so W_q, W_k's "
            "gradient carries d_head^(1/2-p), outside the bigram theory";
    return p;
  }
  const BaseExponents b = base_exponents(w, m);
  const bool stable = w.stable_init && w.stable_train;
  const std::string unstable_note = "no prediction: after an unstable update the one-step theory does not follow it";
  if (!stable && step >= 2) {
    // After one unstable update the weights' scale has changed (sec. 1.2.1: RMS(dW) outgrows
    // RMS(W)), so neither later gradients nor Adam's later updates (whose size depends on how
    // consistent successive gradients are) keep the one-step exponents.
    p.why = "no prediction: unstable parameterization; the one-step theory covers steps 0 and 1 only";
    return p;
  }
  if ((q == CoordQuantity::DH || (q == CoordQuantity::H && step > 0)) && b.fed_by_growth) {
    p.why = fmt::format("no prediction: fed by dh_{} ~ d^{}; the theory's d^{} compounds it, reached only for "
                        "eta*d >> 1",
                        b.fed_row, fmt_exp(b.fed_e), b.dh ? fmt_exp(*b.dh) : "?");
    return p;
  }
  switch (q) {
    case CoordQuantity::H:
      // h_t = h_0 + dh_t: one power law only when both have the same exponent; otherwise the
      // measured slope mixes d^e(h) and d^e(dh) with weights set by the LR, and the two are judged
      // separately (h at step 0, dh).
      if (step == 0 || !b.dh || std::fabs(*b.dh - *b.h) <= kExponentTol) {
        p.e = b.h;
      } else if (b.h) {
        p.why = fmt::format("no prediction: h_t = h_0 (d^{}) + dh_t (d^{}) mixes two exponents; see h at step 0 and dh",
                            fmt_exp(*b.h), fmt_exp(*b.dh));
        return p;
      }
      break;
    case CoordQuantity::DH: p.e = step == 0 ? std::nullopt : b.dh; break;
    case CoordQuantity::HGrad:
    case CoordQuantity::WGrad: {
      const auto e = q == CoordQuantity::HGrad ? b.hg : b.wg;
      if (step == 0 || stable) {
        p.e = e;
      } else if (e) {
        p.why = unstable_note;
        return p;
      }
      break;
    }
    case CoordQuantity::DW:
    case CoordQuantity::DWSpec: {
      // (Adam's update is normalised, but its size at t >= 2 depends on how consistent the
      // gradients of successive steps are, which an unstable update changes with width.)
      const auto e = q == CoordQuantity::DW ? b.dw : b.dws;
      if (step == 1 || (step >= 2 && stable)) {
        p.e = e;
      } else if (step >= 2 && e) {
        p.why = unstable_note;
        return p;
      }
      break;
    }
    case CoordQuantity::WSpec:
      // W_t = W_0 + the updates: one power law when both spectral norms share the exponent (as under
      // the spectral condition), otherwise judged at step 0 (and the updates as ||dW||).
      if (step == 0 || (stable && b.dws && b.ws && std::fabs(*b.dws - *b.ws) <= kExponentTol)) {
        p.e = b.ws;
      } else if (b.ws) {
        p.why = "no prediction: W_t = W_0 + updates mixes two exponents; see ||W|| at step 0 and ||dW||";
        return p;
      }
      break;
  }
  p.why = p.e ? m.what : "no prediction";
  return p;
}

Pred depth_prediction(const DepthTheory& d, const Mapping& m, CoordQuantity q, int step, bool power_law) {
  Pred p;
  if (!power_law) {
    p.why = "no prediction: alpha < 1/2 without pre-LN grows exponentially in L (seed 004 Claim 5.1)";
    return p;
  }
  // The seed freezes U and V; here they train, which adds an L^0 change (the embedding's update,
  // carried up the stream) and, at the logits, dV x_L ~ L^(1/2 - alpha).
  const double init = d.top_init_rho_half;
  const double upd = m.target == Target::DepthTop ? std::max(d.update_correlated, 0.0)
                                                  : std::max({d.update_correlated, 0.0, init});
  switch (q) {
    case CoordQuantity::H:
      if (step == 0 || (d.stable_init && std::fabs(init - upd) <= kExponentTol)) {
        p.e = init;
      } else {
        p.why = d.stable_init
                    ? fmt::format("no prediction: h_t = h_0 (L^{}) + dh_t (L^{}) mixes two exponents; see h at step 0 "
                                  "and dh",
                                  fmt_exp(init), fmt_exp(upd))
                    : std::string("no prediction: the seed derives the update exponent only for a stable init "
                                  "(alpha >= 1/2)");
        return p;
      }
      break;
    case CoordQuantity::DH:
      if (step >= 1 && d.stable_init) {
        p.e = upd;
      } else if (step >= 1) {
        p.why = "no prediction: the seed derives the update exponent only for a stable init (alpha >= 1/2)";
        return p;
      }
      break;
    default: break;
  }
  p.why = p.e ? m.what : "no prediction";
  return p;
}

// L and RMSNorm of the width theory a model is judged against.
struct TheoryShape {
  int L = 1;
  bool rmsnorm = false;
  std::string note;
};

TheoryShape theory_shape(const ModelConfig& mc, int depth) {
  TheoryShape s;
  if (mc.kind == "mlp") {
    s.L = depth;
    s.note = fmt::format("mlp: rows of width_theory(L = {}) one to one (a dense input as W_0)", depth);
  } else if (mc.kind == "bigram") {
    s.L = depth;
    s.rmsnorm = mc.rmsnorm;
    s.note = fmt::format("bigram: rows of width_theory(L = {}{}) one to one", depth, mc.rmsnorm ? ", RMSNorm" : "");
  } else if (mc.kind == "gpt" || mc.kind == "vit") {
    // Every sublayer reads a normalised stream and applies two matrices (v then o; fc then proj)
    // before adding to it: the stream follows the hidden activations of an L = 2 chain.
    s.L = 2;
    s.note = "residual stream = hidden activations of width_theory(L = 2): each sublayer is a 2-matrix chain "
             "(attn v,o; mlp fc,proj) on a normalised input";
  } else {  // resmlp
    s.L = mc.pre_ln ? mc.block_depth : depth * mc.block_depth;
    s.note = mc.pre_ln ? fmt::format("residual stream = hidden activations of width_theory(L = {}): each block is "
                                     "a {}-matrix chain on a normalised input",
                                     s.L, mc.block_depth)
                       : fmt::format("residual stream = hidden activations of width_theory(L = {}): without "
                                     "pre-LN the blocks chain",
                                     s.L);
  }
  return s;
}

// ============================================================================================
// One run: build, train T steps on fixed data, record on the probe batch at every step.
// ============================================================================================

}  // namespace

double spectral_norm(const torch::Tensor& w, int steps) {
  if (!w.defined() || w.dim() < 2 || w.numel() == 0) return kNaN;
  const torch::Tensor m = w.detach().reshape({w.size(0), -1});
  // Golub-Kahan-Lanczos bidiagonalisation m V = U B with full reorthogonalisation (Golub and Van
  // Loan, Matrix Computations, sec. 10.4): after k steps the largest singular value of the k x k
  // upper-bidiagonal B bounds sigma_max(m) from below and converges far faster than power
  // iteration on m^T m for the same 2k products (16 steps: within 0.1% on a 1024^2 iid matrix,
  // where 30 power iterations are 0.8% low). A fixed, generic start cos(0.7 i + 0.3): no
  // generator involved. The recursion stops early, exactly, when m has rank < k.
  const int k = static_cast<int>(std::min<int64_t>({static_cast<int64_t>(steps), m.size(0), m.size(1)}));
  std::vector<torch::Tensor> U, V;
  std::vector<double> alpha, beta;
  torch::Tensor v = torch::cos(torch::arange(m.size(1), m.options()) * 0.7 + 0.3);
  const double nv = v.norm().item<double>();
  if (!std::isfinite(nv)) return kNaN;
  v = v / nv;
  auto orthogonalise = [](torch::Tensor x, const std::vector<torch::Tensor>& basis) {
    for (const auto& b : basis) x = x - b.dot(x) * b;
    return x;
  };
  torch::Tensor u = torch::mv(m, v);
  for (int j = 0; j < k; ++j) {
    V.push_back(v);
    u = orthogonalise(u, U);
    const double a = u.norm().item<double>();
    if (!std::isfinite(a)) return kNaN;
    alpha.push_back(a);
    if (!(a > 0)) break;  // m V_j already spans the range m has on this Krylov space
    u = u / a;
    U.push_back(u);
    if (j + 1 == k) break;
    torch::Tensor r = orthogonalise(torch::mv(m.t(), u), V);
    const double b = r.norm().item<double>();
    if (!std::isfinite(b)) return kNaN;
    if (!(b > 1e-30 * a)) break;  // an invariant subspace: B is exact
    beta.push_back(b);
    v = r / b;
    u = torch::mv(m, v) - b * u;
  }
  const int n = static_cast<int>(alpha.size());
  torch::Tensor bd = torch::zeros({n, n}, torch::kDouble);
  auto acc = bd.accessor<double, 2>();
  for (int i = 0; i < n; ++i) acc[i][i] = alpha[static_cast<size_t>(i)];
  for (int i = 0; i + 1 < n && i < static_cast<int>(beta.size()); ++i) acc[i][i + 1] = beta[static_cast<size_t>(i)];
  return torch::linalg_svdvals(bd)[0].item<double>();
}

namespace {

// `layers` gets every recorded activation (by the role of the weight that produced it) and every
// parameter (by its tag): the layer map's input.
CoordRun measure_run(const CoordCheckConfig& cc, const ParamTable& model_table, OptFamily family, int width,
                     int depth, int64_t seed, const std::vector<Batch>& batches, torch::Device dev,
                     std::map<std::string, OwnCoordLayer>& layers) {
  TrainConfig cfg = cc.train;
  cfg.model.width = width;
  cfg.model.depth = depth;
  ScaleContext ctx{model_table, family, width, depth};
  torch::manual_seed(static_cast<uint64_t>(seed));
  std::shared_ptr<Model> model = build_model(cfg.model, ctx, cfg.hp);
  model->to(dev);
  const std::vector<TaggedParam> tagged = model->tagged_parameters();
  NamedTensors params;
  for (const TaggedParam& p : tagged) {
    params.emplace_back(p.name, p.tensor);
    layers.emplace("w:" + p.name, OwnCoordLayer{p.name, true, p.tag.role, p.tag.in_block, p.tag.tied});
  }
  auto opt = make_optimizer(cfg.optim, param_groups(tagged, ctx));
  // Recording is switched on for the probe's forward (set_recording clears what the last one kept)
  // and off for an update on another batch.
  auto loss = [&](size_t b, bool record) {
    model->set_recording(record);
    return model->loss(batches[b].x, batches[b].y);
  };
  auto recorded = [&] {
    NamedTensors acts(model->recorded().begin(), model->recorded().end());
    for (size_t i = 0; i < acts.size(); ++i) {
      const Model::ActivationRole& r = model->recorded_roles().at(i);
      layers.emplace("a:" + acts[i].first, OwnCoordLayer{acts[i].first, false, r.role, r.in_block, false});
    }
    return acts;
  };
  CoordRun run = measure_coord_steps(cc.steps, cc.quantities, batches.size(), loss, recorded, params, *opt, cfg.optim);
  model->set_recording(false);
  run.width = width;
  run.depth = depth;
  run.seed = seed;
  return run;
}

// Rows: every (axis, at, quantity, layer, step) with at least 2 x values, fitted and predicted.
// map_layer(axis, weight, layer) gives the theory row of a layer (role_layer_map).
void fit_rows(CoordCheckResult& res, const std::map<int, WidthTheory>& width_theories,
              const std::string& stream_prefix, bool qk_unmodelled, bool depth_power_law,
              const LayerMapper& map_layer) {
  auto find_run = [&](int w, int d, int64_t s) -> const CoordRun* {
    for (const CoordRun& r : res.runs)
      if (r.width == w && r.depth == d && r.seed == s) return &r;
    return nullptr;
  };
  auto lookup = [](const CoordRun& run, CoordQuantity q, const std::string& layer) -> const CoordSeries* {
    for (const CoordSeries& s : run.series)
      if (s.q == q && s.layer == layer) return &s;
    return nullptr;
  };
  auto fit_axis = [&](const std::string& axis, int at, const std::vector<int>& xs) {
    // The runs along this axis, per seed.
    std::vector<std::vector<const CoordRun*>> grid;  // [seed][x]
    for (int64_t s : res.config.seeds) {
      std::vector<const CoordRun*> row;
      for (int x : xs) row.push_back(axis == "width" ? find_run(x, at, s) : find_run(at, x, s));
      grid.push_back(row);
    }
    // Layer names in order (from the first run); along depth, the top of the stream is "top" and
    // only layers present at every depth are kept.
    auto depth_name = [&](const std::string& layer, int depth) {
      return layer == stream_prefix + std::to_string(depth) ? std::string("top") : layer;
    };
    const CoordRun& first = *grid.front().front();
    std::vector<std::pair<CoordQuantity, std::string>> layers;  // (quantity, canonical name)
    for (const CoordSeries& s : first.series) {
      std::string name = axis == "depth" ? depth_name(s.layer, first.depth) : s.layer;
      layers.emplace_back(s.q, name);
    }
    // Sort by quantity, keeping first-seen order within a quantity.
    std::stable_sort(layers.begin(), layers.end(),
                     [](const auto& a, const auto& b) { return static_cast<int>(a.first) < static_cast<int>(b.first); });
    const double fin = axis == "width" ? finite_size_term(xs.front(), xs.back(), double(res.n_probe + res.n_out))
                                       : finite_size_term(xs.front(), xs.back());
    for (const auto& [q, name] : layers) {
      const bool weight = !is_activation_quantity(q);
      const Mapping m = map_layer(axis, weight, name);
      for (int t = 0; t <= res.config.steps; ++t) {
        if ((q == CoordQuantity::DH || q == CoordQuantity::DW || q == CoordQuantity::DWSpec) && t == 0) continue;
        CoordRow row;
        row.axis = axis;
        row.at = at;
        row.q = q;
        row.layer = name;
        row.step = t;
        for (int x : xs) row.x.push_back(x);
        bool complete = true;
        for (const auto& seed_row : grid) {
          std::vector<double> ys;
          for (const CoordRun* run : seed_row) {
            std::string actual = name;
            if (axis == "depth" && name == "top") actual = stream_prefix + std::to_string(run->depth);
            const CoordSeries* s = run ? lookup(*run, q, actual) : nullptr;
            if (!s) {
              complete = false;
              break;
            }
            ys.push_back(s->rms[static_cast<size_t>(t)]);
          }
          if (!complete) break;
          row.y.push_back(ys);
        }
        if (!complete) continue;  // a layer that does not exist at every depth
        row.fit = fit_loglog_slope(row.x, row.y);
        row.finite_term = fin;
        if (q == CoordQuantity::WSpec && axis == "width") {
          // One fan fixed (the same at the smallest and largest width): the Bai-Yin term (header).
          const CoordSeries* lo = lookup(*grid.front().front(), q, name);
          const CoordSeries* hi = lookup(*grid.front().back(), q, name);
          if (lo && hi && lo->shape.size() == 2 && hi->shape.size() == 2)
            for (int k = 0; k < 2; ++k)
              if (lo->shape[k] == hi->shape[k] && lo->shape[1 - k] != hi->shape[1 - k]) {
                const double f = static_cast<double>(lo->shape[k]);
                row.finite_term += (std::log1p(std::sqrt(f / xs.front())) - std::log1p(std::sqrt(f / xs.back()))) /
                                   std::log(static_cast<double>(xs.back()) / xs.front());
              }
        }
        row.tolerance = row.fit.half_width + row.finite_term;
        Pred p;
        if (!m.found) {
          p.why = weight && (name.find("gain") != std::string::npos || name.find("bias") != std::string::npos)
                      ? "no prediction (vector-like tensor)"
                      : "no prediction";
        } else if (axis == "width") {
          p = width_prediction(width_theories.at(at), m, q, t, qk_unmodelled);
        } else {
          p = depth_prediction(res.depth_theory, m, q, t, depth_power_law);
        }
        row.predicted = p.e;
        row.maps_to = p.why;
        res.rows.push_back(std::move(row));
      }
    }
  };
  if (res.widths.size() >= 2)
    for (int d : res.depths) fit_axis("width", d, res.widths);
  if (res.depths.size() >= 2)
    for (int w : res.widths) fit_axis("depth", w, res.depths);

}

// ============================================================================================
// Validation
// ============================================================================================

std::vector<int> sorted_unique(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

void validate(const CoordCheckConfig& cc, const std::vector<int>& widths, const std::vector<int>& depths,
              const ParamTable& table, OptFamily family) {
  const ModelConfig& mc = cc.train.model;
  if (mc.kind != "bigram" && mc.kind != "resmlp" && mc.kind != "gpt" && mc.kind != "vit" && mc.kind != "mlp")
    throw UserError("command line", "--model", fmt::format("unknown model '{}'", mc.kind),
                    "use one of bigram, mlp, resmlp, gpt, vit");
  if (widths.empty())
    throw UserError("command line", "--widths", "no widths given", "give a comma-separated list, e.g. 64,128,256");
  if (depths.empty())
    throw UserError("command line", "--depths", "no depths given", "give a comma-separated list, e.g. 4,8,16");
  for (int w : widths)
    if (w < 1)
      throw UserError("command line", "--widths", fmt::format("width {} is not positive", w), "use widths >= 1");
  for (int d : depths)
    if (d < 1)
      throw UserError("command line", "--depths", fmt::format("depth {} is not positive", d), "use depths >= 1");
  if (widths.size() < 2 && depths.size() < 2)
    throw UserError("command line", "--widths",
                    "a slope needs at least 2 widths (or 2 depths with --depths)",
                    "give e.g. --widths 64,128,256");
  if (cc.steps < 1)
    throw UserError("command line", "--steps", fmt::format("{} steps", cc.steps), "use at least 1 step");
  if (cc.seeds.empty())
    throw UserError("command line", "--seeds", "no seeds", "use --seeds 2 or more (the interval is over seeds)");
  if (cc.train_batches < 1)
    throw UserError("command line", "--train-batches", fmt::format("{}", cc.train_batches), "use at least 1");
  if (!cc.break_mode.empty() && cc.break_mode != "readout-multiplier")
    throw UserError("command line", "--break", fmt::format("unknown break mode '{}'", cc.break_mode),
                    "the only one is readout-multiplier");
  validate_optim_config(cc.train.optim);
  // Every shape up front (head splits), so a bad width fails before any training.
  for (int w : widths)
    for (int d : depths) {
      ModelConfig m = mc;
      m.width = w;
      m.depth = d;
      ScaleContext ctx{table, family, w, d};
      if (m.kind == "gpt" || m.kind == "vit") {
        try {
          head_shape(m, ctx);
        } catch (const UserError& e) {
          throw UserError("command line", "--widths", e.what(),
                          "use widths divisible by the head size (model.head_dim) or the head count (model.n_heads)");
        }
      }
    }
}

// ============================================================================================
// Judging
// ============================================================================================

std::string steps_list(const std::vector<int>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out;
}

std::string row_label(const CoordRow& r) {
  return fmt::format("{} {} ({}, {} {})", coord_quantity_name(r.q), r.layer, r.axis,
                     r.axis == "width" ? "depth" : "width", r.at);
}

void judge(CoordCheckResult& res) {
  // Group rows by (axis, at, quantity, layer) in table order, one failure line per verdict.
  struct Group {
    const CoordRow* first = nullptr;
    std::vector<int> dev_steps, unstable_steps, unmeasured_steps;
    std::vector<std::string> dev_detail, unstable_detail;
  };
  std::vector<std::string> order;
  std::map<std::string, Group> groups;
  for (CoordRow& r : res.rows) {
    const bool activation = r.q == CoordQuantity::H || r.q == CoordQuantity::DH;
    if (!r.fit.valid) {
      if (r.predicted || activation) {
        r.matches = r.predicted ? std::optional<bool>(false) : std::nullopt;
        r.stable = activation ? std::optional<bool>(false) : std::nullopt;
      }
    } else {
      r.tolerance = r.fit.half_width + r.finite_term;
      if (r.predicted) r.matches = std::fabs(r.fit.slope - *r.predicted) <= r.tolerance;
      if (activation) r.stable = r.fit.slope <= r.tolerance;
    }
    const std::string key = row_label(r);
    if (!groups.count(key)) order.push_back(key);
    Group& g = groups[key];
    if (!g.first) g.first = &r;
    if (!r.fit.valid && (r.predicted || activation)) {
      g.unmeasured_steps.push_back(r.step);
      continue;
    }
    if (r.matches && !*r.matches) {
      g.dev_steps.push_back(r.step);
      g.dev_detail.push_back(fmt::format("step {}: {:+.2f} vs {} (tolerance {:.2f})", r.step, r.fit.slope,
                                         fmt_exp(*r.predicted), r.tolerance));
    }
    if (r.stable && !*r.stable) {
      g.unstable_steps.push_back(r.step);
      g.unstable_detail.push_back(fmt::format("step {}: {:+.2f} > {:.2f}", r.step, r.fit.slope, r.tolerance));
    }
  }
  for (const std::string& key : order) {
    const Group& g = groups[key];
    const CoordRow& r = *g.first;
    if (!g.dev_steps.empty())
      res.failures.push_back(fmt::format("{}: deviates from theory (measured slope {})", key,
                                         fmt::join(g.dev_detail, "; ")));
    if (!g.unstable_steps.empty())
      res.failures.push_back(fmt::format("{}: unstable, grows with {} (slope {})", key, r.axis,
                                         fmt::join(g.unstable_detail, "; ")));
    if (!g.unmeasured_steps.empty())
      res.failures.push_back(fmt::format("{}: not measurable at step {} ({})", key, steps_list(g.unmeasured_steps),
                                         r.fit.problem));
  }
}

}  // namespace

namespace coord_detail {

std::string fmt_exp(double e) { return format_fraction(std::fabs(e) <= kExponentTol ? 0.0 : e); }

namespace {
constexpr QuantityInfo kQuantity[] = {
    {"h", "h", "RMS(h)"},
    {"dh", "dh", "RMS(h_t - h_0)"},
    {"h'", "hgrad", "RMS(dLoss/dh)"},
    {"W'", "wgrad", "RMS(dLoss/dW)"},
    {"dW", "dw", "RMS(W_t - W_t-1)"},
    {"||W||", "wspec", "||W_t||_2"},
    {"||dW||", "dwspec", "||W_t - W_t-1||_2"},
};
static_assert(std::size(kQuantity) == kNumCoordQuantities, "one kQuantity row per CoordQuantity");
}  // namespace

const QuantityInfo& quantity_info(CoordQuantity q) { return kQuantity[static_cast<int>(q)]; }

}  // namespace coord_detail

const char* coord_quantity_name(CoordQuantity q) { return quantity_info(q).name; }

unsigned parse_coord_quantities(const std::string& list, const std::string& where) {
  unsigned mask = 0;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    if (item == "all") {
      mask = kAllCoordQuantities;
      continue;
    }
    unsigned bit = 0;
    for (int q = 0; q < kNumCoordQuantities; ++q) {
      const QuantityInfo& info = quantity_info(static_cast<CoordQuantity>(q));
      if (item == info.name || item == info.file) bit = 1u << q;
    }
    if (!bit)
      throw UserError(where, "quantities", fmt::format("unknown quantity '{}'", item),
                      "use a comma-separated list of h, dh, hgrad, wgrad, dw, wspec, dwspec or all");
    mask |= bit;
  }
  if (!mask) throw UserError(where, "quantities", "an empty list", "name at least one quantity, e.g. h,dh");
  return mask;
}

bool is_activation_quantity(CoordQuantity q) {
  return q == CoordQuantity::H || q == CoordQuantity::DH || q == CoordQuantity::HGrad;
}

// ============================================================================================
// The grid
// ============================================================================================

CoordCheckResult run_coordcheck(const CoordCheckConfig& cc_in) {
  const ConfigSource config_source(cc_in.train.source);  // library checks name this file
  const auto t0 = std::chrono::steady_clock::now();
  CoordCheckResult res;
  res.config = cc_in;
  CoordCheckConfig& cc = res.config;
  const ModelConfig& mc = cc.train.model;
  res.widths = sorted_unique(cc.widths.empty() ? std::vector<int>{mc.width} : cc.widths);
  res.depths = sorted_unique(cc.depths.empty() ? std::vector<int>{mc.depth} : cc.depths);
  res.table = resolve_param(cc.train);
  res.family = optimizer_family(cc.train.optim.kind);
  validate(cc, res.widths, res.depths, res.table, res.family);
  ParamTable model_table = res.table;
  if (cc.break_mode == "readout-multiplier") model_table.row(Role::Readout).a = 0;

  // Theories.
  std::map<int, WidthTheory> width_theories;  // by depth
  for (int d : res.depths) {
    const TheoryShape s = theory_shape(mc, d);
    width_theories.emplace(d, width_theory(res.table, res.family, s.L, cc.align, s.rmsnorm, muon_scale_of(cc.train.optim)));
  }
  {
    const TheoryShape s = theory_shape(mc, res.depths.front());
    res.theory_depth = s.L;
    res.theory_note = s.note;
    res.width_theory = width_theories.at(res.depths.front());
  }
  res.depth_theory = depth_theory(res.table, res.family);

  // Fixed data: the same batches for every width, depth and seed.
  TrainConfig& tc = cc.train;
  auto data = make_data(tc.data);
  const bool language = mc.kind == "bigram" || mc.kind == "gpt";
  if (data->is_language() != language)
    throw UserError(tc.source, "data.source", fmt::format("'{}' does not fit model '{}'", tc.data.source, mc.kind),
                    "language models (bigram, gpt) take kjv/text/markov; resmlp and vit take fashion_mnist");
  const torch::Device dev = resolve_device(tc.train.device, tc.source, "train.device");
  std::vector<Batch> batches;
  for (int64_t i = 0; i < cc.train_batches; ++i) {
    Batch b = data->batch(Split::Train, i, tc.train.batch_size);
    batches.push_back({b.x.to(dev), b.y.to(dev)});
  }
  res.n_probe = batches.front().y.numel();  // one target per position (language) or per sample
  res.n_out = language ? mc.vocab : mc.n_classes;

  // Runs.
  const long total = static_cast<long>(res.widths.size() * res.depths.size() * cc.seeds.size());
  std::unique_ptr<Progress> bar;
  if (cc.show_progress) bar = std::make_unique<Progress>(total, "coordcheck", "runs");
  long done = 0;
  std::map<std::string, OwnCoordLayer> layers;
  for (int d : res.depths)
    for (int w : res.widths)
      for (int64_t s : cc.seeds) {
        res.runs.push_back(measure_run(cc, model_table, res.family, w, d, s, batches, dev, layers));
        ++done;
        if (bar) bar->update(done, fmt::format("width {} depth {} seed {}", w, d, s));
      }
  if (bar) bar->finish();

  const std::string stream_prefix = mc.kind == "resmlp" ? "x" : "block";
  const bool qk_unmodelled = mc.n_heads > 0 && std::fabs(res.table.attn_logit - 0.5) > kExponentTol;
  const bool power_law = mc.kind != "resmlp" || mc.pre_ln || res.depth_theory.alpha >= 0.5 - kExponentTol;
  // Parameters in registration order and activations in forward order matter for a chain's rows:
  // order by the first run's series (forward order, then registration order).
  std::vector<OwnCoordLayer> ordered;
  std::set<std::string> placed;
  for (const CoordRun& run : res.runs)
    for (const CoordSeries& se : run.series) {
      const std::string key = (is_activation_quantity(se.q) ? "a:" : "w:") + se.layer;
      if (placed.insert(key).second && layers.count(key)) ordered.push_back(layers.at(key));
    }
  fit_rows(res, width_theories, stream_prefix, qk_unmodelled, power_law,
           role_layer_map(ordered, /*depth_rows=*/mc.kind == "resmlp"));
  judge(res);
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

CoordCheckResult judge_own_coordcheck(const OwnCoordInput& in) {
  const auto t0 = std::chrono::steady_clock::now();
  CoordCheckResult res;
  res.config.train.model.kind = in.model;
  res.config.train.optim.kind = in.optimizer;
  res.config.train.optim.muon_scale = muon_scale_name(in.muon_scale);
  res.config.seeds = in.seeds;
  res.config.steps = in.steps;
  res.config.show_progress = false;
  res.table = in.table;
  std::string fam = in.optimizer == "adamw" || in.optimizer == "sign" ? std::string("adam") : in.optimizer;
  if (!parse_family(fam, &res.family))
    throw UserError("coordcheck", "optimizer", fmt::format("unknown optimizer '{}'", in.optimizer),
                    "use one of sgd, adam, adamw, sign, muon");
  if (in.seeds.empty()) throw UserError("coordcheck", "seeds", "no seeds", "use 2 or more seeds");
  if (in.steps < 1) throw UserError("coordcheck", "steps", fmt::format("{} steps", in.steps), "use at least 1 step");
  std::vector<int> widths;
  for (const CoordRun& r : in.runs) widths.push_back(r.width);
  res.widths = sorted_unique(widths);
  res.depths = {1};
  if (res.widths.size() < 2)
    throw UserError("coordcheck", "widths", "a slope needs at least 2 widths", "give e.g. widths = [64, 128, 256]");
  std::map<std::string, const OwnCoordLayer*> layer_of;
  for (const OwnCoordLayer& l : in.layers) layer_of[(l.weight ? "w:" : "a:") + l.name] = &l;
  for (int w : res.widths)
    for (int64_t s : in.seeds) {
      const CoordRun* run = nullptr;
      for (const CoordRun& r : in.runs)
        if (r.width == w && r.seed == s) run = &r;
      if (!run)
        throw UserError("coordcheck", "runs", fmt::format("no run for width {} seed {}", w, s),
                        "measure every (width, seed) pair");
      for (const CoordSeries& se : run->series) {
        if (se.rms.size() != static_cast<size_t>(in.steps + 1))
          throw UserError("coordcheck", se.layer,
                          fmt::format("has {} values, not steps + 1 = {}", se.rms.size(), in.steps + 1),
                          "record steps 0..T (NaN where undefined)");
        if (!layer_of.count((is_activation_quantity(se.q) ? "a:" : "w:") + se.layer))
          throw UserError("coordcheck", se.layer, "is measured but not among the layers", "list every measured layer");
      }
    }
  for (CoordRun r : in.runs) {
    r.depth = 1;
    res.runs.push_back(std::move(r));
  }
  res.n_probe = in.n_probe;
  res.n_out = in.n_out;

  // The theory's L: 2 for blocks (every sublayer applies two matrices to a normalised input, as
  // the zoo's gpt), else the chain's hidden count (outputs or matrices, whichever is larger).
  bool blocks = false;
  int hidden_outputs = 0, hidden_weights = 0;
  for (const OwnCoordLayer& l : in.layers)
    if (l.role && hidden_like(*l.role)) {
      blocks = blocks || l.in_block;
      ++(l.weight ? hidden_weights : hidden_outputs);
    }
  const int L = blocks ? 2 : std::max({hidden_outputs, hidden_weights, 1});
  const LayerMapper map_layer = role_layer_map(in.layers, /*depth_rows=*/false);
  std::map<int, WidthTheory> width_theories;
  width_theories.emplace(1, width_theory(res.table, res.family, L, {}, false, in.muon_scale));
  res.width_theory = width_theories.at(1);
  res.theory_depth = L;
  res.theory_note = blocks ? "residual stream = hidden activations of width_theory(L = 2): hidden tensors in repeated "
                             "blocks (as the zoo's gpt)"
                           : fmt::format("a chain: embedding output h_1, {} hidden output(s) h_2..h_{}, logits h_{} "
                                         "(width_theory(L = {}))",
                                         hidden_outputs, L + 1, L + 2, L);
  res.depth_theory = depth_theory(res.table, res.family);
  // The logit scale is the user's own (not a table multiplier): W_q, W_k's gradient is modelled
  // only for the 1/sqrt(d_head) the bigram theory assumes, as for the zoo (width_prediction).
  const bool qk_unmodelled = std::fabs(res.table.attn_logit - 0.5) > kExponentTol;
  fit_rows(res, width_theories, "", qk_unmodelled, true, map_layer);
  judge(res);
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace scaleinv
