// Simulated low precision: rounding to bf16 / fp8 and its counters (src/engine/precision/quantize.h).
#include "engine/precision/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "brain/util/errors.h"

namespace scaleinv::precision {

namespace {

thread_local Scope* g_active = nullptr;

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

struct QuantizeFn : public torch::autograd::Function<QuantizeFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t scope_ptr, std::string point) {
    Scope* s = reinterpret_cast<Scope*>(scope_ptr);
    return round_and_count(x, forward_format(s->format()), s->saturate(), &s->stats(point));
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    return {grads[0], torch::Tensor(), torch::Tensor()};  // straight through
  }
};

struct QuantizeGradFn : public torch::autograd::Function<QuantizeGradFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t scope_ptr, std::string point) {
    ctx->saved_data["scope"] = scope_ptr;
    ctx->saved_data["point"] = point;
    return x.clone();
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    // The scope outlives the step's backward pass (the trainer holds it across forward and backward).
    Scope* s = reinterpret_cast<Scope*>(ctx->saved_data["scope"].toInt());
    const std::string point = ctx->saved_data["point"].toStringRef();
    return {round_and_count(grads[0], grad_format(s->format()), s->saturate(), &s->stats(point)), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

const char* format_name(Format f) {
  switch (f) {
    case Format::FP32: return "fp32";
    case Format::BF16: return "bf16";
    case Format::E4M3: return "e4m3";
    case Format::E5M2: return "e5m2";
    case Format::FP8: return "fp8";
  }
  return "?";
}

Format forward_format(Format f) { return f == Format::FP8 ? Format::E4M3 : f; }
Format grad_format(Format f) { return f == Format::FP8 ? Format::E5M2 : f; }

bool parse_format(const std::string& s, Format* out) {
  for (Format f : {Format::FP32, Format::BF16, Format::E4M3, Format::E5M2, Format::FP8})
    if (s == format_name(f)) {
      *out = f;
      return true;
    }
  return false;
}

Format format_from_string(const std::string& s, const std::string& where, const std::string& field) {
  Format f;
  if (!parse_format(s, &f))
    throw UserError(where, field, fmt::format("unknown precision '{}'", s),
                    "use one of fp32, bf16, e4m3, e5m2, fp8 (E4M3 forward, E5M2 gradients)");
  return f;
}

FormatSpec format_spec(Format f) {
  f = forward_format(f);
  FormatSpec s;
  switch (f) {
    case Format::FP32:
      s = {23, -126, static_cast<double>(std::numeric_limits<float>::max()), true};
      break;
    case Format::BF16:
      s = {7, -126, std::ldexp(2.0 - std::ldexp(1.0, -7), 127), true};
      break;
    case Format::E4M3:
      s = {3, -6, 448.0, false};
      break;
    case Format::E5M2:
      s = {2, -14, 57344.0, true};
      break;
  }
  return s;
}

torch::Tensor round_to_format(const torch::Tensor& x, Format f, bool saturate) {
  return round_and_count(x, f, saturate, nullptr);
}

torch::Tensor round_and_count(const torch::Tensor& x, Format f, bool saturate, QuantStats* stats) {
  if (f == Format::FP32) {
    if (stats) {
      stats->calls += 1;
      stats->total += x.numel();
    }
    return x;
  }
  torch::NoGradGuard no_grad;
  const FormatSpec spec = format_spec(f);
  // In double, where every step below is exact: |x| = m 2^e with m in [0.5, 1), so the binade's
  // exponent is e - 1, floored at the smallest normal exponent (subnormals share its spacing);
  // the spacing there is 2^(E - mantissa_bits); round half to even (torch::round) on that grid.
  const torch::Tensor xd = x.to(torch::kDouble);
  const torch::Tensor ax = xd.abs();
  auto fe = torch::frexp(ax);
  torch::Tensor E = (std::get<1>(fe).to(torch::kDouble) - 1.0).clamp_min(spec.min_exponent);
  torch::Tensor step = torch::pow(2.0, E - spec.mantissa_bits);
  torch::Tensor q = torch::round(ax / step) * step;
  const torch::Tensor finite = torch::isfinite(xd);
  const torch::Tensor over = (q > spec.max_finite).logical_and(finite);
  const bool to_max = saturate || !spec.has_inf;
  q = torch::where(over, torch::full_like(q, to_max ? spec.max_finite : std::numeric_limits<double>::infinity()), q);
  // Infinite inputs: kept where the format has inf, NaN in e4m3 (no inf encoding). NaN stays NaN.
  const torch::Tensor is_inf = torch::isinf(xd);
  q = torch::where(is_inf, torch::full_like(q, spec.has_inf ? std::numeric_limits<double>::infinity()
                                                              : std::numeric_limits<double>::quiet_NaN()),
                   q);
  q = torch::where(torch::isnan(xd), xd, torch::copysign(q, xd));
  if (stats) {
    // This call's [nonzero, underflow, saturated] and its fractions [underflow, saturated] / nonzero
    // (0 when nothing was nonzero: both counts are then 0), added to the pending sums and maxima
    // on the device; QuantStats::settle reads them back.
    const torch::Tensor nz = (ax != 0).logical_and(finite);
    const torch::Tensor counts = torch::stack({nz.sum(), nz.logical_and(q == 0).sum(), over.sum()}).to(torch::kDouble);
    const torch::Tensor fractions = counts.slice(0, 1, 3) / counts[0].clamp_min(1.0);
    if (!stats->pending.defined()) {
      stats->pending = torch::cat({counts, fractions});
    } else {
      stats->pending.slice(0, 0, 3).add_(counts);
      torch::Tensor worst = stats->pending.slice(0, 3, 5);
      at::maximum_out(worst, worst, fractions);
    }
    stats->calls += 1;
    stats->total += x.numel();
  }
  return q.to(x.scalar_type());
}

void QuantStats::settle() {
  if (!pending.defined()) return;
  const torch::Tensor h = pending.to(torch::kCPU).contiguous();
  const double* v = h.data_ptr<double>();
  nonzero += static_cast<int64_t>(v[0]);
  underflow += static_cast<int64_t>(v[1]);
  saturated += static_cast<int64_t>(v[2]);
  worst_underflow = std::max(worst_underflow, v[3]);
  worst_saturated = std::max(worst_saturated, v[4]);
  pending = torch::Tensor();
}

const std::map<std::string, QuantStats>& Scope::all_stats() {
  for (auto& [point, st] : stats_) st.settle();
  return stats_;
}

Scope::Scope(Format f, bool saturate) : format_(f), saturate_(saturate), previous_(g_active) { g_active = this; }

Scope::~Scope() { g_active = previous_; }

void Scope::name_tensor(const torch::Tensor& t, const std::string& name) {
  names_[t.unsafeGetTensorImpl()] = name;
}

std::string Scope::name_of(const torch::Tensor& t) const {
  auto it = names_.find(t.unsafeGetTensorImpl());
  return it == names_.end() ? "?" : it->second;
}

Scope* active() { return g_active; }

torch::Tensor quantize(const torch::Tensor& x, const std::string& point) {
  Scope* s = g_active;
  if (!s || s->format() == Format::FP32) return x;
  return QuantizeFn::apply(x, reinterpret_cast<int64_t>(s), point);
}

torch::Tensor quantize_grad(const torch::Tensor& x, const std::string& point) {
  Scope* s = g_active;
  if (!s || s->format() == Format::FP32 || !x.requires_grad()) return x;
  return QuantizeGradFn::apply(x, reinterpret_cast<int64_t>(s), point);
}

torch::Tensor linear_input(const torch::Tensor& x, const std::string& name) { return quantize(x, name + ":x"); }
torch::Tensor linear_weight(const torch::Tensor& w, const std::string& name) { return quantize(w, name + ":w"); }
torch::Tensor linear_output(const torch::Tensor& y, const std::string& name) {
  return quantize_grad(y, name + ":grad");
}

}  // namespace scaleinv::precision
