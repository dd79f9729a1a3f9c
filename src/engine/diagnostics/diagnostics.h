#pragma once
// Diagnostics beside the coordinate check (issue 5, "Other diagnostics"; docs/design.md "Where new
// things go": a measurement).
// Each one measures a scaling exponent the theory engine states and reports it with a confidence
// interval over seeds, next to the prediction:
//
//   alignment      omega_l, alpha_l, u_l of seed 000 eqs. (18)-(20), measured across widths after
//                  T optimizer steps on one fixed batch; the readout's omega decides between muP's
//                  worst case (omega_readout = 1) and Everett et al.'s relaxation (1/2).
//   transport      post-LN backward transport ||prod_l alpha B_l||_2 (seed 000 eqs. 33, 35, Lemma
//                  E.5) against depth, for alpha = L^shortcut, next to postln_transport_bound.
//   diversity      feature diversity exponent kappa (seed 004 Def. 5.6; how it is measured:
//                  docs/design.md "Depth theory as implemented").
//   init-stats     seed 002 Part I §1 at init: attention-logit variance ~ C_Q C_K, independent of
//                  width (eq. 1.61); the pre-LN residual stream's mean square grows linearly with
//                  depth (footnote 9); docs/design.md "Transformer statistics at init".
//   depth-scaling  the residual MLP's top activation at init and its one-step update against depth
//                  (seed 000 eqs. 29-31; seed 004 Claims 5.1-5.5), against depth_theory.
//
// Every run_* validates its options (UserError naming the option and the fix), runs a grid of
// (setting, seed) points on the CPU with fixed seeds, and returns a result that *_table renders
// for a person and *_json for a program. Nothing here writes files; the CLI does (atomically).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace scaleinv::diag {

// ---- fits ------------------------------------------------------------------------------------
// Built on the measurements' one per-seed fitter and t-interval (brain/util/slope_fit.h:
// fit_seed_slopes, mean_interval).

// A slope with a 95% interval over seeds. With S >= 2 seeds: the mean of the per-seed OLS slopes,
// interval mean +- t_{S-1} sd / sqrt(S). With one seed: the OLS slope and its residual standard
// error, t_{n-2} (the interval is then finite-size scatter around a line, not seed noise; infinite
// with two points).
struct Fit {
  double slope = 0;
  double lo = 0, hi = 0;
  double se = 0;                 // standard error of the slope
  std::vector<double> per_seed;  // the per-seed slopes
  double half_width() const { return 0.5 * (hi - lo); }
  bool contains(double v, double extra_tol = 0) const { return v >= lo - extra_tol && v <= hi + extra_tol; }
};

// ys[s][i] against xs[i], one row per seed; log_x / log_y take natural logs first (values must be > 0;
// a non-positive value makes that seed's slope NaN): fit_seed_slopes with BadValues::nan_seed and
// NoInterval::infinite, lo/hi = slope -+ half_width. No seeds: every number 0.
Fit fit_slope(const std::vector<double>& xs, const std::vector<std::vector<double>>& ys, bool log_x, bool log_y);
// The same from per-seed values of one statistic (mean and t-interval), e.g. kappa.
Fit fit_mean(const std::vector<double>& per_seed);
nlohmann::json fit_json(const Fit& f);
std::string fit_text(const Fit& f, int precision = 3);  // "0.512 [0.481, 0.543]"

// ---- alignment (seed 000 eqs. 18-20) ---------------------------------------------------------

struct AlignmentOptions {
  std::string model = "bigram";   // bigram (every layer) | gpt (the readout only)
  std::vector<std::string> params = {"sp"};  // presets or TOML files, each measured separately
  std::string optimizer = "adam";  // sgd | adam | adamw | sign | adafactor
  double lr = 0.01;                // base LR (at the table's base width)
  double beta1 = 0.9;
  std::vector<int> widths = {64, 128, 256, 512, 1024};
  int depth = 2;                   // bigram: L hidden layers; gpt: blocks
  int steps = 1;                   // optimizer steps on the fixed batch before measuring
  int seeds = 3;
  int batch = 16, seq_len = 32, vocab = 64;  // markov data (vocab = the readout's output size)
  std::string activation = "linear";         // bigram
  bool rmsnorm = false;                      // bigram
  int head_dim = 16;                         // gpt
  std::string block = "pre";                 // gpt
  bool show_progress = true;
};

