// Initialization statistics of seed 002 Part I §1, eq. (1.61) and footnote 9 (docs/design.md
// "Transformer statistics at init"; src/engine/diagnostics/diagnostics.h), for the GPT and the ViT at init.
//
// Attention logits. Per head, before the mask and the softmax, after the logit scale:
//   s[t, t'] = scale q_t . k_t',   q = mult_Q W_Q LN(z), k = mult_K W_K LN(z)
// With C_Q = mult_Q^2 Var(W_Q) n (the variance of one q entry per unit LN output) and C_K likewise,
// eq. (1.61) gives E s^2 = scale^2 d_head C_Q C_K F^2 (F = mean LN output square = 1), i.e. C_Q C_K
// independent of the width when scale = d_head^-1/2 (fixed head_dim here). The logits are not
// recorded by the models: they are recomputed from each block's own modules (ln1, attn.q, attn.k),
// and the recomputation is checked by rebuilding the attention output from them (softmax, V, O)
// and comparing with Attention::forward.
//
// Residual stream. Under pre-LN the diagonal of G grows linearly with depth (footnote 9): each
// block adds a constant C_U C_V <Omega Omega> F (attention) + C_X <sigma^2> (MLP) to G(l) = mean z_l^2.
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "engine/runtime/tensor_rms.h"
#include "engine/diagnostics/diag_detail.h"
#include "engine/diagnostics/diagnostics.h"
#include "brain/util/slope_fit.h"
#include "engine/models/layers.h"
#include "brain/models/model_kinds.h"

namespace scaleinv::diag {

namespace {

// The transformers the diagnostic reads (engine/models/layers.h TransformerBlock; the rows with the
// init_stats trait, brain/models/model_kinds.h): on tokens (causal) and on image patches.
bool takes(const std::string& model) {
  const ModelKind* k = find_model_kind(model);
  return k && k->init_stats;
}

// "use gpt and/or vit"
std::string init_stats_models_fix() {
  std::vector<std::string> names;
  for (const ModelKind& k : model_kinds())
    if (k.init_stats) names.push_back(k.name);
  return fmt::format("use {}", fmt::join(names, " and/or "));
}

ModelConfig model_config(const InitStatsOptions& o, const std::string& kind, int width, int depth) {
  ModelConfig mc;
  mc.kind = kind;
  mc.width = width;
  mc.depth = depth;
  mc.vocab = o.vocab;
  mc.seq_len = o.seq_len;
  mc.head_dim = o.head_dim;
  mc.block = "pre";
  mc.image_size = 28;
  mc.channels = 1;
  mc.patch = 7;
  mc.n_classes = 10;
  return mc;
}

torch::Tensor inputs(const ModelConfig& mc, int batch, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  if (model_kind(mc.kind).language()) return at::randint(0, mc.vocab, {batch, mc.seq_len}, gen, torch::kLong);
  return at::randn({batch, mc.channels, mc.image_size, mc.image_size}, gen, torch::kFloat);
}

// Forward with recording; the residual stream z_0..z_L, found by role (diag_detail.h).
std::vector<torch::Tensor> stream(Model& m, const torch::Tensor& x, int L) {
  std::vector<torch::Tensor> z = detail::transformer_stream(detail::recorded_forward(m, x));
  if (static_cast<int>(z.size()) != L + 1)
    throw std::logic_error(fmt::format("init-stats: a stream of {} activations for {} blocks", z.size(), L));
  return z;
}

struct LogitStats {
  double var = 0, head_cv = 0, predicted = 0;
};

// Mean over blocks of the per-head logit variance (and its spread over heads), with the prediction.
LogitStats logit_stats(Model& m, const ModelConfig& mc, const torch::Tensor& x) {
  torch::NoGradGuard ng;
  const std::vector<torch::Tensor> z = stream(m, x, mc.depth);
  const std::vector<std::shared_ptr<TransformerBlock>> blocks = detail::transformer_blocks(m);
  if (static_cast<int>(blocks.size()) != mc.depth) throw std::logic_error("init-stats: expected one TransformerBlock per layer");
  const HeadShape hs = head_shape(mc, m.context());
  LogitStats out;
  std::vector<double> head_vars_all;
  for (int l = 0; l < mc.depth; ++l) {
    const std::shared_ptr<NormGain>& ln1 = blocks[l]->ln1();
    const std::shared_ptr<Attention>& attn = blocks[l]->attn();
    if (!ln1 || !attn) throw std::logic_error("init-stats: a block without its pre-attention norm (not pre-LN?)");
    const std::shared_ptr<Dense>&q = attn->q(), &k = attn->k(), &v = attn->v(), &o = attn->o();
    const torch::Tensor in = ln1->forward(z[l]);
    const int64_t B = in.size(0), T = in.size(1), d = in.size(2), H = hs.n_heads, dh = hs.d_head;
    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, H, dh}).permute({0, 2, 1, 3}); };
    const double scale = attn->logit_scale();
    torch::Tensor qh = heads(q->forward(in)), kh = heads(k->forward(in));
    torch::Tensor logits = torch::matmul(qh, kh.transpose(-2, -1)) * scale;  // [B, H, T, T]
    // Check: the attention output rebuilt from these logits equals the module's.
    torch::Tensor masked = logits;
    if (model_kind(mc.kind).language()) {  // causal
      torch::Tensor mask = torch::ones({T, T}, torch::kBool).triu(1);
      masked = logits.masked_fill(mask, -std::numeric_limits<double>::infinity());
    }
    torch::Tensor rebuilt =
        o->forward(torch::matmul(torch::softmax(masked, -1), heads(v->forward(in))).transpose(1, 2).reshape({B, T, d}));
    torch::Tensor ref = attn->forward(in);
    if (!torch::allclose(rebuilt, ref, 1e-3, 1e-4 * (1.0 + ref.abs().max().item<double>())))
      throw std::logic_error("init-stats: recomputed attention logits do not reproduce Attention::forward");
    torch::Tensor hv = logits.to(torch::kDouble).permute({1, 0, 2, 3}).reshape({H, -1}).var(1, /*unbiased=*/false);
    out.var += hv.mean().item<double>() / mc.depth;
    out.head_cv += (hv.std(0, false) / hv.mean()).item<double>() / mc.depth;
    // Prediction: scale^2 d_head C_Q C_K F^2 with the tensors' own init (seed 002 eq. 1.61).
    const double F = in.to(torch::kDouble).pow(2).mean().item<double>();
    const double cq = std::pow(q->multiplier() * tensor_rms(q->weight()), 2) * double(d);
    const double ck = std::pow(k->multiplier() * tensor_rms(k->weight()), 2) * double(d);
    out.predicted += scale * scale * double(dh) * cq * ck * F * F / mc.depth;
  }
  return out;
}

