#pragma once
// What the pieces of the coordinate check share, each declared once here: internal to measure/,
// not part of coord_result.h's contract. Read in this order:
//   coord_quantity.cpp   the quantities' names and fmt_exp
//   coord_layer_map.cpp  the layer map: which theory row a recorded tensor follows (role_layer_map)
//   coord_predict.cpp    the predicted exponent of a row (width_prediction, depth_prediction) and
//                        the L a zoo model is judged against (theory_shape)
//   spectral_norm.cpp    ||W|| and ||dW|| (coordcheck.h's spectral_norm)
//   coord_judge.cpp      the rows: fitted slopes with their tolerance and prediction (fit_rows),
//                        and the verdicts (judge)
//   coordcheck.cpp       the driver of the zoo's grid: run_coordcheck (torch)
//   coord_own.cpp        the judge of runs measured elsewhere: judge_own_coordcheck
//   coord_render.cpp     the outputs: table, JSON, plots
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "measure/coord_result.h"
#include "models/model_kinds.h"

namespace scaleinv::coord_detail {

// The values sorted, each once.
std::vector<int> sorted_unique(std::vector<int> v);

// An exponent as a fraction ("1/2", "-1"), with values within kExponentTol of 0 shown as 0.
std::string fmt_exp(double e);

// One row per CoordQuantity, in enum order: the printed name, the plot file's suffix, the plot's label.
struct QuantityInfo {
  const char* name;
  const char* file;
  const char* label;
};
const QuantityInfo& quantity_info(CoordQuantity q);

// ============================================================================================
// The layer map (coord_layer_map.cpp): which theory row every recorded activation and every
// parameter follows. From roles (role_layer_map); a layer without one gets "no prediction"
// (still measured).
// ============================================================================================

enum class Target {
  SeedRow,      // row `capture + offset` of width_theory (seed 000 eq. 1 indexing; no capture: `offset`)
  Stream,       // residual stream / block activations: hidden activations (h of h_1, dh and h' the max over hidden)
  EmbeddingW,   // W_0 (row 0)
  HiddenW,      // a hidden W (max over rows 1..L)
  HiddenWQK,    // attention query/key: a hidden W, but see width_prediction (logit scale d_head^-p)
  ReadoutW,     // W_{L+1}
  Logits,       // h_{L+2}
  TiedLogits,   // h_{L+2} read through a tied embedding: as Logits, but no iid exponent at init (the
                // readout is the input embedding, aligned with the stream it reads: one coherent
                // Theta(1) logit per position beside the d^-1/2 others)
  RouterW,      // a mixture's router W_r [E, d]: a readout of the normalised stream (the router row as W_{L+1})
  RouterLogits, // the router's logits z = d^-a W_r x: as h_{L+2} under the router row (docs/moe.md)
  DepthTop,     // depth axis: the top of the residual stream (seed 004; seed 000 eqs. 29-31)
  DepthLogits,  // depth axis: the logits (readout of the top)
};

struct Mapping {
  bool found = false;
  Target target = Target::SeedRow;
  int row = 0;
  std::string what;
  bool routed = false;  // a router or expert tensor: its gradient sums the tokens routed to it
};

// map_layer(axis, weight, layer) gives the theory row of a layer.
using LayerMapper = std::function<Mapping(const std::string& axis, bool weight, const std::string& layer)>;

// A role whose tensors are hidden ones: not the embedding, the readout or a vector.
bool hidden_like(Role r);

// The layer map of these layers (in forward order, then registration order); depth_rows: map the
// top of the stream and the logits along depth too (resmlp). How: at the definition.
LayerMapper role_layer_map(const std::vector<OwnCoordLayer>& layers, bool depth_rows);

// ============================================================================================
// Predictions (coord_predict.cpp)
// ============================================================================================

struct Pred {
  std::optional<double> e;
  std::string why;  // maps_to text
  double band = 0;  // the theory gives an interval, e +- band: added to the row's finite-size term
};

// The predicted width exponent of quantity q of a mapped layer at step t (coordcheck.h: from the
// one-step exponents to step t). qk_unmodelled: W_q, W_k's gradient is outside the bigram theory.
Pred width_prediction(const WidthTheory& w, const Mapping& m, CoordQuantity q, int step, bool qk_unmodelled);
// The predicted depth exponent (seed 004) of h and dh of the top of the stream and the logits;
// power_law false: the stream grows exponentially in L, no prediction.
Pred depth_prediction(const DepthTheory& d, const Mapping& m, CoordQuantity q, int step, bool power_law);

// The predicted expert-count exponent (coord_result.h, "Along the expert count E") of quantity q of
// a mapped layer at step t under the table's experts_lr for family f.
Pred experts_prediction(const ParamTable& t, OptFamily f, const Mapping& m, CoordQuantity q, int step);

// The finite-size term along E for M assignments (coord_result.h); occupancy: add the slope of
// sqrt(1 - (1 - 1/E)^M) (a normalised update of a routed tensor).
double experts_finite_term(double e_min, double e_max, double m, bool occupancy);

// L and RMSNorm of the width theory a model is judged against: its row's theory_shape
// (models/model_kinds.h).
TheoryShape theory_shape(const ModelConfig& mc, int depth);

// ============================================================================================
// Rows and verdicts (coord_judge.cpp)
// ============================================================================================

// Rows: every (axis, at, quantity, layer, step) with at least 2 x values, fitted and predicted.
// map_layer(axis, weight, layer) gives the theory row of a layer (role_layer_map); along depth the
// residual stream's last block is stream_prefix + depth, shown as "top".
void fit_rows(CoordCheckResult& res, const std::map<int, WidthTheory>& width_theories,
              const std::string& stream_prefix, bool qk_unmodelled, bool depth_power_law,
              const LayerMapper& map_layer);

// Sets every row's matches and stable and adds one failure line per verdict to res.failures.
void judge(CoordCheckResult& res);

}  // namespace scaleinv::coord_detail