struct AlignmentLayer {
  int layer = 0;                  // seed index l (1..L+1 for the bigram; the readout for gpt)
  std::string role;               // "hidden" | "readout"
  Fit omega, alpha, u;            // exponents of d of the three ratios (eqs. 18-20), over every width
  Fit omega_top, alpha_top, u_top;  // the same between the two largest widths (the trend)
  // ratio[seed][width]: RMS(W dh)/(RMS(W) RMS(dh)), RMS(dW h)/(RMS(dW) RMS(h)), RMS(dW dh)/(RMS(dW) RMS(dh))
  std::vector<std::vector<double>> omega_ratio, alpha_ratio, u_ratio;
  Fit dh_in;                      // exponent of RMS(dh_l), the input change
  std::vector<std::vector<double>> dh_in_rms;
};

struct AlignmentParam {
  std::string param;
  std::vector<AlignmentLayer> layers;
  Fit logit_update;                              // exponent of RMS(dh_{L+2}) (the logits' change)
  Fit logit_update_top;                          // the same between the two largest widths
  std::vector<std::vector<double>> logit_update_rms;
  bool has_theory = false;                       // bigram without RMSNorm: width_theory applies
  double pred_logit_omega1 = 0, pred_logit_omega_half = 0;  // width_theory's dh(L+2) exponent
  double assumed_omega_hidden = 0.5;             // what width_theory assumes (muP defaults)
  std::string readout_finding;                   // which omega_readout the measurement supports
};

struct AlignmentResult {
  AlignmentOptions opts;
  // Distinct inputs in the fixed batch (bigram: distinct tokens; gpt: tokens), mean over seeds. A one-step
  // update has rank at most this, so dW_l aligns fully with h_l (alpha -> 1) only once d is well above it.
  double distinct_inputs = 0;
  std::vector<AlignmentParam> params;
};

AlignmentResult run_alignment(const AlignmentOptions& o);
std::string alignment_table(const AlignmentResult& r);
nlohmann::json alignment_json(const AlignmentResult& r);

// ---- post-LN transport (seed 000 eqs. 33, 35) ------------------------------------------------

struct TransportOptions {
  std::string model = "linear";   // linear: h_{l+1} = LN(alpha h_l + A_l h_l), A_l ~ N(0, 1/d) | gpt
  std::vector<int> depths = {2, 4, 8, 16, 32, 64};
  std::vector<double> shortcuts = {0.0, 1.0};  // alpha = L^shortcut (0: plain post-LN; 1: KEEL)
  int width = 256;
  int seeds = 3;
  int batch = 16;                 // linear: input vectors; gpt: sequences
  std::string norm = "rms";       // linear: rms (the seed's LN_l(u) = u / RMS(u)) | layer (mean-subtracting)
  int power_iters = 30;
  // gpt (at init): the table's width rows; its shortcut is replaced by each entry of `shortcuts`
  std::string param = "mup";
  std::string block = "post";     // post | keel
  int seq_len = 16, vocab = 64, head_dim = 16;
  bool show_progress = true;
};

struct TransportPoint {
  int depth = 0;
  double alpha = 1;
  int n_ln = 0;                   // LN Jacobians in the chain (L for linear, 2L for gpt)
  double bound = 0;               // (1 + 1/alpha^2)^(-n_ln/2)
  std::vector<double> norm;       // per seed: geometric mean over inputs of ||prod alpha B_l||_2
  std::vector<double> mean_gain;  // per seed: mean over random unit v of ||prod alpha B_l v||
  std::vector<double> full;       // per seed: ||d h_top / d h_bottom||_2, the whole backward map
  double norm_gmean() const;      // geometric mean over seeds
};

