#pragma once
// Simulated low precision (issue 7): values are rounded to a narrow floating-point format and
// stored back in float32, at chosen points of the forward and backward pass, and every rounding
// counts how many values underflowed (nonzero in, zero out) or saturated (|x| beyond the largest
// finite value).
//
// Formats (IEEE-style binary floating point, round to nearest, ties to even):
//   fp32   no rounding
//   bf16   8 exponent bits, 7 mantissa bits: max (2 - 2^-7) 2^127, min normal 2^-126, min subnormal 2^-133, inf
//   e4m3   OCP FP8 E4M3: bias 7, 3 mantissa bits, max 448 (S.1111.110), min normal 2^-6, min subnormal
//          2^-9, no infinity (S.1111.111 is NaN): overflow saturates to +-448, inf becomes NaN
//   e5m2   OCP FP8 E5M2: bias 15, 2 mantissa bits, max 57344, min normal 2^-14, min subnormal 2^-16, inf:
//          overflow (|x| >= 61440, the tie above 57344 rounding to even 65536) gives +-inf, or +-57344
//          when saturating
// NaN stays NaN. Magnitudes below half the smallest subnormal round to (signed) zero; exactly half
// ties to even, i.e. to zero.
//
// In training (Dense::forward, attention) a Scope is active: each linear's input and weight are
// rounded in the forward pass (straight-through: their gradients pass unchanged) and the gradient
// arriving at its output is rounded in the backward pass, every format saturating on overflow (as
// FP8 training recipes do) while counting it.
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace scaleinv::precision {

// FP8 is a recipe, not a format: E4M3 for what the forward pass rounds (inputs, weights) and E5M2
// for gradients, the usual split of FP8 training (E4M3's extra mantissa bit where values are bounded,
// E5M2's 2^7 more range where they are not).
enum class Format { FP32 = 0, BF16, E4M3, E5M2, FP8 };
const char* format_name(Format f);  // "fp32", "bf16", "e4m3", "e5m2", "fp8"
// The format a scope of format f rounds forward values to, and gradients to (f itself but for FP8).
Format forward_format(Format f);
Format grad_format(Format f);
bool parse_format(const std::string& s, Format* out);
// UserError naming `where` and `field` on an unknown name.
Format format_from_string(const std::string& s, const std::string& where, const std::string& field);

struct FormatSpec {
  int mantissa_bits = 23;
  int min_exponent = -126;      // exponent of the smallest normal number
  double max_finite = 0;
  bool has_inf = true;
  double min_subnormal() const { return std::ldexp(1.0, min_exponent - mantissa_bits); }
  double min_normal() const { return std::ldexp(1.0, min_exponent); }
};
FormatSpec format_spec(Format f);  // (FP8: the forward format's)

// x rounded to the format (same dtype and shape as x). saturate: overflow gives +-max instead of
// +-inf (e4m3 always saturates finite values; it has no inf).
torch::Tensor round_to_format(const torch::Tensor& x, Format f, bool saturate = false);

// Counts of one tensor's roundings, accumulated over calls. The counts that depend on the values
// stay on the tensors' device until settle() reads them back (once, not once per rounding: on CUDA
// a read-back waits for the device), so nonzero, underflow, saturated and the worst fractions are
// complete only after settle(); calls and total always are.
struct QuantStats {
  int64_t calls = 0;
  int64_t total = 0;        // elements seen
  int64_t nonzero = 0;      // finite nonzero inputs
  int64_t underflow = 0;    // of those, rounded to zero
  int64_t saturated = 0;    // of those, beyond the largest finite value
  double worst_underflow = 0;  // the largest per-call underflow fraction
  double worst_saturated = 0;
  // Not yet read back: [nonzero, underflow, saturated] summed and [worst_underflow,
  // worst_saturated] maxed over calls, float64 (exact for counts below 2^53) on the device.
  torch::Tensor pending;
  void settle();  // folds `pending` into the fields above (one read-back) and empties it
  double underflow_fraction() const { return nonzero ? static_cast<double>(underflow) / nonzero : 0.0; }
  double saturated_fraction() const { return nonzero ? static_cast<double>(saturated) / nonzero : 0.0; }
};
// Rounds and counts in one pass (what the training hooks use); the counts go to stats->pending.
torch::Tensor round_and_count(const torch::Tensor& x, Format f, bool saturate, QuantStats* stats);

// The active simulated precision of this thread (RAII). Tensors are named through name_tensor
// (e.g. from Model::tagged_parameters); unnamed ones get "?".
class Scope {
 public:
  explicit Scope(Format f, bool saturate = true);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  Format format() const { return format_; }
  bool saturate() const { return saturate_; }
  void name_tensor(const torch::Tensor& t, const std::string& name);
  std::string name_of(const torch::Tensor& t) const;
  QuantStats& stats(const std::string& point) { return stats_[point]; }
  // Every point's counts, settled (one read-back per point).
  const std::map<std::string, QuantStats>& all_stats();
  void clear_stats() { stats_.clear(); }

 private:
  Format format_;
  bool saturate_;
  Scope* previous_;
  std::unordered_map<const void*, std::string> names_;
  std::map<std::string, QuantStats> stats_;
};
// The innermost active scope, or nullptr (fp32: no scope needed). Cheap.
Scope* active();

// Forward: x rounded (counted under `point`); backward: straight through.
torch::Tensor quantize(const torch::Tensor& x, const std::string& point);
// Forward: identity; backward: the gradient rounded (counted under `point`).
torch::Tensor quantize_grad(const torch::Tensor& x, const std::string& point);

// The hooks of one linear op named `name`: its input ("name:x"), weight ("name:w") and output
// gradient ("name:grad"). Identity when no scope is active or the format is fp32.
torch::Tensor linear_input(const torch::Tensor& x, const std::string& name);
torch::Tensor linear_weight(const torch::Tensor& w, const std::string& name);
torch::Tensor linear_output(const torch::Tensor& y, const std::string& name);

}  // namespace scaleinv::precision
