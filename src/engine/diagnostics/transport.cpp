// Post-LN backward transport (seed 000 eqs. 33-35, Lemmas E.5-E.6; src/engine/diagnostics/diagnostics.h).
//
// Under h_{l+1} = LN_l(alpha h_l + f_l(h_l)) the backward pass carries h'_1 = prod_l (alpha I + J_f_l) B_l h'_{L+1},
// whose identity path is B(alpha) = prod_l alpha B_l, B_l the Jacobian of LN_l at its input
// o_l = alpha h_l + f_l(h_l). We measure ||B(alpha)||_2 exactly from the o_l:
//
//   RMS LN (the seed's LN_l(u) = u / RMS(u), gain 1):   B v = (v - o (o.v) / (d r^2)) / r,  r^2 = mean o^2 + eps
//   LayerNorm (mean-subtracting, the models' NormGain):  B v = (v - mean v - z (z.v) / (d s^2)) / s,
//                                                        z = o - mean o, s^2 = mean z^2 + eps
//   a gain g multiplies the output: B_g = diag(g) B (transpose B diag(g)).
//
// The spectral norm of the chain comes from power iteration on B(alpha)^T B(alpha) (one chain per
// input vector / token; the geometric mean over them is reported), and the mean gain ||B(alpha) v||
// over random unit v beside it. Lemma E.5 gives alpha ||B_l|| ~ alpha / RMS(o_l) ~ (1 + 1/alpha^2)^(-1/2)
// when f_l(h) is as large as h and orthogonal to it, hence the bound (1 + 1/alpha^2)^(-n/2) for n LNs.
//
// Models:
//   linear  f_l(h) = A_l h, A_l ~ N(0, 1/d) i.i.d. (|A h| ~ |h|, A h nearly orthogonal to h: the lemma's
//           assumptions hold up to O(d^-1/2)); h_1 = LN(u), u ~ N(0, I). Also the whole backward map
//           d h_{L+1} / d h_1 = prod_l B_l (alpha I + A_l) ("full").
//   gpt     the GPT's post / keel blocks at init (two LNs per block: after attention and after the MLP),
//           o recomputed from the model's own sublayer modules and checked against the recorded block
//           output; alpha = TransformerBlock::alpha() = L^shortcut.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "brain/util/json_number.h"
#include "engine/diagnostics/diag_detail.h"
#include "engine/diagnostics/diagnostics.h"
#include "brain/util/slope_fit.h"
#include "engine/models/layers.h"
#include "brain/models/model_kinds.h"
#include "brain/theory/depth_theory.h"

namespace scaleinv::diag {

namespace {

// The transformer the diagnostic builds (its blocks' internals are read: engine/models/layers.h's
// TransformerBlock); --model takes it or "linear" (the chain of seed 000 eq. 34 without attention).
bool transformer(const std::string& model) {  // a row with the transport trait (brain/models/model_kinds.h)
  const ModelKind* k = find_model_kind(model);
  return k && k->transport;
}

// One LN Jacobian at the inputs o [N, d] (double), with its gain (undefined: 1) and kind.
struct LnJac {
  torch::Tensor o;       // [N, d], double
  torch::Tensor gain;    // [d] or undefined
  bool mean_subtract = false;
  double eps = 0;
  double scale = 1;      // the shortcut alpha multiplying this factor

  // y = alpha * B v   (B symmetric before the gain)
  torch::Tensor apply(const torch::Tensor& v) const { return gain_out(core(v)); }
  torch::Tensor apply_t(const torch::Tensor& v) const { return core(gain_out(v)); }

