#pragma once
// `scaleinv precision` (issue 7): the same training run in fp32 and in simulated low-precision
// formats; per tensor (each linear's input x, weight w and output gradient grad) the fraction of
// nonzero values that underflowed to zero and that saturated, and the loss against fp32.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/precision/quantize.h"
#include "brain/train/config.h"
#include "engine/train/trainer.h"

namespace scaleinv {

struct PrecisionRun {
  std::string format;
  RunResult summary;
  std::map<std::string, precision::QuantStats> stats;  // point -> counts over the whole run
  double worst_underflow = 0;   // the largest cumulative underflow fraction over points
  std::string worst_underflow_at;
  double worst_saturated = 0;
  std::string worst_saturated_at;
  double final_loss_ratio = 1;  // final (last 10%) loss / fp32's
  double mean_loss_ratio = 1;   // mean loss over all steps / fp32's
  double max_step_rel_diff = 0; // max over steps |loss / loss_fp32 - 1|
};

struct PrecisionReport {
  TrainConfig base;
  std::vector<PrecisionRun> runs;  // runs[0] is fp32
};

// Trains base under fp32 and each format (no files written). UserError on an unknown format.
PrecisionReport run_precision(const TrainConfig& base, const std::vector<std::string>& formats, bool progress);
// Summary per format, then per tensor the underflow / saturation fractions (worst first).
std::string render_precision(const PrecisionReport& r, int max_rows = 40);
nlohmann::json precision_to_json(const PrecisionReport& r);

}  // namespace scaleinv
