#pragma once
// `scaleinv scales` (issue 7): is every tensor at unit scale at initialisation?
//
// For every (width, depth) a model is built (torch::manual_seed(seed)), runs forward and backward
// once on the first training batch, and reports the RMS (sqrt(mean v^2)) of
//   fwd   every operation's output (engine/unit/probe.h: linear ops, nonlinearities, attention scores,
//         probabilities and outputs, residual adds) and every recorded activation (Model::record)
//   grad  the gradient arriving at each of them
//   W     every trainable tensor (zero-initialised ones are shown, not judged)
//   W'    every trainable tensor's gradient
// A value PASSes when it lies within a factor 2 of 1 (1/2 <= RMS <= 2); a row passes when every
// (width, depth) does. Attention probabilities are rows of a softmax (RMS ~ 1/sqrt(T) by
// construction, not a scale that can be unit) and are shown but not judged.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/data/data.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "brain/train/config.h"

namespace scaleinv {

struct ScalesConfig {
  TrainConfig train;         // model kind and architecture, param, hp, optim family, data
  std::vector<int> widths;   // empty: {train.model.width}
  std::vector<int> depths;   // empty: {train.model.depth}
  int64_t seed = 0;
  double low = 0.5, high = 2.0;  // the PASS band
};

struct ScaleRow {
  std::string kind;          // "fwd", "grad", "W", "W'"
  std::string name;
  std::vector<double> rms;   // per point (NaN: the op does not exist at that point)
  bool judged = true;        // false: shown only (softmax probabilities, zero-initialised tensors)
  bool pass = true;
};

struct ScalesResult {
  ScalesConfig config;
  std::vector<std::pair<int, int>> points;  // (width, depth)
  std::vector<ScaleRow> rows;
  std::vector<double> loss;                 // loss at init per point
  int judged = 0, passed = 0;
  double wall_s = 0;
  bool pass() const { return judged == passed; }
};

// UserError (exit 2) on an unknown model/param/optimizer, a width or depth < 1, no points.
ScalesResult run_scales(const ScalesConfig& cfg);
// A table (RMS per point, PASS/FAIL), a per-kind summary and the verdict.
std::string render_scales(const ScalesResult& r);
nlohmann::json scales_to_json(const ScalesResult& r);
// DIR/scales.svg and .png: one panel per kind, RMS against width (one line per op and depth), the
// PASS band dashed. Returns the stem.
std::string plot_scales(const ScalesResult& r, const std::string& dir);

}  // namespace scaleinv