void validate(const InitStatsOptions& o) {
  using detail::require;
  require(!o.models.empty(), "--models", "no model given", "use gpt, vit or gpt,vit");
  for (const auto& m : o.models)
    require(takes(m), "--models", fmt::format("unknown model '{}'", m), init_stats_models_fix());
  detail::require_grid(o.widths, "--widths");
  require(o.head_dim > 0, "--head-dim", fmt::format("head_dim {} < 1", o.head_dim), "e.g. --head-dim 16");
  for (int w : o.widths)
    require(w % o.head_dim == 0, "--widths",
            fmt::format("width {} is not a multiple of head_dim {}", w, o.head_dim), "use multiples of --head-dim");
  require(o.stream_width > 0 && o.stream_width % o.head_dim == 0, "--stream-width",
          fmt::format("width {} is not a multiple of head_dim {}", o.stream_width, o.head_dim), "e.g. 128");
  require(o.depth >= 1, "--depth", fmt::format("depth {} < 1", o.depth), "e.g. --depth 2");
  require(o.stream_depth >= 4, "--stream-depth", fmt::format("depth {} < 4", o.stream_depth),
          "give at least 4 blocks to see the growth, e.g. 32");
  require(o.init_scales.size() >= 2, "--init-scales", "a slope needs at least two init scales", "e.g. 0.5,1,2");
  for (double s : o.init_scales)
    require(std::isfinite(s) && s > 0, "--init-scales", fmt::format("{} is not positive", s), "e.g. 0.5,1,2");
  require(o.seeds >= 1, "--seeds", fmt::format("seeds {} < 1", o.seeds), "give at least 1 seed");
  require(o.batch >= 1, "--batch", fmt::format("batch {} < 1", o.batch), "e.g. --batch 4");
  require(o.seq_len >= 2, "--seq-len", fmt::format("seq-len {} < 2", o.seq_len), "e.g. --seq-len 32");
  require(o.vocab >= 2, "vocab", fmt::format("vocab {} < 2", o.vocab), "use a vocabulary of at least 2 tokens");
}

}  // namespace

