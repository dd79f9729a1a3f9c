// `scaleinv scales`: RMS of every op's output and gradient at init (src/engine/opcheck/unit_scales.h).
#include "engine/opcheck/unit_scales.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/runtime/tensor_rms.h"
#include "brain/util/errors.h"
#include "engine/data/data.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "brain/util/gnuplot.h"
#include "engine/unit/probe.h"

namespace scaleinv {

namespace {

bool shown_only(const std::string& kind, const std::string& name) {
  return kind != "W" && kind != "W'" && name.size() >= 6 && name.compare(name.size() - 6, 6, ":probs") == 0;
}

}  // namespace

ScalesResult run_scales(const ScalesConfig& cfg) {
  const auto t0 = std::chrono::steady_clock::now();
  ScalesResult res;
  res.config = cfg;
  std::vector<int> widths = cfg.widths.empty() ? std::vector<int>{cfg.train.model.width} : cfg.widths;
  std::vector<int> depths = cfg.depths.empty() ? std::vector<int>{cfg.train.model.depth} : cfg.depths;
  for (int w : widths)
    if (w < 1) throw UserError("command line", "--widths", fmt::format("width {} < 1", w), "use positive widths");
  for (int d : depths)
    if (d < 1) throw UserError("command line", "--depths", fmt::format("depth {} < 1", d), "use positive depths");
  const ParamTable table = resolve_param(cfg.train);
  const OptFamily family = optimizer_family(cfg.train.optim.kind);
  // Every point's model is checked before the data is made: a bad model.kind is the error to
  // report, not a missing dataset the command would have needed next.
  for (int depth : depths)
    for (int width : widths) {
      ModelConfig mc = cfg.train.model;
      mc.width = width;
      mc.depth = depth;
      validate_model_config(mc, ScaleContext{table, family, width, depth});
    }
  auto data = make_data(cfg.train.data);
  Batch b = data->batch(Split::Train, 0, cfg.train.train.batch_size);

  std::map<std::pair<std::string, std::string>, size_t> index;  // (kind, name) -> row
  auto put = [&](const std::string& kind, const std::string& name, size_t point, double v) {
    auto key = std::make_pair(kind, name);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, res.rows.size()).first;
      ScaleRow row;
      row.kind = kind;
      row.name = name;
      row.rms.assign(widths.size() * depths.size(), std::numeric_limits<double>::quiet_NaN());
      row.judged = !shown_only(kind, name);
      res.rows.push_back(row);
    }
    res.rows[it->second].rms[point] = v;
  };

  for (int depth : depths)
    for (int width : widths) {
      const size_t point = res.points.size();
      res.points.emplace_back(width, depth);
      ModelConfig mc = cfg.train.model;
      mc.width = width;
      mc.depth = depth;
      ScaleContext ctx{table, family, width, depth};
      torch::manual_seed(static_cast<uint64_t>(cfg.seed));
      std::shared_ptr<Model> model = build_model(mc, ctx, cfg.train.hp);
      const auto params = model->tagged_parameters();
      unit::OpProbe probe;
      for (const auto& p : params) probe.name_tensor(p.tensor, p.name);
      model->set_recording(true);
      torch::Tensor loss = model->loss(b.x, b.y);
      res.loss.push_back(loss.item<double>());
      loss.backward();
      // Model::record's named activations first (embed, blocks, logits), then every op.
      for (const auto& [name, t] : model->recorded()) {
        put("fwd", name, point, tensor_rms(t));
        put("grad", name, point, tensor_rms(t.grad()));
      }
      for (const auto& [name, t] : probe.notes()) {
        put("fwd", name, point, tensor_rms(t));
        put("grad", name, point, tensor_rms(t.grad()));
      }
      for (const auto& p : params) {
        put("W", p.name, point, tensor_rms(p.tensor));
        put("W'", p.name, point, tensor_rms(p.tensor.grad()));
        if (p.tag.base_std == 0 && tensor_rms(p.tensor) == 0) res.rows[index[{"W", p.name}]].judged = false;
      }
      model->set_recording(false);
    }

  // Order: forward rows, then gradients, weights, weight gradients (each in first-seen order).
  std::stable_sort(res.rows.begin(), res.rows.end(), [](const ScaleRow& a, const ScaleRow& b) {
    auto rank = [](const std::string& k) { return k == "fwd" ? 0 : k == "grad" ? 1 : k == "W" ? 2 : 3; };
    return rank(a.kind) < rank(b.kind);
  });
  for (ScaleRow& row : res.rows) {
    row.pass = true;
    bool any = false;
    for (double v : row.rms) {
      if (std::isnan(v)) continue;
      any = true;
      if (!(v >= cfg.low && v <= cfg.high)) row.pass = false;
    }
    if (!any) row.judged = false;
    if (row.judged) {
      res.judged += 1;
      res.passed += row.pass ? 1 : 0;
    }
  }
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::string render_scales(const ScalesResult& r) {
  const ScalesConfig& c = r.config;
  std::string s = fmt::format("unit scales at init: {} under {} ({}), seed {}, batch {}; PASS: {} <= RMS <= {}\n",
                              c.train.model.kind, c.train.param, c.train.optim.kind, c.seed, c.train.train.batch_size,
                              c.low, c.high);
  size_t wname = 8;
  for (const auto& row : r.rows) wname = std::max(wname, row.name.size());
  s += fmt::format("{:<5} {:<{}}", "kind", "op / tensor", wname);
  for (const auto& [w, d] : r.points) s += fmt::format(" {:>9}", fmt::format("w{}L{}", w, d));
  s += "  verdict\n";
  s += std::string(6 + wname + 10 * r.points.size() + 9, '-') + "\n";
  for (const auto& row : r.rows) {
    s += fmt::format("{:<5} {:<{}}", row.kind, row.name, wname);
    for (double v : row.rms) s += std::isnan(v) ? fmt::format(" {:>9}", "-") : fmt::format(" {:>9.3g}", v);
    s += fmt::format("  {}\n", !row.judged ? "(shown)" : row.pass ? "PASS" : "FAIL");
  }
  s += "summary:";
  for (const char* kind : {"fwd", "grad", "W", "W'"}) {
    int n = 0, p = 0;
    for (const auto& row : r.rows)
      if (row.kind == kind && row.judged) {
        ++n;
        p += row.pass ? 1 : 0;
      }
    s += fmt::format(" {} {}/{}", kind, p, n);
  }
  s += fmt::format("  (rows within a factor {} of 1)\n", c.high);
  s += "loss at init:";
  for (size_t i = 0; i < r.points.size(); ++i)
    s += fmt::format(" w{}L{} {:.4f}", r.points[i].first, r.points[i].second, r.loss[i]);
  s += fmt::format("\nverdict: {} ({}/{} rows at unit scale)\n", r.pass() ? "PASS" : "FAIL", r.passed, r.judged);
  return s;
}

