#pragma once
// The theory's prediction for one measured quantity of one layer at one step of training: the
// exponent of width (seed 000's one-step exponents, eqs. 16-23, carried to step t), of depth (seed
// 004's classification) and of the expert count, each with why. The coordinate check
// (brain/coordcheck) maps a recorded tensor to a theory row (Mapping) and asks here what it must
// show; this header needs no measurement. Defined in coord_predict.cpp; nothing here throws.
#include <optional>
#include <string>

#include "brain/models/model_kinds.h"
#include "brain/param/table.h"
#include "brain/theory/depth_theory.h"
#include "brain/theory/width_theory.h"

namespace scaleinv {

// The quantities the coordinate check measures (coord_result.h names and parses them).
enum class CoordQuantity : int { H = 0, DH, HGrad, WGrad, DW, WSpec, DWSpec };
inline constexpr int kNumCoordQuantities = 7;

namespace prediction {

// Which row of the theory a recorded tensor follows.
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

// A prediction: the exponent where the theory gives one, and why (or why not).
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
// (brain/models/model_kinds.h).
TheoryShape theory_shape(const ModelConfig& mc, int depth);

}  // namespace prediction
}  // namespace scaleinv