struct TransportSeries {
  double shortcut = 0;
  std::vector<TransportPoint> points;
  Fit log_norm_slope;             // d log||B(alpha)|| / dL (per block)
  double bound_slope = 0;         // the same for the bound (OLS over the same depths)
  double min_norm = 0;            // over depths (geometric mean over seeds)
  double per_ln_factor = 0;       // exp(slope / (n_ln / L)): the measured alpha ||B_l||
};

struct TransportResult {
  TransportOptions opts;
  std::vector<TransportSeries> series;
  std::string verdict;            // exponential decay at alpha = 1, bounded at alpha = L
};

TransportResult run_transport(const TransportOptions& o);
std::string transport_table(const TransportResult& r);
nlohmann::json transport_json(const TransportResult& r);

// ---- feature diversity (seed 004 Def. 5.6) ---------------------------------------------------

struct DiversityOptions {
  // "ode" = depth-mup with (alpha, gamma) = (1, 0) (seed 004 Claim 5.4, the ODE limit), every
  // other number unchanged; any preset or TOML file works too (e.g. completep).
  std::vector<std::string> params = {"depth-mup", "ode"};
  int width = 256, depth = 64, steps = 300, batch = 64;
  std::string optimizer = "adam";
  double lr = 0.01;
  // Branch multiplier a (L/L0)^-alpha. The defaults are the seed's own a L^-alpha with a = 1: with its
  // L.2 convention (L0 = 8, a = 2) the ReLU stack without LN starts with q_L ~ q_0 exp(a^2 Var phi L0)
  // = q_0 e^11 (docs/design.md "Depth theory as implemented"), far from the Theta(1) activations
  // the definition assumes.
  double branch_mult = 1.0;
  int base_depth = 1;
  std::string activation = "relu";
  bool train_io = false;          // seed 004: U and V frozen, only the W_l train
  std::vector<double> lambdas = {0.25, 0.5};
  std::string data = "fashion_mnist";  // fashion_mnist | gaussian (a random linear teacher)
  std::string fashion_dir = "/usr/share/datasets/fashion-mnist";
  int in_dim = 784;               // gaussian data only (fashion_mnist: 784)
  int eval_batch = 256;
  int seeds = 2;
  bool show_progress = true;
};

struct DiversityParam {
  std::string param;
  double alpha = 0, gamma = 0;            // the table's (alpha, gamma)
  std::string predicted;                  // depth_theory's kappa ("1/2", "0" or "-")
  std::vector<int> eps_blocks;            // k: eps = k / L
  // d[seed][lambda][k] at init and after training
  std::vector<std::vector<std::vector<double>>> d_init, d_trained;
  Fit kappa_init, kappa;                  // kappa = 1 - slope of log d vs log eps, averaged over lambda
  std::vector<double> final_loss;         // per seed, mean over the last 10% of steps
};

struct DiversityResult {
  DiversityOptions opts;
  std::vector<DiversityParam> params;
};

DiversityResult run_diversity(const DiversityOptions& o);
std::string diversity_table(const DiversityResult& r);
nlohmann::json diversity_json(const DiversityResult& r);

// ---- init statistics (seed 002 Part I §1, eq. 1.61, footnote 9) ------------------------------

struct InitStatsOptions {
  std::vector<std::string> models = {"gpt", "vit"};
  std::string param = "standard";
  std::vector<int> widths = {64, 128, 256, 512};
  int depth = 2;                            // blocks, for the logit variance
  std::vector<double> init_scales = {0.5, 1.0, 2.0};  // C_Q C_K ~ init_scale^4, at widths[1]
  int stream_depth = 32;                    // pre-LN stack for the residual stream
  int stream_width = 128;
  int seeds = 2;
  int batch = 4, seq_len = 32, vocab = 256, head_dim = 16;
  bool show_progress = true;
};

struct LogitVariance {
  int width = 0;
  double init_scale = 1;
  std::vector<double> var;        // per seed: mean over blocks and heads of Var(logit)
  std::vector<double> head_cv;    // per seed: coefficient of variation across heads
  double predicted = 0;           // scale^2 d_head C_Q C_K (LN output F = 1)
};

