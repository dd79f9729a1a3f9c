// The transfer report as HTML, markdown and JSON (see html_report.h).
#include "brain/report/html_report.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "brain/util/atomic_file.h"
#include "brain/util/gnuplot.h"
#include "brain/report/seed_curves.h"

namespace scaleinv {

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

namespace {

std::string f2(double v) {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.2f}", v);
}
std::string f4(double v) {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return "diverged";
  return fmt::format("{:.4f}", v);
}
std::string signed2(double v) { return std::isfinite(v) ? fmt::format("{:+.2f}", v) : f2(v); }

std::string optimum_text(const ScaleCurve& c) {
  if (std::isnan(c.opt.lr_log2)) return "all diverged";
  std::string s = f2(c.opt.lr_log2);
  if (!std::isnan(c.lo)) s += fmt::format(" [{}, {}]", f2(c.lo), f2(c.hi));
  if (c.opt.at_edge) s += " (grid edge)";
  return s;
}

std::string better_text(const ParamTransfer& p) {
  if (!p.better_with_scale) return "n/a";
  return *p.better_with_scale ? "yes" : "no";
}

// A regret in percent with its interval: "+0.42% [+0.10, +0.95]", "diverged", "n/a".
std::string pct_text(double v, double lo, double hi) {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return "diverged";
  std::string s = fmt::format("{:+.2f}%", v);
  if (!std::isnan(lo)) s += fmt::format(" [{}, {}]", std::isinf(lo) ? "inf" : fmt::format("{:+.2f}", lo),
                                        std::isinf(hi) ? "inf" : fmt::format("{:+.2f}", hi));
  return s;
}

std::string value_or_na(double v) { return std::isnan(v) ? "n/a" : fmt::format("{:g}", v); }

// "+0.42% [...] at 256" (the worst over the axis' values).
std::string worst_text(double v, double lo, double hi, double at) {
  if (std::isnan(v)) return "n/a";
  return pct_text(v, lo, hi) + " at " + value_or_na(at);
}

std::string interval_text(double v, double lo, double hi) {
  std::string s = signed2(v);
  if (!std::isnan(lo)) s += fmt::format(" [{}, {}]", signed2(lo), signed2(hi));
  return s;
}

std::string tau_text(const ScaleCurve& c) {
  if (std::isnan(c.tau_steps)) return "n/a";
  std::string s = fmt::format("{:.0f}", c.tau_steps);
  if (!std::isnan(c.tau_fraction)) s += fmt::format(" ({:.2f} of the run)", c.tau_fraction);
  return s;
}

const char* kScript = R"(<script>
window.addEventListener('load', function () {
  var imgs = document.getElementsByTagName('img'), ok = 0;
  for (var i = 0; i < imgs.length; ++i) if (imgs[i].complete && imgs[i].naturalWidth > 0) ++ok;
  document.body.setAttribute('data-images-loaded', String(ok));
  document.body.setAttribute('data-images-total', String(imgs.length));
});
</script>)";

