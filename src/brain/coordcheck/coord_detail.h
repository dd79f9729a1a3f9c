#pragma once
// What the pieces of the coordinate check share, each declared once here: internal to measure/,
// not part of coord_result.h's contract. Read in this order:
//   coord_quantity.cpp   the quantities' names
//   coord_layer_map.cpp  the layer map: which theory row a recorded tensor follows (role_layer_map)
//   (brain/theory/coord_predict.h: the predicted exponent of a row, width_prediction,
//    depth_prediction, and the L a zoo model is judged against, theory_shape)
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

#include "brain/coordcheck/coord_result.h"
#include "brain/theory/coord_predict.h"
#include "brain/theory/theory_report.h"  // format_exponent
#include "brain/models/model_kinds.h"

namespace scaleinv::coord_detail {

// The theory's vocabulary for a mapped layer and its predictions (brain/theory/coord_predict.h),
// used here unqualified.
using prediction::Mapping;
using prediction::Pred;
using prediction::Target;
using prediction::depth_prediction;
using prediction::experts_finite_term;
using prediction::experts_prediction;
using prediction::theory_shape;
using prediction::width_prediction;

// The values sorted, each once.
std::vector<int> sorted_unique(std::vector<int> v);

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

// map_layer(axis, weight, layer) gives the theory row of a layer.
using LayerMapper = std::function<Mapping(const std::string& axis, bool weight, const std::string& layer)>;

// A role whose tensors are hidden ones: not the embedding, the readout or a vector.
bool hidden_like(Role r);

// The layer map of these layers (in forward order, then registration order); depth_rows: map the
// top of the stream and the logits along depth too (resmlp). How: at the definition.
LayerMapper role_layer_map(const std::vector<OwnCoordLayer>& layers, bool depth_rows);

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