InitStatsResult run_init_stats(const InitStatsOptions& o) {
  validate(o);
  const ParamTable table = detail::load_diag_param(o.param);
  const int scale_width = o.widths[std::min<size_t>(1, o.widths.size() - 1)];
  InitStatsResult r;
  r.opts = o;
  const long total = long(o.models.size()) * o.seeds * long(o.widths.size() + o.init_scales.size() + 1);
  detail::Bar bar(o.show_progress, total, "init-stats");
  for (const auto& kind : o.models) {
    InitStatsModel im;
    im.model = kind;
    auto run = [&](int width, double init_scale) {
      LogitVariance lv;
      lv.width = width;
      lv.init_scale = init_scale;
      for (int s = 0; s < o.seeds; ++s) {
        const ModelConfig mc = model_config(o, kind, width, o.depth);
        Hyper hp;
        hp.init_scale = init_scale;
        torch::manual_seed(static_cast<uint64_t>(s));
        auto model = build_model(mc, ScaleContext{table, OptFamily::Adam, width, o.depth}, hp);
        model->eval();
        const LogitStats st = logit_stats(*model, mc, inputs(mc, o.batch, uint64_t(s) + 101));
        lv.var.push_back(st.var);
        lv.head_cv.push_back(st.head_cv);
        lv.predicted += st.predicted / o.seeds;
        bar.tick(fmt::format("{} d={} init_scale {} seed {}", kind, width, init_scale, s));
      }
      return lv;
    };
    for (int w : o.widths) im.by_width.push_back(run(w, 1.0));
    for (double sc : o.init_scales) im.by_scale.push_back(run(scale_width, sc));

    auto fit_of = [&](const std::vector<LogitVariance>& v, bool by_width, double* pred_slope) {
      std::vector<double> xs, lp;
      std::vector<std::vector<double>> ys(o.seeds);
      for (const auto& lv : v) {
        xs.push_back(by_width ? lv.width : lv.init_scale);
        lp.push_back(std::log(lv.predicted));
        for (int s = 0; s < o.seeds; ++s) ys[s].push_back(lv.var[s]);
      }
      std::vector<double> lx;
      for (double x : xs) lx.push_back(std::log(x));
      *pred_slope = ols_fit(lx, lp).slope;
      return fit_slope(xs, ys, true, true);
    };
    im.width_slope = fit_of(im.by_width, true, &im.pred_width_slope);
    im.scale_slope = fit_of(im.by_scale, false, &im.pred_scale_slope);

    // Residual stream of a deep pre-LN stack.
    const int L = o.stream_depth;
    std::vector<double> ls, ls2;
    for (int l = 0; l <= L; ++l) ls.push_back(l);
    std::vector<std::vector<double>> rises;
    for (int s = 0; s < o.seeds; ++s) {
      const ModelConfig mc = model_config(o, kind, o.stream_width, L);
      torch::manual_seed(static_cast<uint64_t>(s));
      auto model = build_model(mc, ScaleContext{table, OptFamily::Adam, o.stream_width, L}, Hyper{});
      model->eval();
      torch::NoGradGuard ng;
      std::vector<double> g;
      for (const auto& t : stream(*model, inputs(mc, o.batch, uint64_t(s) + 101), L))
        g.push_back(t.to(torch::kDouble).pow(2).mean().item<double>());
      std::vector<double> rise;
      for (int l = 2; l <= L; ++l) rise.push_back(g[l] - g[0]);
      rises.push_back(rise);
      im.stream.push_back(g);
      bar.tick(fmt::format("{} stream seed {}", kind, s));
    }
    for (int l = 2; l <= L; ++l) ls2.push_back(l);
    im.stream_linear_slope = fit_slope(ls, im.stream, false, false);
    im.stream_loglog_slope = fit_slope(ls2, rises, true, true);
    std::vector<double> mean_g(L + 1, 0.0);
    for (const auto& g : im.stream)
      for (int l = 0; l <= L; ++l) mean_g[l] += g[l] / o.seeds;
    const OlsFit line = ols_fit(ls, mean_g);
    const double a = line.intercept, b = line.slope;
    double ss_res = 0, ss_tot = 0, mg = 0;
    for (double v : mean_g) mg += v / mean_g.size();
    for (int l = 0; l <= L; ++l) {
      ss_res += std::pow(mean_g[l] - a - b * l, 2);
      ss_tot += std::pow(mean_g[l] - mg, 2);
    }
    im.stream_r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 0.0;
    r.models.push_back(std::move(im));
  }
  bar.finish();
  return r;
}