struct InitStatsModel {
  std::string model;
  std::vector<LogitVariance> by_width, by_scale;
  Fit width_slope;                // d log Var / d log width   (predicted below)
  double pred_width_slope = 0;
  Fit scale_slope;                // d log Var / d log init_scale  (predicted 4: C_Q C_K ~ s^2 s^2)
  double pred_scale_slope = 4;
  // residual stream G(l) = mean z_l^2, l = 0..stream_depth, per seed
  std::vector<std::vector<double>> stream;
  Fit stream_linear_slope;        // dG/dl (per block)
  Fit stream_loglog_slope;        // d log(G(l) - G(0)) / d log l over l >= 2 (1: linear growth)
  double stream_r2 = 0;           // R^2 of the linear fit (seed-mean curve)
};

struct InitStatsResult {
  InitStatsOptions opts;
  std::vector<InitStatsModel> models;
};

InitStatsResult run_init_stats(const InitStatsOptions& o);
std::string init_stats_table(const InitStatsResult& r);
nlohmann::json init_stats_json(const InitStatsResult& r);

// ---- depth scaling of the residual MLP (seed 000 eqs. 29-31; seed 004) ------------------------

struct DepthScalingOptions {
  std::vector<std::string> params = {"depth-mup", "standard"};
  std::vector<int> depths = {4, 8, 16, 32, 64, 128};
  int width = 128;
  int seeds = 3;
  int batch = 64;
  std::string optimizer = "adam";
  double lr = 1e-3;
  std::string activation = "relu";
  bool pre_ln = true;             // f_l(LN(x)) = Theta(1), as seed 000 eq. (29) assumes
  bool train_io = false;          // seed 004: U and V frozen
  double branch_mult = 1.0;
  int base_depth = 4;
  std::string data = "gaussian";  // gaussian | fashion_mnist
  std::string fashion_dir = "/usr/share/datasets/fashion-mnist";
  int in_dim = 64;                // gaussian only
  bool show_progress = true;
};

struct DepthScalingParam {
  std::string param;
  double alpha = 0, gamma = 0;
  // per seed, per depth
  std::vector<std::vector<double>> top, branch_sum, update;  // RMS(x_L), RMS(x_L - x_0), RMS(dx_L)
  Fit top_slope, branch_slope, update_slope;                 // log-log slopes in L
  double pred_top_finite = 0;     // slope of the infinite-width recursion over these depths
  double pred_branch_finite = 0;  // the same for RMS(x_L - x_0)
  double pred_branch_asym = 0;    // depth_theory: 1/2 - alpha (rho = 1/2, mean-zero branches)
  double pred_update_correlated = 0, pred_update_uncorrelated = 0;  // 1 - alpha - gamma, 1/2 - alpha - gamma
  double tol = 0;                 // derived tolerance on the init slopes (see depth_scaling.cpp)
  double q0 = 0;                  // mean RMS(x_0)^2
  double c_phi = 0;               // Var MS(phi(z)) per unit pre-activation variance
};

struct DepthScalingResult {
  DepthScalingOptions opts;
  std::vector<DepthScalingParam> params;
};

DepthScalingResult run_depth_scaling(const DepthScalingOptions& o);
std::string depth_scaling_table(const DepthScalingResult& r);
nlohmann::json depth_scaling_json(const DepthScalingResult& r);

// ---- plots (gnuplot; src/engine/diagnostics/diag_plots.cpp) ---------------------------------------------
// DIR/<diagnostic>.svg and .png. UserError (option --plot) when gnuplot is missing or fails.
void plot_alignment(const AlignmentResult& r, const std::string& dir);
void plot_transport(const TransportResult& r, const std::string& dir);
void plot_diversity(const DiversityResult& r, const std::string& dir);
void plot_init_stats(const InitStatsResult& r, const std::string& dir);
void plot_depth_scaling(const DepthScalingResult& r, const std::string& dir);

}  // namespace scaleinv::diag
