// Figures of the diagnostics through gnuplot (brain/util/gnuplot.h): one SVG + PNG per diagnostic,
// measured curves solid (mean over seeds), predictions dashed.
#include <cmath>

#include <fmt/format.h>

#include "engine/diagnostics/diagnostics.h"
#include "brain/util/gnuplot.h"

namespace scaleinv::diag {

namespace {

// Geometric mean over seeds of v[seed][i].
std::vector<double> gmean(const std::vector<std::vector<double>>& v) {
  if (v.empty()) return {};
  std::vector<double> out(v[0].size(), 0.0);
  for (const auto& row : v)
    for (size_t i = 0; i < out.size(); ++i) out[i] += std::log(row[i]) / static_cast<double>(v.size());
  for (double& x : out) x = std::exp(x);
  return out;
}

// A dashed guide through the measured curve's first point with the given log-log slope.
PlotSeries guide(const std::vector<double>& x, const std::vector<double>& y, double slope, const std::string& title,
                 int color) {
  PlotSeries g;
  g.title = title;
  g.color = color;
  g.dashed = true;
  g.points = false;
  if (x.empty() || y.empty()) return g;
  for (double xi : x) {
    g.x.push_back(xi);
    g.y.push_back(y[0] * std::pow(xi / x[0], slope));
  }
  return g;
}

std::vector<double> to_double(const std::vector<int>& v) { return {v.begin(), v.end()}; }

}  // namespace

void plot_alignment(const AlignmentResult& r, const std::string& dir) {
  PlotFigure fig;
  fig.title = "alignment ratios against width (seed 000 eqs. 18-20); dashed: d^1/2 and d^1";
  const std::vector<double> x = to_double(r.opts.widths);
  for (const auto& ap : r.params) {
    for (const char* which : {"omega", "alpha", "u"}) {
      PlotPanel p;
      p.title = fmt::format("{}: {}", ap.param, which);
      p.xlabel = "width d";
      p.ylabel = "ratio";
      int c = 0;
      for (const auto& al : ap.layers) {
        const auto& v = std::string(which) == "omega" ? al.omega_ratio
                        : std::string(which) == "alpha" ? al.alpha_ratio
                                                        : al.u_ratio;
        PlotSeries s;
        s.title = fmt::format("l={} {}", al.layer, al.role);
        s.x = x;
        s.y = gmean(v);
        s.color = c++;
        p.series.push_back(s);
      }
      if (!p.series.empty()) {
        p.series.push_back(guide(x, p.series[0].y, 0.5, "d^1/2", 8));
        p.series.push_back(guide(x, p.series[0].y, 1.0, "d^1", 9));
      }
      fig.panels.push_back(p);
    }
    PlotPanel p;
    p.title = fmt::format("{}: logit update RMS(dh_L+2)", ap.param);
    p.xlabel = "width d";
    p.ylabel = "RMS";
    PlotSeries s;
    s.title = "measured";
    s.x = x;
    s.y = gmean(ap.logit_update_rms);
    p.series.push_back(s);
    if (ap.has_theory) {
      p.series.push_back(guide(x, s.y, ap.pred_logit_omega1, "theory, omega_R = 1", 1));
      p.series.push_back(guide(x, s.y, ap.pred_logit_omega_half, "theory, omega_R = 1/2", 2));
    }
    fig.panels.push_back(p);
  }
  fig.columns = 4;
  render_figure(fig, dir + "/alignment");
}

void plot_transport(const TransportResult& r, const std::string& dir) {
  PlotFigure fig;
  fig.title = "post-LN transport ||prod alpha B_l|| vs depth (seed 000 eqs. 33, 35); dashed: bound";
  PlotPanel p;
  p.title = r.opts.model != "linear" ? "GPT " + r.opts.block + " blocks at init" : "h <- LN(alpha h + A h)";
  p.xlabel = "depth L";
  p.ylabel = "norm";
  p.logx = false;
  int c = 0;
  for (const auto& ser : r.series) {
    PlotSeries m, b;
    m.title = fmt::format("alpha = L^{}", ser.shortcut);
    b.title = "bound";
    m.color = b.color = c++;
    b.dashed = true;
    b.points = false;
    for (const auto& pt : ser.points) {
      m.x.push_back(pt.depth);
      m.y.push_back(pt.norm_gmean());
      b.x.push_back(pt.depth);
      b.y.push_back(pt.bound);
    }
    p.series.push_back(m);
    p.series.push_back(b);
  }
  fig.panels.push_back(p);
  fig.panel_width = 760;
  fig.panel_height = 420;
  render_figure(fig, dir + "/transport");
}

void plot_diversity(const DiversityResult& r, const std::string& dir) {
  PlotFigure fig;
  fig.title = "feature diversity d(eps) / sqrt(eps) (seed 004 Def. 5.6): flat = kappa 1/2, rising like sqrt(eps) = kappa 0";
  for (const auto& dp : r.params) {
    PlotPanel p;
    p.title = dp.param;
    p.xlabel = "eps";
    p.ylabel = "d(eps) / sqrt(eps)";
    int c = 0;
    for (size_t li = 0; li < r.opts.lambdas.size(); ++li) {
      for (int trained = 0; trained < 2; ++trained) {
        PlotSeries s;
        s.title = fmt::format("lambda {} {}", r.opts.lambdas[li], trained ? "trained" : "init");
        s.color = c;
        s.dashed = !trained;
        s.points = trained;
        const auto& d = trained ? dp.d_trained : dp.d_init;
        for (size_t ki = 0; ki < dp.eps_blocks.size(); ++ki) {
          const double eps = double(dp.eps_blocks[ki]) / r.opts.depth;
          double acc = 0;
          for (const auto& seed : d) acc += std::log(seed[li][ki]) / static_cast<double>(d.size());
          s.x.push_back(eps);
          s.y.push_back(std::exp(acc) / std::sqrt(eps));
        }
        p.series.push_back(s);
      }
      ++c;
    }
    fig.panels.push_back(p);
  }
  render_figure(fig, dir + "/diversity");
}

void plot_init_stats(const InitStatsResult& r, const std::string& dir) {
  PlotFigure fig;
  fig.title = "init statistics (seed 002 section 5)";
  PlotPanel pv;
  pv.title = "attention-logit variance (dashed: predicted)";
  pv.xlabel = "width";
  pv.ylabel = "Var(logit)";
  PlotPanel ps;
  ps.title = "pre-LN residual stream G(l) = mean z_l^2";
  ps.xlabel = "block l";
  ps.ylabel = "G(l)";
  ps.logx = ps.logy = false;
  int c = 0;
  for (const auto& m : r.models) {
    PlotSeries s, pr;
    s.title = m.model;
    pr.title = m.model + " predicted";
    s.color = pr.color = c;
    pr.dashed = true;
    pr.points = false;
    for (const auto& lv : m.by_width) {
      double acc = 0;
      for (double v : lv.var) acc += std::log(v) / static_cast<double>(lv.var.size());
      s.x.push_back(lv.width);
      s.y.push_back(std::exp(acc));
      pr.x.push_back(lv.width);
      pr.y.push_back(lv.predicted);
    }
    pv.series.push_back(s);
    pv.series.push_back(pr);
    PlotSeries g;
    g.title = m.model;
    g.color = c;
    if (!m.stream.empty()) {
      for (size_t l = 0; l < m.stream[0].size(); ++l) {
        double acc = 0;
        for (const auto& row : m.stream) acc += row[l] / static_cast<double>(m.stream.size());
        g.x.push_back(static_cast<double>(l));
        g.y.push_back(acc);
      }
    }
    ps.series.push_back(g);
    ++c;
  }
  fig.panels = {pv, ps};
  fig.panel_width = 560;
  render_figure(fig, dir + "/init_stats");
}

void plot_depth_scaling(const DepthScalingResult& r, const std::string& dir) {
  PlotFigure fig;
  fig.title = "residual MLP against depth (seed 000 eqs. 29-31); dashed: predicted slopes";
  const std::vector<double> x = to_double(r.opts.depths);
  const char* names[] = {"RMS(x_L) at init", "RMS(x_L - x_0) at init", "RMS(dx_L), one step"};
  for (int q = 0; q < 3; ++q) {
    PlotPanel p;
    p.title = names[q];
    p.xlabel = "depth L";
    p.ylabel = "RMS";
    int c = 0;
    for (const auto& dp : r.params) {
      PlotSeries s;
      s.title = dp.param;
      s.color = c;
      s.x = x;
      s.y = gmean(q == 0 ? dp.top : q == 1 ? dp.branch_sum : dp.update);
      p.series.push_back(s);
      const double pred = q == 0 ? dp.pred_top_finite : q == 1 ? dp.pred_branch_asym : dp.pred_update_correlated;
      p.series.push_back(guide(x, s.y, pred, fmt::format("{} L^{:.2f}", dp.param, pred), c));
      ++c;
    }
    fig.panels.push_back(p);
  }
  render_figure(fig, dir + "/depth_scaling");
}

}  // namespace scaleinv::diag