const char* kStyle = R"(<style>
body { font-family: Helvetica, Arial, sans-serif; margin: 2em; color: #222; max-width: 1400px; }
h1 { font-size: 1.6em; } h2 { font-size: 1.3em; margin-top: 1.6em; } h3 { font-size: 1.1em; }
.verdict { padding: 0.6em 1em; margin: 0.4em 0; border-radius: 6px; font-size: 1.1em; font-weight: bold; }
.holds { background: #d8f3dc; border-left: 8px solid #2d9d4b; }
.fails { background: #fde2e1; border-left: 8px solid #c0392b; }
.unknown { background: #eeeeee; border-left: 8px solid #888888; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
.inf { color: #c0392b; } .best { font-weight: bold; background: #fff6d5; }
img { max-width: 100%; border: 1px solid #ddd; } .note { color: #555; font-size: 0.9em; }
</style>)";

}  // namespace

std::string base64_encode(const std::string& in) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += tbl[(v >> 6) & 63];
    out += tbl[v & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    out += tbl[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

namespace {
// "LR, hp.branch_mult": what standard was re-tuned in for a full-baseline comparison.
std::string tuned_text(const FullBaseline& f) {
  std::string t = "LR";
  for (const auto& k : f.tuned) t += ", " + k;
  return t;
}

// The verdict of a worst regret against a tolerance (a choice kept, a full-baseline comparison),
// as text and as the HTML verdict's class.
std::string regret_verdict(double worst, bool holds, double tol) {
  if (std::isnan(worst)) return "undetermined";
  return holds ? fmt::format("holds (<= {:g}%)", tol) : fmt::format("FAILS (> {:g}%)", tol);
}
const char* regret_verdict_class(double worst, bool holds) { return std::isnan(worst) ? "unknown" : holds ? "holds" : "fails"; }

// The choices kept from the base scale: a summary row each, then the regret at every scale.
std::string choices_markdown(const TransferAnalysis& a) {
  std::string rows, per_scale;
  for (const auto& c : a.choices) {
    std::string best, ra, rb;
    for (const auto& s : c.scales) {
      const std::string v = value_or_na(s.scale) + ": ";
      best += (best.empty() ? "" : "; ") + v + (s.best_choice.empty() ? "n/a" : s.best_choice);
      ra += (ra.empty() ? "" : "; ") + v + pct_text(s.regret, s.regret_lo, s.regret_hi);
      rb += (rb.empty() ? "" : "; ") + v + pct_text(s.regret_base_lr, s.regret_base_lr_lo, s.regret_base_lr_hi);
    }
    const std::string scaling = c.scale_axis + " (" + c.fixed + (c.context.empty() ? "" : ", " + c.context) + ")";
    const std::string base = c.base_choice.empty() ? "n/a" : c.base_choice + " (" + f2(c.base_lr_log2) + ")";
    rows += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", c.choice_axis, scaling, c.param, best, base,
                        worst_text(c.worst, c.worst_lo, c.worst_hi, c.worst_at),
                        worst_text(c.worst_base_lr, c.worst_base_lr_lo, c.worst_base_lr_hi, c.worst_base_lr_at),
                        regret_verdict(c.worst, c.holds, a.opts.choice_tolerance_pct));
    per_scale += fmt::format("| {} | {} | {} | {} | {} |\n", c.choice_axis, scaling, c.param, ra, rb);
  }
  return "Choices kept from the smallest scale (the base choice: the value with the least loss there, its LR re-tuned; "
         "regret in loss against the best value at each scale):\n\n"
         "| choice | scaling | param | best value per scale | base choice (its base log2 LR) | worst regret, LR re-tuned "
         "[5-95%] | worst regret at the base LR [5-95%] | verdict |\n|---|---|---|---|---|---|---|---|\n" + rows +
         "\n| choice | scaling | param | regret per scale, LR re-tuned [5-95%] | regret per scale at the base LR [5-95%] |\n"
         "|---|---|---|---|---|\n" + per_scale;
}
// The base LR against standard re-tuned in every swept hyperparameter, one row per parameterization.
std::string full_baseline_markdown(const TransferAnalysis& a) {
  std::string rows;
  for (const auto& f : a.full_baseline) {
    std::string per;
    for (const auto& s : f.scales)
      per += (per.empty() ? "" : "; ") + value_or_na(s.scale) + ": " + pct_text(s.regret, s.regret_lo, s.regret_hi) +
             (s.standard_at.empty() ? "" : " (" + s.standard_at + ")");
    rows += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n",
                        f.scale_axis + seed_curves::held_text(f.fixed, f.context), f.param, f2(f.base_lr_log2), tuned_text(f), per,
                        worst_text(f.worst, f.worst_lo, f.worst_hi, f.worst_at),
                        regret_verdict(f.worst, f.holds, a.opts.choice_tolerance_pct));
  }
  return "The base LR against standard re-tuned in every swept hyperparameter at each scale (standard's best there "
         "over the columns named; on the seeds both ran; in parentheses where standard's best is):\n\n"
         "| scaling | param | base LR (log2) | standard re-tuned in | regret per scale [5-95%] | worst [5-95%] | verdict |\n"
         "|---|---|---|---|---|---|---|\n" + rows;
}
}  // namespace

std::string transfer_markdown(const TransferAnalysis& a) {
  std::string scales, hps, regrets;
  for (const auto& g : a.groups) {
    for (const auto& p : g.params) {
      std::string opts;
      for (const auto& c : p.curves)
        opts += (opts.empty() ? "" : "; ") + fmt::format("{}: {}", value_or_na(c.scale), optimum_text(c));
      if (g.info.scale) {
        std::string verdict = p.curves.size() < 2 ? "n/a" : std::isnan(p.shift) ? "undetermined" : p.holds ? "holds" : "FAILS";
        if (p.any_edge && verdict != "n/a") verdict += " (grid edge)";
        scales += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", g.title(), p.param, opts,
                              interval_text(p.slope, p.slope_lo, p.slope_hi), signed2(p.shift), verdict, better_text(p),
                              worst_text(p.worst_vs_standard, p.worst_vs_standard_lo, p.worst_vs_standard_hi,
                                         p.worst_vs_standard_at),
                              worst_text(p.worst_vs_self, p.worst_vs_self_lo, p.worst_vs_self_hi, p.worst_vs_self_at));
        std::string vs_std, vs_self;
        for (const auto& r : p.regrets) {
          vs_std += (vs_std.empty() ? "" : "; ") + value_or_na(r.scale) + ": " + pct_text(r.vs_standard, r.vs_standard_lo, r.vs_standard_hi);
          vs_self += (vs_self.empty() ? "" : "; ") + value_or_na(r.scale) + ": " + pct_text(r.vs_self, r.vs_self_lo, r.vs_self_hi);
        }
        regrets += fmt::format("| {} | {} | {} | {} | {} |\n", g.title(), p.param, f2(p.shared_lr_log2), vs_std, vs_self);
      } else {
        std::string taus;
        for (const auto& c : p.curves)
          if (!std::isnan(c.tau_steps)) taus += (taus.empty() ? "" : "; ") + value_or_na(c.scale) + ": " + tau_text(c);
        hps += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", g.title(), p.param, opts,
                           interval_text(p.slope, p.slope_lo, p.slope_hi),
                           std::isnan(g.info.rule_exponent) ? std::string("n/a") : signed2(g.info.rule_exponent), p.shape,
                           taus.empty() ? "n/a" : taus);
      }
    }
  }
  std::string md;
  if (!scales.empty())
    md += "| scaling | param | optimum log2 LR per scale [5-95%] | drift (doublings/doubling) [5-95%] | shift (doublings) "
          "| verdict | better with scale | worst regret vs standard re-tuned [5-95%] | worst regret vs itself re-tuned [5-95%] |\n"
          "|---|---|---|---|---|---|---|---|---|\n" + scales +
          "\nRegret at every scale of the base LR (the smallest scale's best grid point), in loss, against re-tuning there:\n\n"
          "| scaling | param | base LR (log2) | vs standard re-tuned [5-95%] | vs itself re-tuned [5-95%] |\n"
          "|---|---|---|---|---|\n" + regrets;
  if (!a.choices.empty()) md += std::string(md.empty() ? "" : "\n") + choices_markdown(a);
  if (!a.full_baseline.empty()) md += std::string(md.empty() ? "" : "\n") + full_baseline_markdown(a);
  if (!hps.empty())
    md += std::string(md.empty() ? "" : "\n") +
          "| axis | param | optimum log2 LR per value [5-95%] | exponent d log2 LR* / d log2 x [5-95%] | reference exponent "
          "| shape | weight-decay timescale at the optimum, steps |\n|---|---|---|---|---|---|---|\n" + hps;
  return md;
}

namespace {
std::string figure_html(const ReportFigure& f) {
  std::string png;
  try {
    png = read_file(f.png_path);
  } catch (...) {
    return "";
  }
  return "<figure><img alt=\"" + html_escape(f.caption) + "\" src=\"data:image/png;base64," + base64_encode(png) +
         "\"><figcaption class=\"note\">" + html_escape(f.caption) + "</figcaption></figure>\n";
}

// The page's <head> (style, image-count script) and its <h1>.
std::string page_head_html(const TransferAnalysis& a, const std::string& title) {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  h += "<title>scaleinv transfer report: " + html_escape(a.name) + "</title>\n" + kStyle + "\n" + kScript + "\n</head><body>\n";
  h += "<h1>" + html_escape(title.empty() ? "Hyperparameter transfer: " + (a.name.empty() ? a.db : a.name) : title) + "</h1>\n";
  return h;
}

// The caller's sections placed before the analysis, each with its figures.
std::string before_sections_html(const std::vector<HtmlSection>& before) {
  std::string h;
  for (const auto& sec : before) {
    h += "<h2>" + html_escape(sec.title) + "</h2>\n" + sec.html + "\n";
    for (const auto& f : sec.figures) h += figure_html(f);
  }
  return h;
}

// The database line, and a grey verdict when there is no axis to analyse.
std::string database_note_html(const TransferAnalysis& a) {
  std::string h =
      fmt::format("<p class=\"note\">database {}: {} points, {} diverged.</p>\n", html_escape(a.db), a.rows, a.diverged_rows);
  if (a.groups.empty())
    h += "<div class=\"verdict unknown\">no analysis axis: width, depth and every numeric grid axis each take a "
         "single value in this database, so there is no transfer to judge</div>\n";
  return h;
}

// One parameterization's headline verdict (green holds, red fails, grey otherwise).
std::string verdict_html(const TransferGroup& g, const ParamTransfer& p) {
  const char* cls = !g.info.scale || p.curves.size() < 2 || std::isnan(p.shift) ? "unknown" : p.holds ? "holds" : "fails";
  std::string line = p.verdict;
  if (g.info.scale && !std::isnan(p.worst_vs_standard))
    line += "; worst regret vs standard re-tuned " +
            worst_text(p.worst_vs_standard, p.worst_vs_standard_lo, p.worst_vs_standard_hi, p.worst_vs_standard_at);
  if (g.info.scale && !std::isnan(p.worst_vs_self))
    line += "; vs itself re-tuned " + worst_text(p.worst_vs_self, p.worst_vs_self_lo, p.worst_vs_self_hi, p.worst_vs_self_at);
  if (!g.info.scale) line += "; shape: " + p.shape;
  return fmt::format("<div class=\"verdict {}\">{}: {}</div>\n", cls, html_escape(p.param), html_escape(line));
}

// The group's summary table: one row per parameterization.
std::string summary_table_html(const TransferGroup& g) {
  std::string h = "<table><tr><th class=\"l\">param</th><th>" + std::string(g.info.scale ? "drift" : "exponent") +
                  " (doublings per doubling) [5-95%]</th><th>shift</th>";
  if (g.info.scale)
    h += "<th>" + std::string(g.axis == "width" ? "wider" : "deeper") + " is better at the base LR</th>";
  else
    h += "<th>shape</th>";
  h += "<th>base LR (log2)</th><th>worst regret vs standard re-tuned [5-95%]</th><th>worst regret vs itself re-tuned "
       "[5-95%]</th></tr>\n";
  for (const auto& p : g.params)
    h += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                     html_escape(p.param), interval_text(p.slope, p.slope_lo, p.slope_hi), signed2(p.shift),
                     g.info.scale ? better_text(p) : html_escape(p.shape), f2(p.shared_lr_log2),
                     worst_text(p.worst_vs_standard, p.worst_vs_standard_lo, p.worst_vs_standard_hi, p.worst_vs_standard_at),
                     worst_text(p.worst_vs_self, p.worst_vs_self_lo, p.worst_vs_self_hi, p.worst_vs_self_at));
  h += "</table>\n";
  return h;
}

// A parameterization's heading and its table of the optimum and the regret per value of the axis
// (LAB: the axis' label, escaped).
std::string optimum_table_html(const ParamTransfer& p, const std::string& lab) {
  std::string h = "<h3>" + html_escape(p.param) + "</h3>\n<table><tr><th class=\"l\">" + lab +
                  "</th><th>seeds</th><th>optimum log2 LR</th><th>5-95% (bootstrap)</th><th>fit</th><th>loss at optimum</th>"
                  "<th>loss at base LR " + f2(p.shared_lr_log2) + "</th><th>regret vs standard re-tuned</th>"
                  "<th>regret vs itself re-tuned</th><th>wd timescale (steps)</th></tr>\n";
  for (size_t i = 0; i < p.curves.size(); ++i) {
    const auto& c = p.curves[i];
    const auto& r = p.regrets[i];
    h += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                     "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
                     value_or_na(c.scale), c.n_seeds, f2(c.opt.lr_log2),
                     std::isnan(c.lo) ? std::string("n/a") : fmt::format("[{}, {}]", f2(c.lo), f2(c.hi)),
                     c.opt.at_edge ? "grid edge" : c.opt.fitted ? "parabola" : "grid point", f4(c.opt.loss),
                     i < p.loss_at_shared.size() ? f4(p.loss_at_shared[i]) : "n/a",
                     pct_text(r.vs_standard, r.vs_standard_lo, r.vs_standard_hi),
                     pct_text(r.vs_self, r.vs_self_lo, r.vs_self_hi), tau_text(c));
  }
  h += "</table>\n";
  return h;
}

// Every log2 LR grid point run at any value of the axis, ascending.
std::vector<double> grid_lrs(const ParamTransfer& p) {
  std::vector<double> lrs;
  for (const auto& c : p.curves)
    for (const auto& q : c.points)
      if (std::find_if(lrs.begin(), lrs.end(), [&](double x) { return std::fabs(x - q.lr_log2) < 1e-6; }) == lrs.end())
        lrs.push_back(q.lr_log2);
  std::sort(lrs.begin(), lrs.end());
  return lrs;
}

// One cell of the loss grid: curve C's mean loss at log2 LR X (empty when not run there).
std::string loss_cell_html(const ScaleCurve& c, double x) {
  const LrPoint* q = nullptr;
  for (const auto& pp : c.points)
    if (std::fabs(pp.lr_log2 - x) < 1e-6) q = &pp;
  if (!q) return "<td></td>";
  const bool best = c.opt.best_index >= 0 && &c.points[c.opt.best_index] == q;
  std::string cell = std::isinf(q->mean_loss) ? fmt::format("diverged ({}/{})", q->diverged, q->seeds) : f4(q->mean_loss);
  return fmt::format("<td class=\"{}\">{}</td>", best ? "best" : std::isinf(q->mean_loss) ? "inf" : "", cell);
}

// Mean loss: rows LR, columns scale.
std::string loss_grid_html(const ParamTransfer& p, const std::string& lab) {
  std::string h = "<table><tr><th class=\"l\">log2 LR \\ " + lab + "</th>";
  for (const auto& c : p.curves) h += fmt::format("<th>{}</th>", value_or_na(c.scale));
  h += "</tr>\n";
  for (double x : grid_lrs(p)) {
    h += fmt::format("<tr><td class=\"l\">{}</td>", f2(x));
    for (const auto& c : p.curves) h += loss_cell_html(c, x);
    h += "</tr>\n";
  }
  h += "</table>\n";
  return h;
}

// One group's section: verdicts, the reference rule, the summary table, then per parameterization
// the optimum per value, the regret there and the loss grid.
std::string group_html(const TransferGroup& g) {
  std::string h = "<h2>" + html_escape(g.title()) + "</h2>\n";
  for (const auto& p : g.params) h += verdict_html(g, p);
  if (!g.info.rule.empty())
    h += "<p class=\"note\">reference: " + html_escape(g.info.rule) + " (docs/references.md)</p>\n";
  h += summary_table_html(g);
  const std::string lab = html_escape(g.info.label);
  for (const auto& p : g.params) h += optimum_table_html(p, lab) + loss_grid_html(p, lab);
  return h;
}

// The choices kept from the base scale: a verdict and a table per analysis (rows: scales;
// columns: each value's best loss, the best in bold, then the base choice's regrets).
std::string choices_html(const TransferAnalysis& a) {
  if (a.choices.empty()) return "";
  std::string h = "<h2>Choices kept from the base scale</h2>\n";
  for (const auto& c : a.choices) {
    const char* cls = regret_verdict_class(c.worst, c.holds);
    h += fmt::format("<div class=\"verdict {}\">{}: {}: base choice {} (base log2 LR {}); worst regret, LR re-tuned, "
                     "{}; at the base LR {}</div>\n",
                     cls, html_escape(c.title()), html_escape(c.param),
                     html_escape(c.base_choice.empty() ? "n/a" : c.base_choice), f2(c.base_lr_log2),
                     worst_text(c.worst, c.worst_lo, c.worst_hi, c.worst_at),
                     worst_text(c.worst_base_lr, c.worst_base_lr_lo, c.worst_base_lr_hi, c.worst_base_lr_at));
    h += "<table><tr><th class=\"l\">" + html_escape(c.scale_axis) + "</th>";
    for (const auto& v : c.choices) h += "<th>" + html_escape(v) + "</th>";
    h += "<th>regret of " + html_escape(c.base_choice.empty() ? "the base choice" : c.base_choice) +
         ", LR re-tuned</th><th>at the base LR</th></tr>\n";
    for (const auto& s : c.scales) {
      h += "<tr><td class=\"l\">" + value_or_na(s.scale) + "</td>";
      for (size_t j = 0; j < c.choices.size(); ++j)
        h += fmt::format("<td class=\"{}\">{}</td>", c.choices[j] == s.best_choice ? "best" : "", f4(s.best_loss[j]));
      h += "<td>" + pct_text(s.regret, s.regret_lo, s.regret_hi) + "</td><td>" +
           pct_text(s.regret_base_lr, s.regret_base_lr_lo, s.regret_base_lr_hi) + "</td></tr>\n";
    }
    h += "</table>\n";
  }
  return h;
}

// The base LR against standard re-tuned in every swept hyperparameter: a verdict and a table per
// parameterization (rows: scales).
std::string full_baseline_html(const TransferAnalysis& a) {
  if (a.full_baseline.empty()) return "";
  std::string h = "<h2>Against standard re-tuned in every swept hyperparameter</h2>\n";
  for (const auto& f : a.full_baseline) {
    const char* cls = regret_verdict_class(f.worst, f.holds);
    h += fmt::format("<div class=\"verdict {}\">{}{}: {} at its base log2 LR {} against standard re-tuned in {}: worst "
                     "regret {}</div>\n",
                     cls, html_escape(f.scale_axis), html_escape(seed_curves::held_text(f.fixed, f.context)), html_escape(f.param),
                     f2(f.base_lr_log2), html_escape(tuned_text(f)), worst_text(f.worst, f.worst_lo, f.worst_hi, f.worst_at));
    h += "<table><tr><th class=\"l\">" + html_escape(f.scale_axis) +
         "</th><th>loss at the base LR</th><th>standard's best</th><th class=\"l\">where</th><th>regret</th></tr>\n";
    for (const auto& s : f.scales)
      h += "<tr><td class=\"l\">" + value_or_na(s.scale) + "</td><td>" + f4(s.loss) + "</td><td>" + f4(s.standard_best) +
           "</td><td class=\"l\">" + html_escape(s.standard_at) + "</td><td>" + pct_text(s.regret, s.regret_lo, s.regret_hi) +
           "</td></tr>\n";
    h += "</table>\n";
  }
  return h;
}

// The closing "Method" section and the end of the page.
std::string method_html(const TransferAnalysis& a) {
  std::string h =
      "<h2>Method</h2>\n<ul class=\"note\">\n"
      "<li>Mean loss per log2-LR grid point: final training loss (mean over the last window of steps) averaged over "
      "seeds. A grid point where any seed diverged counts as +inf: it is never the optimum.</li>\n"
      "<li>Optimum: the parabola through the best grid point and its two neighbours in log2 LR; its vertex clamped to "
      "the neighbours' interval. When the best grid point is the smallest or largest LR the edge is reported and "
      "flagged: the true optimum lies beyond the grid.</li>\n";
  h += fmt::format("<li>Interval: seeds resampled with replacement ({} resamples, fixed RNG seed), {:.0f}-{:.0f}% "
                   "percentiles of each statistic (optimum, drift, regrets); the seeds are drawn once per resample for every "
                   "curve of a group. None with a single seed.</li>\n",
                   a.opts.bootstrap, a.opts.lo_q * 100, a.opts.hi_q * 100);
  h += fmt::format("<li>Drift: OLS slope of the optimum against log2 scale; shift: optimum at the largest scale minus "
                   "at the smallest. Transfer holds when |shift| &lt;= {} doubling.</li>\n",
                   a.opts.shift_tolerance);
  h += fmt::format("<li>Better with scale: at the smallest scale's best LR grid point, the mean loss does not rise from "
                   "one scale to the next (relative tolerance {}).</li>\n",
                   a.opts.better_tolerance);
  h += "<li>Regret at each value of the axis: the mean loss at the base LR (the smallest value's best grid point; "
       "the nearest grid point where it was not run) against the best grid-point loss there of the same "
       "parameterization re-tuned, and of <code>standard</code> re-tuned when the group holds it, in percent. The "
       "headline is the worst over the values, with its interval (the same joint bootstrap).</li>\n"
       "<li>Hyperparameter axes (batch size, horizon, weight decay, warmup, ...): the exponent is the OLS slope of the "
       "optimum against log2 of the value (values &lt;= 0 left out), beside the reference rule's exponent. Shape: a "
       "peak inside the range whose interval lies above both ends' intervals is the surge; otherwise rises / falls "
       "when the exponent's interval excludes 0.</li>\n"
       "<li>Weight decay (AdamW, decoupled): the per-step decay fraction is lr &times; schedule &times; wd "
       "(wd_mode coupled, lr the base LR; the table's per-role wd multipliers apply on top) or wd (independent), so "
       "the timescale is tau = 1/(lr wd) or 1/wd steps, reported at each optimum and as a fraction of the run.</li>\n";
  h += fmt::format("<li>Choices (a grid axis such as optim.schedule crossed with width or depth): at each scale every "
                   "value's best grid-point loss (its LR re-tuned); the base choice is the value best at the smallest "
                   "scale; its regret at each scale against the best value there, with its LR re-tuned and at its "
                   "base LR (its best grid point at the smallest scale). It holds when the worst regret, LR re-tuned, "
                   "is at most {:g}%. Intervals: the same bootstrap, the base choice re-made in every resample.</li>\n"
                   "<li>Against standard re-tuned in every swept hyperparameter (where standard was swept in hp.* or "
                   "optim.* axes beside its LR): at each scale standard's best grid-point loss over all of them, from "
                   "rows that match in the fixed model scale, train.steps and every other axis, on the seeds both "
                   "sides ran, against the loss at the base LR; it holds when the worst regret is at most {:g}%. "
                   "Intervals: the parameterization's seeds resampled, its base LR re-chosen in every resample.</li>\n"
                   "</ul>\n</body></html>\n",
                   a.opts.choice_tolerance_pct, a.opts.choice_tolerance_pct);
  return h;
}
}  // namespace

