// Shared pieces of the diagnostics: slope fits with seed intervals, option checks, the training
// helpers (src/engine/diagnostics/diagnostics.h, diag_detail.h).
#include "brain/util/json_number.h"
#include "engine/diagnostics/diagnostics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "engine/runtime/tensor_rms.h"
#include "brain/util/errors.h"
#include "engine/diagnostics/diag_detail.h"
#include "brain/util/slope_fit.h"
#include "engine/models/layers.h"
#include "engine/train/step_loop.h"

namespace scaleinv::diag {

// ---- fits ------------------------------------------------------------------------------------

namespace {
Fit make_fit(double slope, double se, double half_width, std::vector<double> per_seed) {
  Fit f;
  f.slope = slope;
  f.se = se;
  f.lo = slope - half_width;
  f.hi = slope + half_width;
  f.per_seed = std::move(per_seed);
  return f;
}

nlohmann::json num(double v) { return json_number(v); }
}  // namespace

Fit fit_slope(const std::vector<double>& xs, const std::vector<std::vector<double>>& ys, bool log_x, bool log_y) {
  SlopeFitOptions opts;
  opts.log_x = log_x;
  opts.log_y = log_y;
  opts.bad_values = SlopeFitOptions::BadValues::nan_seed;
  opts.no_interval = SlopeFitOptions::NoInterval::infinite;
  SlopeFit s = fit_seed_slopes(xs, ys, opts);
  // One seed: that seed's slope itself (the same number as the mean over one seed, except that
  // the mean (0 + v) / 1 turns a -0 slope into +0, and "-0.000" is what the diagnostics print).
  const double slope = s.per_seed.size() == 1 ? s.per_seed[0] : s.slope;
  return make_fit(slope, s.se, s.half_width, std::move(s.per_seed));
}

Fit fit_mean(const std::vector<double>& v) {
  if (v.empty()) return Fit{};
  const MeanInterval m = mean_interval(v);
  return make_fit(m.mean, m.se, m.half_width, v);
}

nlohmann::json fit_json(const Fit& f) {
  nlohmann::json per = nlohmann::json::array();
  for (double v : f.per_seed) per.push_back(num(v));
  return {{"slope", num(f.slope)}, {"lo", num(f.lo)}, {"hi", num(f.hi)}, {"se", num(f.se)}, {"per_seed", per}};
}

std::string fit_text(const Fit& f, int p) {
  if (!std::isfinite(f.slope)) return "nan";
  if (!std::isfinite(f.lo) || !std::isfinite(f.hi)) return fmt::format("{:.{}f} [one seed]", f.slope, p);
  return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", f.slope, p, f.lo, p, f.hi, p);
}

// ---- helpers -----------------------------------------------------------------------------------

namespace detail {

void require(bool ok, const std::string& option, const std::string& problem, const std::string& fix) {
  if (!ok) throw UserError("command line", option, problem, fix);
}

void require_grid(const std::vector<int>& v, const std::string& option, size_t min_count) {
  for (int x : v)
    require(x > 0, option, fmt::format("{} is not a positive size", x), "give positive integers, e.g. 64,128,256");
  std::set<int> distinct(v.begin(), v.end());
  require(distinct.size() >= min_count, option,
          fmt::format("{} distinct value(s) given ({}), a slope needs at least {}", distinct.size(), fmt::join(v, ", "), min_count),
          "give a comma-separated list of at least two sizes, e.g. 64,128,256");
}

void require_optimizer(const std::string& kind) {
  bool known = true;
  try {
    optimizer_family(kind);
  } catch (const UserError&) {
    known = false;
  }
  require(known, "--optimizer", fmt::format("unknown optimizer '{}'", kind), std::string("use one of ") + optimizer_kinds());
}

void require_lr(double lr, const std::string& example) {
  require(std::isfinite(lr) && lr > 0, "--lr", fmt::format("lr {} is not positive", lr), "e.g. " + example);
}

void require_activation(const std::string& name) {
  require(name == "linear" || name == "relu" || name == "abs" || name == "tanh" || name == "gelu", "--activation",
          fmt::format("unknown activation '{}'", name), "use one of linear, relu, abs, tanh, gelu");
}

ParamTable load_diag_param(const std::string& name) {
  return name == "ode" ? depth_mup_ode_limit() : load_param(name);
}

std::unique_ptr<Optimizer> make_diag_optimizer(Model& model, const std::string& kind, double lr, double beta1,
                                               bool train_io) {
  std::vector<TaggedParam> params = model.tagged_parameters();
  if (!train_io) {
    std::vector<TaggedParam> kept;
    for (auto& p : params) {
      if (p.tag.in_block) kept.push_back(p);
      else p.tensor.set_requires_grad(false);
    }
    params = std::move(kept);
  }
  OptimConfig oc;
  oc.kind = kind;
  oc.lr = lr;
  oc.beta1 = beta1;
  oc.momentum = 0.0;
  oc.eps = optimizer_kind(kind).default_eps;
  oc.weight_decay = 0.0;
  oc.schedule = "constant";
  return make_optimizer(oc, param_groups(params, model.context()));
}

std::vector<double> train_steps(Model& model, Optimizer& opt, int steps, const std::function<Batch(int64_t)>& batch,
                                const std::function<void(int64_t, double)>& on_step) {
  std::vector<double> losses;
  StepHooks hooks;
  hooks.loss = [&](int64_t t) {
    const Batch b = batch(t);
    torch::Tensor loss = model.loss(b.x, b.y);
    losses.push_back(loss.item<double>());
    return loss;
  };
  hooks.after_step = [&](int64_t done) {
    if (on_step) on_step(done, losses.back());
    return true;
  };
  run_steps(opt, 0, steps, hooks);
  return losses;
}

Batch gaussian_batch(uint64_t seed, uint64_t teacher_seed, int64_t batch, int64_t in_dim, int64_t n_classes) {
  torch::NoGradGuard ng;
  auto g = at::detail::createCPUGenerator(seed);
  auto gt = at::detail::createCPUGenerator(teacher_seed);
  Batch b;
  b.x = at::randn({batch, in_dim}, g, torch::kFloat);
  torch::Tensor teacher = at::randn({in_dim, n_classes}, gt, torch::kFloat);
  b.y = b.x.matmul(teacher).argmax(1).to(torch::kLong);
  return b;
}

double var_phi(const std::string& activation, double s2) {
  constexpr double kPi = 3.14159265358979323846;
  if (activation == "linear") return s2;
  if (activation == "relu") return s2 * (0.5 - 1.0 / (2.0 * kPi));
  if (activation == "abs") return s2 * (1.0 - 2.0 / kPi);
  // Probabilists' Gauss-Hermite by a fine midpoint rule on [-10, 10] sd: plenty for smooth phi.
  const double s = std::sqrt(s2);
  const int n = 4000;
  const double lo = -10, hi = 10, h = (hi - lo) / n;
  double m1 = 0, m2 = 0;
  for (int i = 0; i < n; ++i) {
    const double z = lo + (i + 0.5) * h;
    const double w = std::exp(-0.5 * z * z) / std::sqrt(2 * kPi) * h;
    const double x = s * z;
    double y = 0;
    if (activation == "tanh") y = std::tanh(x);
    else y = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));  // gelu (exact)
    m1 += w * y;
    m2 += w * y * y;
  }
  return m2 - m1 * m1;
}

