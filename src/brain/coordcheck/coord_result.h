#pragma once
// What a coordinate check measures and how it is judged, without torch: the quantities, the runs'
// raw series, the judged rows, the result and its table, JSON and plots, and the judging of runs
// measured elsewhere (judge_own_coordcheck: the Python module's forward hooks). Part of the
// torch-free brain (docs/design.md "Build shape"); engine/coordcheck/coordcheck.h adds the driver that
// trains the zoo's models (run_coordcheck) and the spectral norm of a tensor.
// Coordinate checks judged against the theory (docs/design.md "Data flow of a coordinate check"; issue 5).
//
// For every grid point (width, depth) and seed a model is built (torch::manual_seed(seed)) and
// trained T steps on fixed data: the same training batch(es) at every width, depth and seed. At
// every step t = 0..T the model runs forward and backward on a fixed probe batch (the first
// training batch, so that the update the model just took is aligned with what is measured, as
// the theory's alignment exponents assume) and records
//   h   RMS of every recorded activation h_l (Model::record, in forward order; the logits included)
//   dh  RMS of h_l(t) - h_l(0)                                  (t >= 1)
//   h'  RMS of dLoss/dh_l (retain_grad)
//   W'  RMS of dLoss/dW for every trainable tensor W
//   dW  RMS of W(t) - W(t-1), the t-th update                   (t >= 1)
//   ||W||   spectral norm of every matrix W (ref. [spectral]; spectral_norm below)
//   ||dW||  spectral norm of W(t) - W(t-1)                      (t >= 1)
// with RMS(v) = sqrt(mean v^2). W', dW are those of the *stored* tensor W: the forward multiplier
// d^-a of the table is applied in forward, exactly as in seed 000 eqs. (1), (5), (15), whose
// exponents the theory engine computes (W'_l "multiplier included" = the stored tensor's gradient).
//
// Per (quantity, layer, step) the log-log slope of RMS against width (and against depth when
// several depths are given) is fitted with a 95% interval over seeds (brain/util/slope_fit.h) and
// judged twice:
//   matches theory  |slope - predicted| <= tol
//   stable          slope <= tol, for activations (h, dh and the logits: the theory asks Theta(1)
//                   or O(1) of them); "-" for gradients and updates, which are meant to shrink
//   tol = t_{0.975, S-1} * SE(slope over seeds)  +  finite-size term
//   width: (1/2) [ln(1 + n/d_min) - ln(1 + n/d_max)] / ln(d_max / d_min),  n = n_probe + n_out
//   depth: ln(1 + L_min^-1/2) / ln(L_max / L_min)
// The width term is the slope change caused by the incoherent remainder of sums over the n_probe
// probe inputs (B*T positions, or B samples) and the n_out outputs, of relative size sqrt(n/d)
// against the aligned part the theory's exponents describe (slope_fit.h). So the check is sharp
// only for d_min >> n: small probe batches. The same formula for every parameterization and model.
// ||W|| of a matrix with one fan fixed at f (embedding, readout) adds the Bai-Yin finite-size term:
// an iid matrix has ||W||_2 ~ sigma (sqrt(d) + sqrt(f)), whose slope differs from 1/2 by
//   [ln(1 + sqrt(f/d_min)) - ln(1 + sqrt(f/d_max))] / ln(d_max / d_min).
// The width term bounds the finite-width correction by what the probe's incoherent sums give,
// which holds at init and for a small LR. Once training is strongly nonlinear (a large LR, steps
// 2 and on) the 1/d coefficient grows with the feature-learning strength (ref. [finite-width])
// and no a-priori bound holds: measured on a tied GPT under mup at lr 1e-2, W' of the attention
// matrices at step 3 has local slopes -1 + 0.57, 0.34, 0.20, 0.00 per doubling from 64 to 1024.
// So a width row over >= 4 widths that misses gets a second look past the 1/d term
// (CoordRow::past_finite_width): it matches when that term is resolved and the extrapolated
// exponent is within its own interval and the row's tolerance of the prediction, each widened by
// the bias the O(d^-2) term left out can give it (InverseWidthFit::next_order) ("yes*").
// Stability is never judged that way: a 1/d term makes activations look smaller at small widths,
// not larger, so it cannot cause an "unstable" verdict.
//
// Predictions come from roles, never from names (coordcheck.cpp, role_layer_map): every recorded
// activation carries the role of the weight that produced it (Model::record) and every parameter
// its tag, as a user's model gets them from its shapes (brain/adapt/own_model.h). A chain (no hidden
// tensor in a repeated block: bigram, mlp) maps exactly onto the rows of width_theory: the
// embedding output onto h_1, its i-th hidden output onto h_{i+1}, its i-th hidden matrix onto W_i.
// With blocks (gpt, vit, resmlp) the stream after each block is the hidden activations (h of h_1;
// dh and h' the max over the hidden rows of an L = 2 chain: every sublayer applies two matrices to
// a normalised input) and every block matrix a hidden W. The embedding(s) map onto W_0 (not a tied
// one, which is W_{L+1} too), the readout onto W_{L+1}, its output onto the logits h_{L+2}; resmlp
// across depths maps its top activation and logits onto depth_theory. Vector-like tensors (norm
// gains, biases) are measured and shown with "no prediction".
// From the one-step exponents to step t (coordcheck.cpp, width_prediction):
//   h at t >= 1 only where e(h) = e(dh) (h_t = h_0 + dh_t mixes two power laws otherwise);
//   dh after t updates has the one-step exponent (seed 000 1.2.1);
//   h', W' at t >= 1 and dW at t >= 2 keep their exponents while the parameterization is stable;
//   an unstable parameterization is predicted at steps 0 and 1 only, and a dh fed by an update that
//   already grows with width gets no prediction: the theory's compounded exponent (W dh_l, dW dh_l
//   with e(dh_l) > 0) is a fixed-LR d -> infinity limit reached only once eta*d >> 1, while at
//   finite widths the first-order terms dominate (measured: standard's dh_3 ~ d^0.94, not d^2).
// Stability is judged on every activation row whether or not it has a prediction.
// Along the expert count E (a mixture, --experts; coord_predict.cpp experts_prediction, docs/moe.md),
// with M = n_probe * top_k (token, expert) assignments in the probe:
//   at init every token passes through k experts whatever E is: h, h' and the non-routed tensors' W'
//   and ||W|| at step 0: 0. The router logits' h': -1/2 (the renormalised top-k gates read k of
//   the E logits). A router or expert tensor's W' sums the M/E assignments that reached it,
//   uncorrelated at init: -1/2.
//   the first update (dW at step 1): the LR carries E^-x (the table's experts_lr x); Adam, Adafactor
//   and Muon (AdamW on these roles) normalise the update: -x; SGD's follows W': -x - 1/2.
//   non-routed tensors' dW and ||dW|| at step 1: 0.
//   dh (and h after step 0) under a normalised update with one x on router and experts: an expert's
//   update sums its M/E assignments, and its alignment with one of them goes from E^0 (many per
//   expert: the dense model's regime) to (M/E)^-1/2 (few: E^1/2); the prediction is that interval,
//   -x + [0, 1/2], shown as its midpoint with the half-width added to the tolerance. Under SGD the
//   own token's term and the tokens' shared direction go like E^-x and E^(-x-1): no prediction.
//   Later steps of h', W', dW, and the spectral norms of an expert stack: no prediction.
// Finite-size term along E: an expert's share of the M assignments fluctuates by a relative
// sqrt(E/M), so (1/2) [ln(1 + E_max/M) - ln(1 + E_min/M)] / ln(E_max / E_min); for a routed tensor's
// normalised dW plus the slope of sqrt(occupancy), occupancy 1 - (1 - 1/E)^M the expected share of
// experts that received an assignment (an expert with none does not move).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "brain/util/slope_fit.h"
#include "brain/param/table.h"
#include "brain/theory/coord_predict.h"  // CoordQuantity
#include "brain/theory/depth_theory.h"
#include "brain/theory/width_theory.h"
#include "brain/train/config.h"

