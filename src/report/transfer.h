#pragma once
// Hyperparameter-transfer analysis of a sweep store (issue 8; DESIGN.md "Measurement: Sweeps" and
// "Acceptance evidence"): per parameterization and scaling axis (width, or depth; whichever has
// more than one value, both when both do), where the optimal learning rate sits at each scale,
// how far it drifts, whether wider (deeper) is better at the shared optimum, and what taking the
// small model's LR to the large one costs.
//
// Definitions (printed in the report):
//  - mean loss per log2-LR grid point: mean of final_loss over seeds; a grid point where any seed
//    diverged counts as +inf (that LR is unusable), so it is never the optimum;
//  - optimum: the best grid point and its two neighbours define a parabola in log2 LR; its vertex,
//    clamped to the neighbours' interval, is the optimum. At the grid edge (the best point is the
//    smallest or largest LR) the edge itself is reported and flagged; the true optimum lies beyond;
//  - interval: seeds resampled with replacement (fixed RNG seed), the optimum located again per
//    resample; the 5-95% percentiles (none with a single seed);
//  - drift: OLS slope of the optimum (log2 LR) against log2 scale, doublings of LR per doubling of
//    scale; shift: optimum at the largest scale minus at the smallest. Transfer holds when
//    |shift| <= 1 doubling;
//  - wider (deeper) is better: at the smallest scale's best LR grid point, the mean loss does not
//    increase from scale to scale (within a relative tolerance);
//  - regret: at the largest scale, the loss at the LR grid point nearest to the smallest scale's
//    optimum, against the best grid-point loss any parameterization in the db reaches at that
//    scale, in percent.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace scaleinv {

struct SweepRow {
  std::string id, param;
  int64_t width = 0, depth = 0, seed = 0;
  double lr_log2 = 0;
  double final_loss = 0;   // NaN when missing
  bool diverged = false;
  std::string context;     // axes other than param/width/depth/lr/seed, "k=v, ..." ("" when none)
};

struct SweepTable {
  std::string db, name;
  std::vector<SweepRow> rows;
};

// Reads the points table. UserError (exit 2) when the file is missing, is not a sweep database or
// holds no points.
SweepTable read_sweep_rows(const std::string& db_path);

struct Optimum {
  double lr_log2 = 0;      // NaN when every grid point diverged
  double loss = 0;         // the parabola at the vertex (the grid mean when not fitted)
  int best_index = -1;     // the best grid point (-1: none finite)
  bool at_edge = false;    // best grid point is the smallest or largest LR
  bool fitted = false;     // false: the grid point itself (edge, or a diverged neighbour)
};

// Locates the optimum of y(x) (x increasing; y may hold +inf for diverged points).
Optimum locate_optimum(const std::vector<double>& x, const std::vector<double>& y);

struct LrPoint {
  double lr_log2 = 0;
  double mean_loss = 0;    // +inf when any seed diverged
  int seeds = 0;           // seeds run at this point
  int diverged = 0;        // of which diverged
};

struct ScaleCurve {
  int64_t scale = 0;       // the width or depth
  std::vector<LrPoint> points;  // by increasing LR
  Optimum opt;
  double lo = 0, hi = 0;   // bootstrap interval of opt.lr_log2 (NaN with one seed)
  int n_seeds = 0;
};

struct ParamTransfer {
  std::string param;
  std::vector<ScaleCurve> curves;   // by increasing scale
  double slope = 0;                 // NaN with fewer than two located optima
  double shift = 0;                 // doublings, largest minus smallest scale (NaN if undetermined)
  bool holds = false;               // |shift| <= shift_tolerance
  bool any_edge = false;            // some optimum sits at the LR grid edge
  std::string verdict;              // one line, e.g. "transfer holds: optimum moved +0.3 doublings ..."
  double shared_lr_log2 = 0;        // the smallest scale's best grid point
  std::vector<double> loss_at_shared;  // per curve (NaN: not run there)
  std::optional<bool> better_with_scale;  // nullopt: cannot tell (missing point)
  double transfer_lr_log2 = 0;      // grid point nearest the smallest scale's optimum, at the largest
  double transfer_loss = 0;
  double tuned_best_loss = 0;       // best grid-point loss at the largest scale, any parameterization
  std::string tuned_best_param;
  double regret_pct = 0;            // +inf when the transferred LR diverges
};

struct TransferGroup {
  std::string axis;        // "width" or "depth"
  std::string fixed;       // the other axis, e.g. "depth 4"
  std::string context;     // other axes held fixed ("" when none)
  std::vector<ParamTransfer> params;
  std::string title() const;  // "width transfer (depth 4)"
  std::string slug() const;   // file-name friendly
};

struct TransferOptions {
  int bootstrap = 200;
  uint64_t rng_seed = 20240611;
  double lo_q = 0.05, hi_q = 0.95;
  double shift_tolerance = 1.0;     // doublings
  double better_tolerance = 1e-3;   // relative increase still counted as "not worse"
};

struct TransferAnalysis {
  std::string db, name;
  int64_t rows = 0, diverged_rows = 0;
  TransferOptions opts;
  std::vector<TransferGroup> groups;
};

TransferAnalysis analyze_transfer(const SweepTable& table, const TransferOptions& opts = {});
nlohmann::json transfer_to_json(const TransferAnalysis& a);

}  // namespace scaleinv