std::string transfer_html(const TransferAnalysis& a, const std::vector<ReportFigure>& figures,
                          const std::vector<HtmlSection>& before, const std::string& title) {
  std::string h = page_head_html(a, title);
  h += before_sections_html(before);
  h += database_note_html(a);
  for (const auto& g : a.groups) h += group_html(g);
  h += choices_html(a);
  h += full_baseline_html(a);
  for (const auto& f : figures) h += figure_html(f);
  h += method_html(a);
  return h;
}

namespace {
// A panel with linear axes and %g tick labels, as every report plot uses.
PlotPanel linear_panel(const std::string& title, const std::string& xlabel, const std::string& ylabel) {
  PlotPanel panel;
  panel.title = title;
  panel.xlabel = xlabel;
  panel.ylabel = ylabel;
  panel.logx = panel.logy = false;
  panel.yformat = "%g";
  return panel;
}

// Final loss against log2 LR: a panel per parameterization, a series per value of the axis.
PlotFigure loss_figure(const TransferGroup& g) {
  PlotFigure loss;
  loss.title = g.title() + ": final loss vs log2 LR";
  for (const auto& p : g.params) {
    PlotPanel panel = linear_panel(p.param, "log2 LR", "final loss (mean over seeds)");
    for (size_t i = 0; i < p.curves.size(); ++i) {
      PlotSeries s;
      s.title = fmt::format("{} {}", g.info.label, value_or_na(p.curves[i].scale));
      s.color = static_cast<int>(i);
      for (const auto& q : p.curves[i].points) {
        s.x.push_back(q.lr_log2);
        s.y.push_back(q.mean_loss);  // diverged (+inf) points are left out by the plotter
      }
      panel.series.push_back(std::move(s));
    }
    loss.panels.push_back(std::move(panel));
  }
  return loss;
}

// The reference rule's slope through the first optimum of S (a guide; grey), when it applies.
void add_rule_series(const TransferGroup& g, const ParamTransfer& p, const PlotSeries& s, int color, PlotPanel& panel) {
  if (g.info.scale || !std::isfinite(g.info.rule_exponent) || s.x.size() < 2 || !std::isfinite(s.y.front())) return;
  PlotSeries rule;
  rule.title = fmt::format("{} rule {:+.2f}", p.param, g.info.rule_exponent);
  rule.color = color;
  rule.dashed = true;
  rule.points = false;
  for (const double x : {s.x.front(), s.x.back()}) {
    rule.x.push_back(x);
    rule.y.push_back(s.y.front() + g.info.rule_exponent * (x - s.x.front()));
  }
  panel.series.push_back(std::move(rule));
}

// Optimal log2 LR against log2 of the axis' value, with its interval dashed: one panel, a series
// (and its interval, and the rule's guide for a hyperparameter axis) per parameterization.
PlotFigure optimum_figure(const TransferGroup& g) {
  PlotFigure optf;
  optf.title = g.title() + ": optimal log2 LR vs log2 " + g.info.label;
  PlotPanel panel = linear_panel(g.info.scale || std::isnan(g.info.rule_exponent)
                                     ? "optimum (dashed: 5-95% bootstrap interval)"
                                     : "optimum (dashed: 5-95% interval; rule: its slope)",
                                 "log2 " + g.info.label, "optimal log2 LR");
  int color = 0;
  for (const auto& p : g.params) {
    PlotSeries s, lo, hi;
    s.title = p.param;
    s.color = lo.color = hi.color = color++;
    lo.dashed = hi.dashed = true;
    lo.points = hi.points = false;
    for (const auto& c : p.curves) {
      if (!(c.scale > 0)) continue;  // e.g. weight decay 0: no log
      const double x = std::log2(c.scale);
      s.x.push_back(x);
      s.y.push_back(c.opt.lr_log2);
      lo.x.push_back(x);
      lo.y.push_back(c.lo);
      hi.x.push_back(x);
      hi.y.push_back(c.hi);
    }
    add_rule_series(g, p, s, lo.color, panel);
    panel.series.push_back(std::move(s));
    panel.series.push_back(std::move(lo));
    panel.series.push_back(std::move(hi));
  }
  optf.panels.push_back(std::move(panel));
  return optf;
}

// P's regret at the base LR per value of the axis, against standard re-tuned or itself re-tuned,
// as a series and its interval (dashed) in PANEL; nothing when no value has a finite regret.
void add_regret_series(const ParamTransfer& p, bool vs_standard, int& col, PlotPanel& panel) {
  PlotSeries s, lo, hi;
  s.title = p.param + (vs_standard ? " vs standard re-tuned" : " vs itself re-tuned");
  s.color = lo.color = hi.color = col;
  lo.dashed = hi.dashed = true;
  lo.points = hi.points = false;
  for (const auto& r : p.regrets) {
    const double y = vs_standard ? r.vs_standard : r.vs_self;
    if (!std::isfinite(y) || !(r.scale > 0)) continue;  // a diverged base LR is in the tables
    const double x = std::log2(r.scale);
    s.x.push_back(x);
    s.y.push_back(y);
    lo.x.push_back(x);
    lo.y.push_back(vs_standard ? r.vs_standard_lo : r.vs_self_lo);
    hi.x.push_back(x);
    hi.y.push_back(vs_standard ? r.vs_standard_hi : r.vs_self_hi);
  }
  if (s.x.empty()) return;
  ++col;
  panel.series.push_back(std::move(s));
  panel.series.push_back(std::move(lo));
  panel.series.push_back(std::move(hi));
}

// The regret of the base LR at every scale, with its interval: a figure with one panel, or none
// (no panels) when no parameterization has a finite regret.
PlotFigure regret_figure(const TransferGroup& g) {
  PlotFigure rf;
  rf.title = g.title() + ": regret of the base LR vs log2 " + g.info.label;
  PlotPanel rp = linear_panel("vs re-tuning at each scale (dashed: 5-95%)", "log2 " + g.info.label,
                              "regret, %");
  int col = 0;
  for (const auto& p : g.params)
    for (const bool vs_standard : {true, false}) add_regret_series(p, vs_standard, col, rp);
  if (!rp.series.empty()) rf.panels.push_back(std::move(rp));
  return rf;
}

// Renders FIG to STEM.{svg,png}; adds it to FIGURES (captioned CAPTION) and STEM to STEMS.
void render_report_figure(const PlotFigure& fig, const std::string& stem, const std::string& caption,
                          std::vector<ReportFigure>& figures, std::vector<std::string>& stems) {
  render_figure(fig, stem);
  figures.push_back({caption, stem + ".png"});
  stems.push_back(stem);
}

// Renders a group's plots (loss, optimum and, on a scaling axis, regret) into DIR, adding them to
// FIGURES and their PNG and SVG files to FILES.plots.
void render_group_plots(const TransferGroup& g, const std::string& dir, std::vector<ReportFigure>& figures,
                        TransferReportFiles& files) {
  std::vector<std::string> stems;
  const PlotFigure loss = loss_figure(g);
  render_report_figure(loss, dir + "/" + g.slug() + "-loss", loss.title + " (diverged grid points left out)", figures,
                       stems);
  const PlotFigure optf = optimum_figure(g);
  render_report_figure(optf, dir + "/" + g.slug() + "-optimum", optf.title, figures, stems);
  if (g.info.scale) {
    const PlotFigure rf = regret_figure(g);
    if (!rf.panels.empty()) render_report_figure(rf, dir + "/" + g.slug() + "-regret", rf.title, figures, stems);
  }
  for (const auto& st : stems) {
    files.plots.push_back(st + ".png");
    files.plots.push_back(st + ".svg");
  }
}
}  // namespace

TransferReportFiles write_transfer_report(const TransferAnalysis& a, const std::string& dir,
                                          const std::vector<HtmlSection>& before, const std::string& title) {
  std::filesystem::create_directories(dir);
  TransferReportFiles files;
  std::vector<ReportFigure> figures;
  const bool plots = gnuplot_available();
  if (plots)
    for (const auto& g : a.groups) render_group_plots(g, dir, figures, files);
  std::string html = transfer_html(a, figures, before, title);
  if (!plots)
    html.insert(html.find("</h1>") + 5, "\n<p class=\"note\">gnuplot is not installed: no plots.</p>");
  for (size_t pos = 0; (pos = html.find("<img ", pos)) != std::string::npos; pos += 5) ++files.images;
  files.html = dir + "/report.html";
  files.markdown = dir + "/summary.md";
  files.json = dir + "/transfer.json";
  write_file_atomic(files.html, html);
  write_file_atomic(files.markdown, "# Transfer summary: " + a.name + "\n\n" + transfer_markdown(a));
  write_file_atomic(files.json, transfer_to_json(a).dump(2) + "\n");
  return files;
}

}  // namespace scaleinv