 private:
  torch::Tensor gain_out(const torch::Tensor& v) const { return gain.defined() ? v * gain : v; }
  torch::Tensor core(const torch::Tensor& v) const {
    const double d = static_cast<double>(o.size(1));
    if (mean_subtract) {
      torch::Tensor z = o - o.mean(1, true);
      torch::Tensor s2 = z.pow(2).mean(1, true) + eps;
      torch::Tensor pv = v - v.mean(1, true) - z * ((z * v).sum(1, true) / (d * s2));
      return pv * (scale / s2.sqrt());
    }
    torch::Tensor r2 = o.pow(2).mean(1, true) + eps;
    torch::Tensor pv = v - o * ((o * v).sum(1, true) / (d * r2));
    return pv * (scale / r2.sqrt());
  }
};

// Row-wise normalisation, returning the norms [N, 1].
torch::Tensor normalize_rows(torch::Tensor& v) {
  torch::Tensor n = v.norm(2, 1, true).clamp_min(1e-300);
  v = v / n;
  return n;
}

// Spectral norm of v -> M v per row, by power iteration on M^T M. `fwd` and `bwd` apply M and M^T.
torch::Tensor power_norm(const std::function<torch::Tensor(const torch::Tensor&)>& fwd,
                         const std::function<torch::Tensor(const torch::Tensor&)>& bwd, int64_t N, int64_t d,
                         int iters, at::Generator& gen) {
  torch::Tensor v = at::randn({N, d}, gen, torch::kDouble);
  normalize_rows(v);
  for (int i = 0; i < iters; ++i) {
    v = bwd(fwd(v));
    normalize_rows(v);
  }
  return fwd(v).norm(2, 1);
}

torch::Tensor chain_fwd(const std::vector<LnJac>& js, torch::Tensor v) {
  for (const auto& j : js) v = j.apply(v);
  return v;
}
torch::Tensor chain_bwd(const std::vector<LnJac>& js, torch::Tensor v) {
  for (auto it = js.rbegin(); it != js.rend(); ++it) v = it->apply_t(v);
  return v;
}

double gmean_rows(const torch::Tensor& norms) { return std::exp(norms.clamp_min(1e-300).log().mean().item<double>()); }

double mean_gain(const std::vector<LnJac>& js, int64_t N, int64_t d, at::Generator& gen) {
  const int K = 8;
  double acc = 0;
  for (int k = 0; k < K; ++k) {
    torch::Tensor v = at::randn({N, d}, gen, torch::kDouble);
    normalize_rows(v);
    acc += chain_fwd(js, v).norm(2, 1).mean().item<double>();
  }
  return acc / K;
}

struct ChainOut {
  double norm = 0, gain = 0, full = std::nan("");
};

ChainOut linear_chain(const TransportOptions& o, int L, double alpha, uint64_t seed) {
  torch::NoGradGuard ng;
  const int64_t d = o.width, N = o.batch;
  auto gen = at::detail::createCPUGenerator(seed);
  const bool ms = o.norm == "layer";
  const double eps = ms ? kLayerNormEps : kRmsNormEps;
  auto ln = [&](const torch::Tensor& u) { return ms ? layer_norm(u, {}, eps) : rms_norm(u, eps); };
  torch::Tensor h = ln(at::randn({N, d}, gen, torch::kDouble));
  std::vector<LnJac> js;
  std::vector<torch::Tensor> As;
  for (int l = 0; l < L; ++l) {
    torch::Tensor A = at::randn({d, d}, gen, torch::kDouble) / std::sqrt(static_cast<double>(d));
    torch::Tensor o_l = alpha * h + h.matmul(A.t());
    js.push_back(LnJac{o_l, {}, ms, eps, alpha});
    As.push_back(A);
    h = ln(o_l);
  }
  auto pgen = at::detail::createCPUGenerator(seed ^ 0x9e3779b97f4a7c15ULL);
  ChainOut out;
  out.norm = gmean_rows(power_norm([&](const torch::Tensor& v) { return chain_fwd(js, v); },
                                   [&](const torch::Tensor& v) { return chain_bwd(js, v); }, N, d, o.power_iters, pgen));
  out.gain = mean_gain(js, N, d, pgen);
  // The whole map d h_{L+1} / d h_1: v -> B_l (alpha v + A_l v) / alpha (the LnJac carries alpha; divide it out).
  auto full_fwd = [&](torch::Tensor v) {
    for (int l = 0; l < L; ++l) v = js[l].apply(v + v.matmul(As[l].t()) / alpha);
    return v;
  };
  auto full_bwd = [&](torch::Tensor v) {
    for (int l = L - 1; l >= 0; --l) {
      torch::Tensor w = js[l].apply_t(v);
      v = w + w.matmul(As[l]) / alpha;
    }
    return v;
  };
  // Normalise per layer inside the power iteration would lose the norm; the full map stays O(1)
  // per layer at init (Lemma E.6), so plain double precision is safe for L <= a few hundred.
  out.full = gmean_rows(power_norm(full_fwd, full_bwd, N, d, o.power_iters, pgen));
  return out;
}

ChainOut gpt_chain(const TransportOptions& o, const ParamTable& table, int L, uint64_t seed, double* alpha_out) {
  torch::NoGradGuard ng;
  ModelConfig mc;
  mc.kind = o.model;  // validated: a row with the transport trait
  mc.width = o.width;
  mc.depth = L;
  mc.vocab = o.vocab;
  mc.seq_len = o.seq_len;
  mc.head_dim = o.head_dim;
  mc.block = o.block;
  ScaleContext ctx{table, OptFamily::Adam, mc.width, mc.depth};
  torch::manual_seed(seed);
  auto model = build_model(mc, ctx, Hyper{});
  model->eval();
  auto gen = at::detail::createCPUGenerator(seed + 17);
  torch::Tensor x = at::randint(0, o.vocab, {o.batch, o.seq_len}, gen, torch::kLong);
  const std::vector<torch::Tensor> z = detail::transformer_stream(detail::recorded_forward(*model, x));
  const std::vector<std::shared_ptr<TransformerBlock>> blocks = detail::transformer_blocks(*model);
  if (static_cast<int>(blocks.size()) != L || static_cast<int>(z.size()) != L + 1)
    throw std::logic_error("transport: expected one TransformerBlock and one recorded stream output per layer");
  const double vec_mult = role_multiplier(Role::Vector, true, ctx);
  std::vector<LnJac> js;
  double alpha = 1;
  for (int l = 0; l < L; ++l) {
    auto& blk = blocks[l];
    alpha = blk->alpha();
    const double beta = blk->beta();
    const std::shared_ptr<NormGain>&ln1 = blk->ln1(), &ln1_out = blk->ln1_out(), &ln2 = blk->ln2(), &ln2_out = blk->ln2_out();
    const std::shared_ptr<Attention>& attn = blk->attn();
    const std::shared_ptr<Mlp>& mlp = blk->mlp();
    if (!ln1_out || !ln2_out || !attn || !mlp)
      throw std::logic_error("transport: the GPT's post/keel block lacks its output LNs (TransformerBlock changed?)");
    const torch::Tensor& h = z[static_cast<size_t>(l)];
    // seed 000 eq. (34): LN(alpha h + beta f(h)), f on LN_pre(h) under keel.
    torch::Tensor f1 = attn->forward(ln1 ? ln1->forward(h) : h) * beta;
    torch::Tensor o1 = alpha * h + f1;
    torch::Tensor x1 = ln1_out->forward(o1);
    torch::Tensor f2 = mlp->forward(ln2 ? ln2->forward(x1) : x1) * beta;
    torch::Tensor o2 = alpha * x1 + f2;
    torch::Tensor out = ln2_out->forward(o2);
    const torch::Tensor& want = z[static_cast<size_t>(l) + 1];
    if (!torch::allclose(out, want, 1e-4, 1e-4))
      throw std::logic_error("transport: recomputed GPT block output differs from the model's (TransformerBlock changed?)");
    const int64_t d = o.width;
    for (auto [oo, g] : {std::pair{o1, ln1_out}, std::pair{o2, ln2_out}})
      js.push_back(LnJac{oo.reshape({-1, d}).to(torch::kDouble), (g->gain() * vec_mult).to(torch::kDouble), true,
                         kLayerNormEps, alpha});
  }
  *alpha_out = alpha;
  const int64_t N = js.front().o.size(0), d = o.width;
  auto pgen = at::detail::createCPUGenerator(seed ^ 0x9e3779b97f4a7c15ULL);
  ChainOut out;
  out.norm = gmean_rows(power_norm([&](const torch::Tensor& v) { return chain_fwd(js, v); },
                                   [&](const torch::Tensor& v) { return chain_bwd(js, v); }, N, d, o.power_iters, pgen));
  out.gain = mean_gain(js, N, d, pgen);
  return out;
}

void validate(const TransportOptions& o) {
  using detail::require;
  require(o.model == "linear" || transformer(o.model), "--model", fmt::format("unknown model '{}'", o.model),
          fmt::format("use linear (random linear f) or {} (the GPT's post/keel blocks at init)",
                      model_kind_list([](const ModelKind& k) { return k.transport; })));
  detail::require_grid(o.depths, "--depths");
  require(!o.shortcuts.empty(), "--shortcuts", "no shortcut exponent given", "e.g. --shortcuts 0,1 (alpha = 1 and L)");
  for (double s : o.shortcuts)
    require(std::isfinite(s) && s >= 0 && s <= 4, "--shortcuts", fmt::format("exponent {} is outside [0, 4]", s),
            "give alpha = L^s exponents, e.g. 0,1");
  require(o.width >= 2, "--width", fmt::format("width {} < 2", o.width), "e.g. --width 256");
  require(o.seeds >= 1, "--seeds", fmt::format("seeds {} < 1", o.seeds), "give at least 1 seed");
  require(o.batch >= 1, "--batch", fmt::format("batch {} < 1", o.batch), "e.g. --batch 16");
  require(o.power_iters >= 1, "--power-iters", "must be positive", "e.g. 30");
  require(o.norm == "rms" || o.norm == "layer", "--norm", fmt::format("unknown norm '{}'", o.norm),
          "use rms (the seed's LN) or layer (mean-subtracting)");
  if (o.model != "linear") {
    require(o.block == "post" || o.block == "keel", "--block", fmt::format("block '{}' has no post-LN", o.block),
            "use post or keel");
    require(o.head_dim > 0 && o.width % o.head_dim == 0, "--width",
            fmt::format("width {} is not a multiple of head_dim {}", o.width, o.head_dim), "e.g. --width 128");
    require(o.seq_len >= 1 && o.vocab >= 2, "--seq-len", "seq-len and vocab must be positive", "e.g. --seq-len 16");
  }
}

}  // namespace

double TransportPoint::norm_gmean() const {
  double acc = 0;
  for (double v : norm) acc += std::log(std::max(v, 1e-300));
  return norm.empty() ? 0.0 : std::exp(acc / static_cast<double>(norm.size()));
}

TransportResult run_transport(const TransportOptions& o) {
  validate(o);
  TransportResult r;
  r.opts = o;
  ParamTable base;
  if (o.model != "linear") base = detail::load_diag_param(o.param);
  detail::Bar bar(o.show_progress, long(o.shortcuts.size() * o.depths.size() * o.seeds), "transport");
  std::vector<double> xs(o.depths.begin(), o.depths.end());
  for (double sc : o.shortcuts) {
    TransportSeries ser;
    ser.shortcut = sc;
    ParamTable table = base;
    table.shortcut = sc;
    std::vector<std::vector<double>> norms(o.seeds, std::vector<double>(o.depths.size()));
    for (size_t di = 0; di < o.depths.size(); ++di) {
      const int L = o.depths[di];
      TransportPoint pt;
      pt.depth = L;
      pt.alpha = std::pow(static_cast<double>(L), sc);
      pt.n_ln = o.model != "linear" ? 2 * L : L;
      for (int s = 0; s < o.seeds; ++s) {
        // The same random maps for every shortcut (common random numbers): only alpha differs.
        const uint64_t seed = static_cast<uint64_t>(s) * 1000003ULL + static_cast<uint64_t>(L);
        ChainOut c;
        if (o.model == "linear") {
          c = linear_chain(o, L, pt.alpha, seed);
        } else {
          double a = 1;
          c = gpt_chain(o, table, L, seed, &a);
          pt.alpha = a;
        }
        pt.norm.push_back(c.norm);
        pt.mean_gain.push_back(c.gain);
        pt.full.push_back(c.full);
        norms[s][di] = c.norm;
        bar.tick(fmt::format("alpha=L^{} L={} seed {}", sc, L, s));
      }
      pt.bound = o.model == "linear" ? postln_transport_bound(sc, L)
                                     : std::exp(-0.5 * pt.n_ln * std::log1p(std::pow(pt.alpha, -2.0)));
      ser.points.push_back(pt);
    }
    ser.log_norm_slope = fit_slope(xs, norms, false, true);
    std::vector<double> lb;
    for (const auto& p : ser.points) lb.push_back(std::log(p.bound));
    ser.bound_slope = ols_fit(xs, lb).slope;
    ser.min_norm = 1e300;
    for (const auto& p : ser.points) ser.min_norm = std::min(ser.min_norm, p.norm_gmean());
    const double ln_per_block = o.model != "linear" ? 2.0 : 1.0;
    ser.per_ln_factor = std::exp(ser.log_norm_slope.slope / ln_per_block);
    r.series.push_back(std::move(ser));
  }
  bar.finish();

  std::string v;
  for (const auto& s : r.series) {
    if (!v.empty()) v += "; ";
    const std::string a = s.shortcut == 0 ? "alpha = 1" : (s.shortcut == 1 ? "alpha = L" : fmt::format("alpha = L^{}", s.shortcut));
    if (s.log_norm_slope.hi < 0 && s.min_norm < 0.5)
      v += fmt::format("{}: shrinks exponentially, log-norm slope {} per block (bound {:.3f})", a,
                       fit_text(s.log_norm_slope), s.bound_slope);
    else
      v += fmt::format("{}: bounded, smallest norm {:.3f} over depths {}..{} (bound's smallest {:.3f})", a, s.min_norm,
                       o.depths.front(), o.depths.back(),
                       std::min_element(s.points.begin(), s.points.end(),
                                        [](const auto& x, const auto& y) { return x.bound < y.bound; })
                           ->bound);
  }
  r.verdict = v;
  return r;
}

std::string transport_table(const TransportResult& r) {
  const TransportOptions& o = r.opts;
  std::string s;
  if (o.model == "linear")
    s += fmt::format("post-LN transport (seed 000 eqs. 33, 35): h_(l+1) = LN(alpha h_l + A_l h_l), A_l ~ N(0, 1/d), "
                     "{} LN, width {}, {} input vectors, {} seed(s)\n",
                     o.norm == "rms" ? "RMS" : "mean-subtracting", o.width, o.batch, o.seeds);
  else
    s += fmt::format("post-LN transport (seed 000 eqs. 33, 35): GPT {} blocks at init (param {}, 2 LNs per block), "
                     "width {}, {} x {} tokens, {} seed(s)\n",
                     o.block, o.param, o.width, o.batch, o.seq_len, o.seeds);
  s += "norm = ||prod alpha B_l||_2 (power iteration; geometric mean over inputs and seeds); gain = mean ||prod alpha "
       "B_l v|| over random unit v";
  if (o.model == "linear") s += "; full = ||d h_top / d h_1||_2";
  s += "\n";
  for (const auto& ser : r.series) {
    s += fmt::format("\nalpha = L^{}\n", ser.shortcut);
    s += fmt::format("{:>6}{:>10}{:>6}{:>13}{:>13}{:>13}{}\n", "L", "alpha", "LNs", "norm", "bound", "gain",
                     o.model == "linear" ? fmt::format("{:>13}", "full") : "");
    for (const auto& p : ser.points) {
      double g = 0, f = 0;
      for (double v : p.mean_gain) g += v / p.mean_gain.size();
      for (double v : p.full) f += std::log(v) / p.full.size();
      s += fmt::format("{:>6}{:>10.4g}{:>6}{:>13.4e}{:>13.4e}{:>13.4e}{}\n", p.depth, p.alpha, p.n_ln, p.norm_gmean(),
                       p.bound, g, o.model == "linear" ? fmt::format("{:>13.4e}", std::exp(f)) : "");
    }
    s += fmt::format("d log(norm) / dL = {} per block (bound: {:.4f}); measured alpha ||B_l|| per LN = {:.4f}\n",
                     fit_text(ser.log_norm_slope, 4), ser.bound_slope, ser.per_ln_factor);
  }
  s += "verdict: " + r.verdict + "\n";
  return s;
}

nlohmann::json transport_json(const TransportResult& r) {
  const TransportOptions& o = r.opts;
  nlohmann::json j;
  j["diagnostic"] = "transport";
  j["options"] = {{"model", o.model}, {"depths", o.depths}, {"shortcuts", o.shortcuts}, {"width", o.width},
                  {"seeds", o.seeds}, {"batch", o.batch}, {"norm", o.norm}, {"power_iters", o.power_iters},
                  {"param", o.param}, {"block", o.block}, {"seq_len", o.seq_len}, {"vocab", o.vocab},
                  {"head_dim", o.head_dim}};
  j["series"] = nlohmann::json::array();
  for (const auto& ser : r.series) {
    nlohmann::json pts = nlohmann::json::array();
    for (const auto& p : ser.points) {
      nlohmann::json full = nlohmann::json::array();
      for (double v : p.full) full.push_back(json_number(v));
      pts.push_back({{"depth", p.depth}, {"alpha", p.alpha}, {"n_ln", p.n_ln}, {"bound", p.bound},
                     {"norm", p.norm}, {"norm_gmean", p.norm_gmean()}, {"mean_gain", p.mean_gain}, {"full", full}});
    }
    j["series"].push_back({{"shortcut", ser.shortcut},
                           {"points", pts},
                           {"log_norm_slope", fit_json(ser.log_norm_slope)},
                           {"bound_slope", ser.bound_slope},
                           {"min_norm", ser.min_norm},
                           {"per_ln_factor", ser.per_ln_factor}});
  }
  j["verdict"] = r.verdict;
  return j;
}

}  // namespace scaleinv::diag
