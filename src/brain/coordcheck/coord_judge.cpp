// The coordinate check's rows and verdicts (see coordcheck.h): per (axis, at, quantity, layer,
// step) the log-log slope over seeds (brain/util/slope_fit.h) with its tolerance and its predicted
// exponent (fit_rows), then the two verdicts, matches theory and stable (judge).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "brain/coordcheck/coord_detail.h"
#include "brain/coordcheck/coord_result.h"
#include "brain/util/slope_fit.h"

namespace scaleinv::coord_detail {

// ============================================================================================
// Rows
// ============================================================================================

namespace {

// What every row is predicted from: fit_rows' arguments.
struct RowTheory {
  const std::map<int, WidthTheory>& width_theories;  // by depth
  const DepthTheory& depth_theory;
  const std::string& stream_prefix;
  bool qk_unmodelled;
  bool depth_power_law;
  const LayerMapper& map_layer;
  bool tied_readout = false;  // the readout is the embedding's transpose (model.tied)
  const ParamTable& table;    // the expert-count column (experts_prediction)
  OptFamily family = OptFamily::Adam;
};

// One fitted axis: x ("width", "depth" or "experts") runs over xs with the other dimension held at
// `at` (an experts axis: the width, at the first depth).
struct AxisGrid {
  std::string axis;
  int at = 0;
  std::vector<int> xs;
  std::vector<std::vector<const CoordRun*>> runs;  // [seed][x]; nullptr where a run is missing
  double finite_term = 0;                           // the axis's finite-size term (slope_fit.h)
  double qk_finite_term = 0;                        // width: W_q's and W_k's, over the probe's pairs
  int64_t n_assign = 0;                             // a mixture's assignments in the probe
};

const CoordRun* find_run(const std::vector<CoordRun>& runs, int w, int d, int e, int64_t s) {
  for (const CoordRun& r : runs)
    if (r.width == w && r.depth == d && r.experts == e && r.seed == s) return &r;
  return nullptr;
}

const CoordSeries* find_series(const CoordRun& run, CoordQuantity q, const std::string& layer) {
  for (const CoordSeries& s : run.series)
    if (s.q == q && s.layer == layer) return &s;
  return nullptr;
}

// The runs along this axis, per seed, and the axis's finite-size term.
AxisGrid axis_grid(const CoordCheckResult& res, const std::string& axis, int at, const std::vector<int>& xs) {
  AxisGrid g;
  g.axis = axis;
  g.at = at;
  g.xs = xs;
  const int e0 = res.grid_experts();
  for (int64_t s : res.config.seeds) {
    std::vector<const CoordRun*> row;
    for (int x : xs)
      row.push_back(axis == "width"   ? find_run(res.runs, x, at, e0, s)
                    : axis == "depth" ? find_run(res.runs, at, x, e0, s)
                                      : find_run(res.runs, at, res.depths.front(), x, s));
    g.runs.push_back(row);
  }
  g.finite_term = axis == "width"   ? finite_size_term(xs.front(), xs.back(), double(res.n_probe + res.n_out))
                  : axis == "depth" ? finite_size_term(xs.front(), xs.back())
                                    : experts_finite_term(xs.front(), xs.back(), double(res.n_assign), false);
  g.qk_finite_term = axis == "width" && res.n_pairs > 0
                         ? finite_size_term(xs.front(), xs.back(), double(res.n_pairs + res.n_out))
                         : g.finite_term;
  g.n_assign = res.n_assign;
  return g;
}

// Layer names in order (from the first run); along depth, the top of the stream is "top" and
// only layers present at every depth are kept (row_values drops the others).
std::vector<std::pair<CoordQuantity, std::string>> axis_layers(const AxisGrid& g, const std::string& stream_prefix) {
  auto depth_name = [&](const std::string& layer, int depth) {
    return layer == stream_prefix + std::to_string(depth) ? std::string("top") : layer;
  };
  const CoordRun& first = *g.runs.front().front();
  std::vector<std::pair<CoordQuantity, std::string>> layers;  // (quantity, canonical name)
  for (const CoordSeries& s : first.series) {
    std::string name = g.axis == "depth" ? depth_name(s.layer, first.depth) : s.layer;
    layers.emplace_back(s.q, name);
  }
  // Sort by quantity, keeping first-seen order within a quantity.
  std::stable_sort(layers.begin(), layers.end(),
                   [](const auto& a, const auto& b) { return static_cast<int>(a.first) < static_cast<int>(b.first); });
  return layers;
}

// row.y[seed][x]: the RMS of (row.q, row.layer) at row.step in every run of the grid. False when
// a run lacks the layer (a layer that does not exist at every depth): no row.
bool row_values(const AxisGrid& g, const std::string& stream_prefix, CoordRow& row) {
  for (const auto& seed_row : g.runs) {
    std::vector<double> ys;
    for (const CoordRun* run : seed_row) {
      std::string actual = row.layer;
      if (g.axis == "depth" && row.layer == "top") actual = stream_prefix + std::to_string(run->depth);
      const CoordSeries* s = run ? find_series(*run, row.q, actual) : nullptr;
      if (!s) return false;
      ys.push_back(s->rms[static_cast<size_t>(row.step)]);
    }
    row.y.push_back(ys);
  }
  return true;
}

// The row's finite-size term: the axis's, plus the Bai-Yin term of ||W|| along width, or along E
// the occupancy term of a routed tensor's normalised update.
// W_q's and W_k's gradients sum one term per attended (query, key) pair, not per position: dW_k =
// s sum_ij dA_ij q_i x_j^T with dA the softmax's centred Jacobian times the output gradient, signed
// and different for every pair (W_v's weights P_ij are an average over queries, smooth at init: its
// sum is per key). Their incoherent remainder counts n = pairs + outputs (docs/moe.md: the update's
// measured coherence gives n_eff about 66 for W_k at the MoE's probe, 16 for W_v, under 72 + 32).
double row_finite_term(const AxisGrid& g, const CoordRow& row, const Mapping& m, OptFamily f) {
  double term = m.target == Target::HiddenWQK && !is_activation_quantity(row.q) ? g.qk_finite_term : g.finite_term;
  if (g.axis == "experts" && m.routed && row.q == CoordQuantity::DW && f != OptFamily::SGD)
    return experts_finite_term(g.xs.front(), g.xs.back(), double(g.n_assign), true);
  if (row.q == CoordQuantity::WSpec && g.axis == "width") {
    // One fan fixed (the same at the smallest and largest width): the Bai-Yin term (header).
    const std::vector<int>& xs = g.xs;
    const CoordSeries* lo = find_series(*g.runs.front().front(), row.q, row.layer);
    const CoordSeries* hi = find_series(*g.runs.front().back(), row.q, row.layer);
    if (lo && hi && lo->shape.size() == 2 && hi->shape.size() == 2)
      for (int k = 0; k < 2; ++k)
        if (lo->shape[k] == hi->shape[k] && lo->shape[1 - k] != hi->shape[1 - k]) {
          const double f = static_cast<double>(lo->shape[k]);
          term += (std::log1p(std::sqrt(f / xs.front())) - std::log1p(std::sqrt(f / xs.back()))) /
                  std::log(static_cast<double>(xs.back()) / xs.front());
        }
  }
  return term;
}

// The readout's init term (docs/coordcheck.md, "The readout's init term, and W_q and W_k"). The change of the
// logits is dh_t = m (W_t x_t - W_0 x_0) = m dW_t x_t + m W_0 dx_t (seed 000 eq. 1 at layer L+2).
// Under a stable parameterization the update term and the part of W_0 dx_t aligned with W_0 (dx_t
// follows the gradient W_0 sends back) are Theta(1): the row's d^0. The part of W_0 dx_t from the
// part of dx_t independent of W_0 is W_0 times a random vector: RMS at most I_t = h_0(out) dh_t(in) /
// h_0(in), `in` the activation that feeds the readout (all of dx_t counted: an upper bound), i.e.
// the init logits' d^-1/2 times the input's relative change. It adds in quadrature, dh^2 = K^2 + J^2
// with J <= I, so where it falls with width it pulls the total's slope below K's by
// (1/2) [ln(1 - f(d_max)) - ln(1 - f(d_min))] / ln(d_max/d_min), f = J^2 / dh^2, which is at most
// -(1/2) ln(1 - F) / ln(d_max/d_min), F = I^2 / dh^2 at the smallest width (the largest over seeds).
// That bound is the row's allowance below its prediction; above it nothing changes (stability is
// never judged with it). F and the allowance; F = 1 (no allowance) where I >= dh somewhere at the
// smallest width (the bound says nothing); nullopt where a series it needs was not measured.
struct InitTermBound {
  double F = 0, allowance = 0;
};
std::optional<InitTermBound> readout_init_bound(const AxisGrid& g, const std::string& input, const CoordRow& row) {
  InitTermBound b;
  const size_t t = static_cast<size_t>(row.step);
  for (size_t s = 0; s < g.runs.size(); ++s) {
    const CoordRun* run = g.runs[s].front();  // the smallest width (xs ascending)
    const CoordSeries* out = run ? find_series(*run, CoordQuantity::H, row.layer) : nullptr;
    const CoordSeries* in_h = run ? find_series(*run, CoordQuantity::H, input) : nullptr;
    const CoordSeries* in_dh = run ? find_series(*run, CoordQuantity::DH, input) : nullptr;
    if (!out || !in_h || !in_dh || in_dh->rms.size() <= t || !(in_h->rms[0] > 0)) return std::nullopt;
    const double total = row.y[s].front(), init = out->rms[0] * in_dh->rms[t] / in_h->rms[0];
    if (!(std::isfinite(total) && std::isfinite(init) && total > 0)) return std::nullopt;
    if (!(init < total)) return InitTermBound{1.0, 0.0};
    b.F = std::max(b.F, init * init / (total * total));
  }
  b.allowance = -0.5 * std::log1p(-b.F) / std::log(static_cast<double>(g.xs.back()) / g.xs.front());
  return b;
}

// The row's predicted exponent, or why it has none.
Pred row_prediction(const RowTheory& th, const AxisGrid& g, const Mapping& m, const CoordRow& row) {
  const bool weight = !is_activation_quantity(row.q);
  Pred p;
  if (!m.found) {
    p.why = weight && (row.layer.find("gain") != std::string::npos || row.layer.find("bias") != std::string::npos)
                ? "no prediction (vector-like tensor)"
                : "no prediction";
  } else if (th.tied_readout && g.axis == "width" && row.q == CoordQuantity::H && row.step == 0 &&
             row.layer == "logits") {
    // seed 002 footnote 19: with the readout tied to the embedding, the logit of the input's own
    // token carries a contact term through the skip path, one component of order d against
    // n_vocab components of order sqrt(d); widths near n_vocab mix the two power laws (slopes 1/2
    // apart), so no single exponent is predicted at init. After the first update the untied
    // predictions hold (the gradient of both uses accumulates: seed 000 A.1.2).
    p.why = "no prediction at init: tied readout (seed 002 footnote 19: the own token's contact term, order d, "
            "against n_vocab terms of order sqrt(d))";
  } else if (g.axis == "width") {
    p = width_prediction(th.width_theories.at(g.at), m, row.q, row.step, th.qk_unmodelled);
  } else if (g.axis == "experts") {
    p = experts_prediction(th.table, th.family, m, row.q, row.step);
  } else {
    p = depth_prediction(th.depth_theory, m, row.q, row.step, th.depth_power_law);
  }
  return p;
}

// Why a quantity is zero at every width and seed at step t: what the theory says of such a state.
std::string zero_reason(CoordQuantity q, int t) {
  switch (q) {
    case CoordQuantity::DW:
    case CoordQuantity::DWSpec:
      return "zero everywhere: the tensor did not move (frozen, or no gradient reached it)";
    case CoordQuantity::DH:
      return "zero everywhere: nothing below it has moved yet";
    case CoordQuantity::HGrad:
    case CoordQuantity::WGrad:
      return t == 0 ? "zero everywhere at step 0: no gradient passes a zero-initialized layer above it (e.g. a "
                      "zero-init readout) until its first update"
                    : "zero everywhere: no gradient reaches it (frozen or cut off)";
    default:
      return t == 0 ? "zero everywhere at step 0: a zero-initialized layer (e.g. a zero-init readout)"
                    : "zero everywhere: a zero layer";
  }
}

// One (quantity, layer, step) along the axis: measured, fitted, predicted. nullopt: no row.
// readout_input: the activation feeding the readout, for its dh rows (readout_init_bound).
std::optional<CoordRow> fit_row(const RowTheory& th, const AxisGrid& g, const Mapping& m, CoordQuantity q,
                                const std::string& name, int t, const std::string& readout_input) {
  CoordRow row;
  row.axis = g.axis;
  row.at = g.at;
  row.q = q;
  row.layer = name;
  row.step = t;
  for (int x : g.xs) row.x.push_back(x);
  if (!row_values(g, th.stream_prefix, row)) return std::nullopt;
  bool all_zero = !row.y.empty();
  for (const std::vector<double>& ys : row.y)
    for (double y : ys) all_zero = all_zero && y == 0.0;
  if (all_zero) {  // a state, not a failure (coord_result.h CoordRow::zero)
    row.zero = true;
    row.fit.problem = "zero at every width and seed";
    row.maps_to = zero_reason(q, t);
    return row;
  }
  row.fit = fit_loglog_slope(row.x, row.y);
  row.finite_term = row_finite_term(g, row, m, th.family);
  row.tolerance = row.fit.half_width + row.finite_term;
  const Pred p = row_prediction(th, g, m, row);
  row.predicted = p.e;
  row.maps_to = p.why;
  if (q == CoordQuantity::DH && m.target == Target::Logits && g.axis == "width" && !readout_input.empty() &&
      row.predicted) {
    const auto b = readout_init_bound(g, readout_input, row);
    if (!b) {
      row.maps_to += fmt::format("; no allowance for W_0 dx's part independent of W_0: h and dh of {} (what feeds "
                                 "the readout) were not measured", readout_input);
    } else if (b->F >= 1) {
      row.maps_to += fmt::format("; W_0 dx's part independent of W_0 (measured through {}) may be the whole change at "
                                 "width {}: no allowance",
                                 readout_input, g.xs.front());
    } else {
      row.below = b->allowance;
      row.maps_to += fmt::format("; below it up to {:.2f} more: W_0 dx's part independent of W_0 (at most {:.0f}% of "
                                 "the power at width {}, measured through {})",
                                 b->allowance, 100 * b->F, g.xs.front(), readout_input);
    }
  }
  row.finite_term += p.band;
  row.tolerance += p.band;
  return row;
}

// Every row of one axis, by quantity, layer and step (dh, dW, ||dW|| from step 1).
void fit_axis(CoordCheckResult& res, const RowTheory& th, const std::string& axis, int at,
              const std::vector<int>& xs) {
  const AxisGrid g = axis_grid(res, axis, at, xs);
  const auto layers = axis_layers(g, th.stream_prefix);
  // The activation feeding the (untied) readout: the last one before it in forward order that is
  // not itself a readout's output (a router's logits).
  std::string readout_input, last;
  for (const auto& [q, name] : layers) {
    if (q != CoordQuantity::H) continue;
    const Target t = th.map_layer(axis, false, name).target;
    if (t == Target::Logits && readout_input.empty()) readout_input = last;
    if (t != Target::Logits && t != Target::TiedLogits && t != Target::RouterLogits) last = name;
  }
  for (const auto& [q, name] : layers) {
    const Mapping m = th.map_layer(axis, !is_activation_quantity(q), name);
    bool zero_at_init = false;  // h_0 = 0 at every width (a zero-initialized layer): h_t = dh_t
    for (int t = 0; t <= res.config.steps; ++t) {
      if ((q == CoordQuantity::DH || q == CoordQuantity::DW || q == CoordQuantity::DWSpec) && t == 0) continue;
      std::optional<CoordRow> row = fit_row(th, g, m, q, name, t, readout_input);
      if (!row) continue;
      if (q == CoordQuantity::H && t == 0) zero_at_init = row->zero;
      if (q == CoordQuantity::H && t >= 1 && zero_at_init && !row->zero) {
        CoordRow as_dh = *row;  // the zero-init prediction: h_t = h_0 + dh_t = dh_t
        as_dh.q = CoordQuantity::DH;
        const Pred p = row_prediction(th, g, m, as_dh);
        row->predicted = p.e;
        row->maps_to = p.e ? "h_t = dh_t (h_0 = 0 at every width: zero-initialized); " + p.why : p.why;
      }
      res.rows.push_back(std::move(*row));
    }
  }
}

}  // namespace

void fit_rows(CoordCheckResult& res, const std::map<int, WidthTheory>& width_theories,
              const std::string& stream_prefix, bool qk_unmodelled, bool depth_power_law,
              const LayerMapper& map_layer) {
  const RowTheory th{width_theories, res.depth_theory, stream_prefix,
                     qk_unmodelled,  depth_power_law,    map_layer,
                     res.config.train.model.tied, res.table, res.family};
  if (res.widths.size() >= 2)
    for (int d : res.depths) fit_axis(res, th, "width", d, res.widths);
  if (res.depths.size() >= 2)
    for (int w : res.widths) fit_axis(res, th, "depth", w, res.depths);
  if (res.experts.size() >= 2)
    for (int w : res.widths) fit_axis(res, th, "experts", w, res.experts);
}

// ============================================================================================
// Judging
// ============================================================================================

namespace {

std::string steps_list(const std::vector<int>& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out;
}

// A width row that misses its prediction: is the miss the leading 1/d finite-width term
// (coord_result.h)? Fits CoordRow::past_finite_width on >= 4 widths.
bool matches_past_finite_width(CoordRow& r) {
  if (r.axis != "width" || r.x.size() < 4 || !r.predicted) return false;
  r.past_finite_width = fit_inverse_width(r.x, r.y);
  const InverseWidthFit& f = r.past_finite_width;
  if (!f.valid) return false;
  const double miss = std::fabs(f.e.mean - *r.predicted);
  return std::fabs(f.c.mean) > f.c.half_width && miss <= f.e.half_width + f.next_order &&
         miss <= r.tolerance + f.next_order;
}

// What the second look past the 1/d term said of a row that still misses: a resolved term that
// does not explain it, or a term the grid cannot resolve (more widths or seeds would tell). Empty
// without a second look.
std::string past_finite_width_detail(const CoordRow& r) {
  const InverseWidthFit& f = r.past_finite_width;
  if (!f.valid) return "";
  if (std::fabs(f.c.mean) <= f.c.half_width)
    return fmt::format("; past a 1/d term e = {:+.2f} +- {:.2f}, the term unresolved (c = {:+.0f} +- {:.0f}): more "
                       "widths or seeds would tell a finite-width term from another exponent",
                       f.e.mean, f.e.half_width, f.c.mean, f.c.half_width);
  return fmt::format("; past the 1/d term e = {:+.2f} +- {:.2f} still misses: another exponent, or a finite-width "
                     "term not yet 1/d at these widths",
                     f.e.mean, f.e.half_width);
}

std::string row_label(const CoordRow& r) {
  return fmt::format("{} {} ({}, {} {})", coord_quantity_name(r.q), r.layer, r.axis,
                     r.axis == "width" ? "depth" : "width", r.at);
}

}  // namespace

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
    if (r.zero) continue;  // zero at every width and seed: reported, not judged
    if (!r.fit.valid) {
      if (r.predicted || activation) {
        r.matches = r.predicted ? std::optional<bool>(false) : std::nullopt;
        r.stable = activation ? std::optional<bool>(false) : std::nullopt;
      }
    } else {
      r.tolerance = r.fit.half_width + r.finite_term;
      if (r.predicted)
        r.matches = r.fit.slope - *r.predicted <= r.tolerance && *r.predicted - r.fit.slope <= r.tolerance + r.below;
      if (r.matches && !*r.matches && matches_past_finite_width(r)) r.matches = r.matches_past_finite_width = true;
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
      g.dev_detail.push_back(fmt::format("step {}: {:+.2f} vs {} (tolerance {:.2f}{}{})", r.step, r.fit.slope,
                                         format_exponent(*r.predicted), r.tolerance,
                                         r.below > 0 ? fmt::format(", {:.2f} more below", r.below) : "",
                                         past_finite_width_detail(r)));
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

}  // namespace scaleinv::coord_detail