namespace scaleinv {

const char* coord_quantity_name(CoordQuantity q);  // "h", "dh", "h'", "W'", "dW", "||W||", "||dW||"
bool is_activation_quantity(CoordQuantity q);      // h, dh, h'
inline constexpr unsigned kAllCoordQuantities = (1u << kNumCoordQuantities) - 1;
// A comma-separated list of quantities (printed names h, dh, h', W', dW, ||W||, ||dW|| or the plot
// files' hgrad, wgrad, dw, wspec, dwspec; "all") as a mask of bits 1 << CoordQuantity. UserError
// (where, "quantities") for an unknown or empty list.
unsigned parse_coord_quantities(const std::string& list, const std::string& where);

struct CoordCheckConfig {
  TrainConfig train;          // model kind and architecture, param, hp, optim, data (width/depth set per point)
  std::vector<int> widths;    // empty: {train.model.width}
  std::vector<int> depths;    // empty: {train.model.depth}
  // A mixture's expert counts E (models with experts only): with 2 or more, an "experts" axis is
  // fitted at every width at the first depth, and the width and depth axes run at the smallest E.
  // Empty: {train.model.experts} for a mixture, none for a dense model.
  std::vector<int> experts;
  int steps = 3;              // T
  std::vector<int64_t> seeds = {0, 1, 2};
  int64_t train_batches = 1;  // training steps cycle through this many fixed batches; the probe is the first
  Alignment align;            // alignment assumptions of the width theory (eqs. 18-20)
  // Testing hook "the check can fail": "readout-multiplier" builds the model with the readout's
  // multiplier exponent a set to 0; the predictions still come from the unbroken table.
  std::string break_mode;
  // What is measured (parse_coord_quantities): the spectral norms cost most at large widths (2 x 16
  // matrix-vector products per matrix and step), so a quick check may leave them out.
  unsigned quantities = kAllCoordQuantities;
  bool show_progress = true;
};

// The raw measurement of one (width, depth, seed).
struct CoordSeries {
  CoordQuantity q = CoordQuantity::H;
  std::string layer;          // the recorded activation's name or the parameter's name
  std::vector<double> rms;    // steps 0..T; NaN where undefined (dh, dW at step 0) or after divergence
  std::vector<int64_t> shape; // ||W||, ||dW||: the matrix's [rows, cols] (trailing dims flattened)
};
struct CoordRun {
  int width = 0, depth = 0;
  int experts = 0;            // the mixture's E; 0 for a dense model
  int64_t seed = 0;
  std::vector<CoordSeries> series;
  std::vector<double> loss;   // probe loss at steps 0..T
  bool diverged = false;
};

// One judged row: a quantity of a layer at a step, fitted against width or depth.
struct CoordRow {
  std::string axis;           // "width", "depth" or "experts"
  int at = 0;                 // the other dimension held fixed: the depth of a width fit, the width of a
                              // depth or an experts fit
  CoordQuantity q = CoordQuantity::H;
  std::string layer;
  int step = 0;
  std::optional<double> predicted;  // exponent; nullopt: no prediction
  std::string maps_to;        // the theory row used, or why there is no prediction
  SlopeFit fit;
  double finite_term = 0;     // ln(1 + x_min^-1/2) / ln(x_max / x_min)
  double tolerance = 0;       // fit.half_width + finite_term
  // More allowed below the prediction only: the most an untied readout's init term can pull dh of
  // the logits' slope down (coord_judge.cpp readout_init_bound; 0 for every other row).
  double below = 0;
  std::optional<bool> matches;  // nullopt without a prediction
  std::optional<bool> stable;   // nullopt for gradients and updates
  // Exactly zero at every width and seed (a zero-initialized readout at step 0 and every gradient
  // below it, a frozen tensor's update): a state the theory allows at every width, reported with
  // why (maps_to) and not judged. Zero at some widths only is a failure ("not measurable").
  bool zero = false;
  // A width row over >= 4 widths whose slope misses its prediction gets a second look: the
  // exponent past the leading 1/d finite-width term (slope_fit.h fit_inverse_width). It matches
  // theory there when the 1/d term is resolved (|c| beyond its 95% interval) and the extrapolated
  // exponent lies both within its own interval and within the row's tolerance of the prediction
  // (each plus next_order): the miss is a finite-width term that shrinks as the width grows, not
  // another exponent.
  InverseWidthFit past_finite_width;  // fitted only for such rows (valid = false otherwise)
  bool matches_past_finite_width = false;
  std::vector<double> x;                 // widths or depths
  std::vector<std::vector<double>> y;    // [seed][x] RMS values
};

struct CoordCheckResult {
  CoordCheckConfig config;
  ParamTable table;           // the unbroken table (predictions)
  OptFamily family = OptFamily::Adam;
  std::vector<int> widths, depths;
  std::vector<int> experts;   // empty for a dense model
  // The expert count of the width and depth grid: the smallest of `experts` (0 for a dense model).
  int grid_experts() const { return experts.empty() ? 0 : experts.front(); }
  int64_t n_probe = 0;        // probe inputs: B*T positions (language models) or B samples
  // A causal language model's attended (query, key) pairs in the probe, B T (T + 1) / 2: the terms
  // W_q's and W_k's gradients sum (coord_judge.cpp, row_finite_term). 0: not known (own models), n_probe is used.
  int64_t n_pairs = 0;
  int64_t n_assign = 0;       // a mixture's (token, expert) assignments in the probe: n_probe * top_k
  int64_t n_out = 0;          // outputs: vocabulary or classes
  WidthTheory width_theory;   // the theory the width rows are judged against (see theory_depth)
  int theory_depth = 0;       // L of that theory
  std::string theory_note;    // how the model maps onto it
  DepthTheory depth_theory;
  std::vector<CoordRun> runs;
  std::vector<CoordRow> rows;
  // One line per failed verdict: "dh logits (width, depth 2): deviates from theory at steps 1, 2 ...".
  std::vector<std::string> failures;
  double wall_s = 0;
  bool pass() const { return failures.empty(); }
};

// The coordinate check of a model scaleinv did not write (issue 15), measured elsewhere (the Python
// module's forward hooks: python/scaleinv/_coordcheck.py), judged exactly as run_coordcheck judges,
// with the layer map taken from roles (brain/adapt/own_model.h) instead of the zoo's names:
//   parameters: embedding -> W_0, hidden and attention -> a hidden W (attn_q, attn_k: see
//     width_prediction), readout -> W_{L+1}, vector -> no prediction;
//   activations (a module's output, named by the role of its own weight): embedding -> h_1,
//     readout -> the logits h_{L+2}; hidden modules -> h_2 .. h_{L+1} in forward order when no
//     hidden tensor sits in a repeated block (a chain: L = their number), else the residual stream
//     (h of h_1, dh and h' the max over the hidden rows of an L = 2 chain, as the zoo's gpt).
struct OwnCoordLayer {
  std::string name;
  bool weight = false;        // a parameter (W', dW, ||W||, ||dW||) or a module output (h, dh, h')
  std::optional<Role> role;   // nullopt: no prediction
  bool in_block = false;
  bool tied = false;          // a tied embedding/readout tensor: no prediction; a module output: the
                              // readout reading a tied embedding (its logits get no iid exponent at init)
};
struct OwnCoordInput {
  ParamTable table;
  std::string optimizer = "adamw";  // sgd, adam, adamw, sign, muon
  MuonScale muon_scale = MuonScale::Spectral;
  std::string model = "own model";  // for the report's titles
  std::vector<int64_t> seeds;
  int steps = 3;
  int64_t n_probe = 0, n_out = 0;
  std::vector<CoordRun> runs;       // one per (width, seed), depth 1; series named as in `layers`
  std::vector<OwnCoordLayer> layers;
};
// UserError ("coordcheck", field) for fewer than 2 widths, a missing (width, seed) run, a series of
// another length than steps + 1, or a layer of a series not in `layers`.
CoordCheckResult judge_own_coordcheck(const OwnCoordInput& in);

// The full table, the tolerance formula with its values, a summary and, last, the failures.
std::string render_coordcheck(const CoordCheckResult& r);
// Everything: configuration, table, theory, tolerances, rows with fits, raw RMS per width, depth,
// seed and step, failures.
nlohmann::json coordcheck_to_json(const CoordCheckResult& r);
// Per fitted axis and quantity one figure (DIR/<axis>_<at>_<quantity>.svg and .png): one panel per
// step, RMS against width (or depth) on log-log axes, one line per layer (geometric mean over
// seeds) and its predicted slope as a dashed line anchored at the smallest x. Returns the stems written.
std::vector<std::string> plot_coordcheck(const CoordCheckResult& r, const std::string& dir);

}  // namespace scaleinv