nlohmann::json scales_to_json(const ScalesResult& r) {
  nlohmann::json j;
  j["model"] = r.config.train.model.kind;
  j["param"] = r.config.train.param;
  j["optimizer"] = r.config.train.optim.kind;
  j["band"] = {r.config.low, r.config.high};
  for (const auto& [w, d] : r.points) j["points"].push_back({{"width", w}, {"depth", d}});
  j["loss"] = r.loss;
  for (const auto& row : r.rows) {
    nlohmann::json v = nlohmann::json::array();
    for (double x : row.rms) v.push_back(std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x));
    j["rows"].push_back({{"kind", row.kind}, {"name", row.name}, {"rms", v}, {"judged", row.judged},
                         {"pass", row.pass}});
  }
  j["judged"] = r.judged;
  j["passed"] = r.passed;
  j["pass"] = r.pass();
  return j;
}

std::string plot_scales(const ScalesResult& r, const std::string& dir) {
  PlotFigure fig;
  fig.title = fmt::format("RMS at init: {} under {}", r.config.train.model.kind, r.config.train.param);
  fig.columns = 2;
  std::vector<int> depths;
  for (const auto& [w, d] : r.points)
    if (std::find(depths.begin(), depths.end(), d) == depths.end()) depths.push_back(d);
  double xmin = 1e300, xmax = 0;
  for (const auto& [w, d] : r.points) {
    xmin = std::min(xmin, double(w));
    xmax = std::max(xmax, double(w));
  }
  if (xmax <= xmin) xmax = xmin * 2;
  for (const char* kind : {"fwd", "grad", "W", "W'"}) {
    PlotPanel panel;
    panel.title = std::string(kind) + (std::string(kind) == "fwd" ? " (op outputs)" : std::string(kind) == "grad"
                                                                                          ? " (gradients at op outputs)"
                                                                                          : "");
    panel.xlabel = "width";
    panel.ylabel = "RMS";
    int color = 0;
    for (const auto& row : r.rows) {
      if (row.kind != kind || !row.judged) continue;
      for (size_t di = 0; di < depths.size(); ++di) {
        PlotSeries s;
        for (size_t i = 0; i < r.points.size(); ++i)
          if (r.points[i].second == depths[di] && std::isfinite(row.rms[i]) && row.rms[i] > 0) {
            s.x.push_back(r.points[i].first);
            s.y.push_back(row.rms[i]);
          }
        if (s.x.empty()) continue;
        s.color = color;
        panel.series.push_back(s);
      }
      ++color;
    }
    for (double band : {r.config.low, 1.0, r.config.high}) {
      PlotSeries g;
      g.title = band == 1.0 ? "unit" : "";
      g.x = {xmin, xmax};
      g.y = {band, band};
      g.dashed = true;
      g.points = false;
      g.color = 0;
      panel.series.push_back(g);
    }
    fig.panels.push_back(panel);
  }
  const std::string stem = dir + "/scales";
  render_figure(fig, stem);
  return stem;
}

}  // namespace scaleinv