Bar::Bar(bool on, long total, const std::string& label) {
  if (on) p_.emplace(total, label, "run");
}

void Bar::tick(const std::string& status) {
  ++done_;
  if (p_) p_->update(done_, status);
}

void Bar::status(const std::string& status) {
  if (p_) p_->update(done_, status);
}

void Bar::finish() {
  if (p_) p_->finish();
}

RecordedForward recorded_forward(Model& m, const torch::Tensor& x) {
  m.set_recording(true);
  m.forward(x);
  RecordedForward out;
  for (const auto& [name, t] : m.recorded()) out.tensors.push_back(t.detach());
  out.roles = m.recorded_roles();
  m.set_recording(false);
  return out;
}

std::vector<torch::Tensor> transformer_stream(const RecordedForward& rec) {
  std::vector<torch::Tensor> z;
  for (size_t i = 0; i < rec.tensors.size(); ++i) {
    const Model::ActivationRole& r = rec.roles[i];
    if ((z.empty() && r.role == Role::Embedding) || (!z.empty() && r.role == Role::Hidden && r.in_block))
      z.push_back(rec.tensors[i]);
  }
  if (z.empty()) throw std::logic_error("the model recorded no embedding output (Model::record's roles)");
  return z;
}

std::vector<std::shared_ptr<TransformerBlock>> transformer_blocks(Model& m) {
  std::vector<std::shared_ptr<TransformerBlock>> blocks;
  for (const auto& item : m.named_modules("", false))
    if (auto b = std::dynamic_pointer_cast<TransformerBlock>(item.value())) blocks.push_back(b);
  return blocks;
}

std::shared_ptr<NormGain> final_norm(Model& m) {
  std::shared_ptr<NormGain> found;
  for (const auto& child : m.children())
    if (auto n = std::dynamic_pointer_cast<NormGain>(child)) {
      if (found) throw std::logic_error("the model has more than one norm of its own: which is the final one?");
      found = n;
    }
  return found;
}

std::vector<torch::Tensor> hidden_weights(Model& m) {
  std::vector<torch::Tensor> hidden;
  for (const TaggedParam& p : m.tagged_parameters())
    if (p.tag.role == Role::Hidden && p.tensor.dim() == 2) hidden.push_back(p.tensor.detach().clone());
  return hidden;
}

torch::Tensor readout_weight(Model& m) {
  for (const TaggedParam& p : m.tagged_parameters())
    if (p.tag.role == Role::Readout || p.tag.tied) return p.tensor.detach().clone();
  throw std::logic_error("the model has no readout tensor (role readout, or a tied embedding)");
}

}  // namespace detail
}  // namespace scaleinv::diag