std::string init_stats_table(const InitStatsResult& r) {
  const InitStatsOptions& o = r.opts;
  std::string s = fmt::format(
      "init statistics (seed 002 section 5): param {}, pre-LN, head_dim {}, {} seed(s), batch {}{}\n", o.param,
      o.head_dim, o.seeds, o.batch, " (gpt: random tokens, seq " + std::to_string(o.seq_len) + "; vit: N(0,1) 28x28 images)");
  for (const auto& m : r.models) {
    s += fmt::format("\n{}: attention-logit variance per head (before softmax, after the logit scale), mean over {} "
                     "block(s) and the heads; predicted scale^2 d_head C_Q C_K F^2 (eq. 1.61)\n",
                     m.model, o.depth);
    s += fmt::format("{:>8}{:>12}{:>14}{:>14}{:>10}{:>12}\n", "width", "init_scale", "measured", "predicted", "ratio",
                     "head CV");
    auto rows = [&](const std::vector<LogitVariance>& v) {
      for (const auto& lv : v) {
        double mv = 0, cv = 0;
        for (double x : lv.var) mv += x / lv.var.size();
        for (double x : lv.head_cv) cv += x / lv.head_cv.size();
        s += fmt::format("{:>8}{:>12.3g}{:>14.4g}{:>14.4g}{:>10.3f}{:>12.3f}\n", lv.width, lv.init_scale, mv,
                         lv.predicted, mv / lv.predicted, cv);
      }
    };
    rows(m.by_width);
    rows(m.by_scale);
    s += fmt::format("d log Var / d log width      = {}  (predicted {:.3f}: independent of width)\n",
                     fit_text(m.width_slope), m.pred_width_slope);
    s += fmt::format("d log Var / d log init_scale = {}  (predicted {:.3f}: C_Q C_K ~ init_scale^4)\n",
                     fit_text(m.scale_slope), m.pred_scale_slope);
    const int L = o.stream_depth;
    std::vector<double> mean_g(L + 1, 0.0);
    for (const auto& g : m.stream)
      for (int l = 0; l <= L; ++l) mean_g[l] += g[l] / m.stream.size();
    s += fmt::format("{}: residual stream G(l) = mean z_l^2 under pre-LN, width {}, {} blocks\n", m.model,
                     o.stream_width, L);
    s += "   l:";
    for (int l = 0; l <= L; l += std::max(1, L / 8)) s += fmt::format(" {:>8}", l);
    s += "\nG(l):";
    for (int l = 0; l <= L; l += std::max(1, L / 8)) s += fmt::format(" {:>8.3g}", mean_g[l]);
    s += fmt::format("\ndG/dl = {} per block (R^2 of the line {:.4f}); d log(G(l) - G(0)) / d log l = {} (1: linear)\n",
                     fit_text(m.stream_linear_slope), m.stream_r2, fit_text(m.stream_loglog_slope));
  }
  return s;
}

nlohmann::json init_stats_json(const InitStatsResult& r) {
  const InitStatsOptions& o = r.opts;
  nlohmann::json j;
  j["diagnostic"] = "init-stats";
  j["options"] = {{"models", o.models}, {"param", o.param}, {"widths", o.widths}, {"depth", o.depth},
                  {"init_scales", o.init_scales}, {"stream_depth", o.stream_depth}, {"stream_width", o.stream_width},
                  {"seeds", o.seeds}, {"batch", o.batch}, {"seq_len", o.seq_len}, {"vocab", o.vocab},
                  {"head_dim", o.head_dim}};
  j["models"] = nlohmann::json::array();
  for (const auto& m : r.models) {
    auto lvs = [](const std::vector<LogitVariance>& v) {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& lv : v)
        a.push_back({{"width", lv.width}, {"init_scale", lv.init_scale}, {"var", lv.var}, {"head_cv", lv.head_cv},
                     {"predicted", lv.predicted}});
      return a;
    };
    j["models"].push_back({{"model", m.model},
                           {"by_width", lvs(m.by_width)},
                           {"by_scale", lvs(m.by_scale)},
                           {"width_slope", fit_json(m.width_slope)},
                           {"pred_width_slope", m.pred_width_slope},
                           {"scale_slope", fit_json(m.scale_slope)},
                           {"pred_scale_slope", m.pred_scale_slope},
                           {"stream", m.stream},
                           {"stream_linear_slope", fit_json(m.stream_linear_slope)},
                           {"stream_loglog_slope", fit_json(m.stream_loglog_slope)},
                           {"stream_r2", m.stream_r2}});
  }
  return j;
}

}  // namespace scaleinv::diag
