// Coordinate checks judged against the theory (see coordcheck.h): the two drivers. run_coordcheck
// validates, builds the theories, trains the zoo's grid on fixed data and judges its rows;
// judge_own_coordcheck judges a user model's runs measured elsewhere. The pieces they share are
// listed, in reading order, in coord_detail.h.
#include "engine/coordcheck/coordcheck.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/runtime/device.h"
#include "brain/util/errors.h"
#include "engine/runtime/torch_compat.h"
#include "brain/util/progress.h"
#include "engine/data/data.h"
#include "brain/coordcheck/coord_detail.h"
#include "engine/coordcheck/coord_recorder.h"
#include "engine/models/layers.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "engine/train/make_run.h"

namespace scaleinv {

using coord_detail::fit_rows;
using coord_detail::hidden_like;
using coord_detail::judge;
using coord_detail::LayerMapper;
using coord_detail::role_layer_map;
using coord_detail::sorted_unique;
using coord_detail::theory_shape;


namespace {

// ============================================================================================
// Validation
// ============================================================================================

void validate(const CoordCheckConfig& cc, const std::vector<int>& widths, const std::vector<int>& depths,
              const std::vector<int>& experts, const ParamTable& table, OptFamily family) {
  const ModelConfig& mc = cc.train.model;
  const ModelKind& kind = model_kind(mc.kind, "command line", "--model");
  if (widths.empty())
    throw UserError("command line", "--widths", "no widths given", "give a comma-separated list, e.g. 64,128,256");
  if (depths.empty())
    throw UserError("command line", "--depths", "no depths given", "give a comma-separated list, e.g. 4,8,16");
  for (int w : widths)
    if (w < 1)
      throw UserError("command line", "--widths", fmt::format("width {} is not positive", w), "use widths >= 1");
  for (int d : depths)
    if (d < 1)
      throw UserError("command line", "--depths", fmt::format("depth {} is not positive", d), "use depths >= 1");
  if (!cc.experts.empty() && !kind.experts)
    throw UserError("command line", "--experts", fmt::format("model '{}' has no experts", mc.kind),
                    "use --model moe, or leave --experts out");
  for (int e : experts)
    if (e < 1 || e < mc.top_k)
      throw UserError("command line", "--experts",
                      fmt::format("{} experts with top_k = {}", e, mc.top_k), "give expert counts >= model.top_k");
  if (widths.size() < 2 && depths.size() < 2 && experts.size() < 2)
    throw UserError("command line", "--widths",
                    "a slope needs at least 2 widths (or 2 depths with --depths, or 2 expert counts with --experts)",
                    "give e.g. --widths 64,128,256");
  if (cc.steps < 1)
    throw UserError("command line", "--steps", fmt::format("{} steps", cc.steps), "use at least 1 step");
  if (cc.seeds.empty())
    throw UserError("command line", "--seeds", "no seeds", "use --seeds 2 or more (the interval is over seeds)");
  if (cc.train_batches < 1)
    throw UserError("command line", "--train-batches", fmt::format("{}", cc.train_batches), "use at least 1");
  if (!cc.break_mode.empty() && cc.break_mode != "readout-multiplier")
    throw UserError("command line", "--break", fmt::format("unknown break mode '{}'", cc.break_mode),
                    "the only one is readout-multiplier");
  validate_optim_config(cc.train.optim);
  // Every shape up front (head splits), so a bad width fails before any training.
  for (int w : widths)
    for (int d : depths) {
      ModelConfig m = mc;
      m.width = w;
      m.depth = d;
      ScaleContext ctx{table, family, w, d};
      if (kind.attention) {
        try {
          head_shape(m, ctx);
        } catch (const UserError& e) {
          throw UserError("command line", "--widths", e.what(),
                          "use widths divisible by the head size (model.head_dim) or the head count (model.n_heads)");
        }
      }
    }
}

// ============================================================================================
// One run: build, train T steps on fixed data, record on the probe batch at every step.
// ============================================================================================

// `layers` gets every recorded activation (by the role of the weight that produced it) and every
// parameter (by its tag): the layer map's input.
CoordRun measure_run(const CoordCheckConfig& cc, const ParamTable& model_table, int width, int depth, int experts,
                     int64_t seed, const std::vector<Batch>& batches, torch::Device dev,
                     std::map<std::string, OwnCoordLayer>& layers) {
  TrainConfig cfg = cc.train;
  cfg.model.width = width;
  cfg.model.depth = depth;
  if (experts > 0) cfg.model.experts = experts;
  cfg.train.seed = seed;  // the model's init
  const RunParts parts = make_run(cfg, {.table = model_table, .device = dev});
  const std::shared_ptr<Model>& model = parts.model;
  const std::vector<TaggedParam> tagged = model->tagged_parameters();
  NamedTensors params;
  std::set<std::string> stacks;  // a mixture's experts [E, out, in]: E matrices
  for (const TaggedParam& p : tagged) {
    params.emplace_back(p.name, p.tensor);
    if (p.tag.role == Role::Expert && p.tensor.dim() == 3) stacks.insert(p.name);
    layers.emplace("w:" + p.name, OwnCoordLayer{p.name, true, p.tag.role, p.tag.in_block, p.tag.tied});
  }
  // Recording is switched on for the probe's forward (set_recording clears what the last one kept)
  // and off for an update on another batch.
  auto loss = [&](size_t b, bool record) {
    model->set_recording(record);
    return model->loss(batches[b].x, batches[b].y);
  };
  auto recorded = [&] {
    NamedTensors acts(model->recorded().begin(), model->recorded().end());
    for (size_t i = 0; i < acts.size(); ++i) {
      const Model::ActivationRole& r = model->recorded_roles().at(i);
      layers.emplace("a:" + acts[i].first, OwnCoordLayer{acts[i].first, false, r.role, r.in_block, false});
    }
    return acts;
  };
  CoordRun run = measure_coord_steps(cc.steps, cc.quantities, batches.size(), loss, recorded, params, *parts.opt, stacks);
  model->set_recording(false);
  run.width = width;
  run.depth = depth;
  run.experts = experts;
  run.seed = seed;
  return run;
}

// ============================================================================================
// The grid, step by step (run_coordcheck)
// ============================================================================================

// The width theory of every depth (by depth: a width row is judged against its depth's), the
// first depth's as res.width_theory with its L and note, and the depth theory.
std::map<int, WidthTheory> build_theories(CoordCheckResult& res) {
  const CoordCheckConfig& cc = res.config;
  const ModelConfig& mc = cc.train.model;
  std::map<int, WidthTheory> width_theories;  // by depth
  for (int d : res.depths) {
    const TheoryShape s = theory_shape(mc, d);
    width_theories.emplace(d, width_theory(res.table, res.family, s.L, cc.align, s.rmsnorm, muon_scale_of(cc.train.optim)));
  }
  {
    const TheoryShape s = theory_shape(mc, res.depths.front());
    res.theory_depth = s.L;
    res.theory_note = s.note;
    res.width_theory = width_theories.at(res.depths.front());
  }
  res.depth_theory = depth_theory(res.table, res.family);
  return width_theories;
}

// Fixed data: the same batches for every width, depth and seed, on the training device.
struct FixedData {
  torch::Device dev;
  std::vector<Batch> batches;
};

// Also sets res.n_probe and res.n_out (the width's finite-size term).
FixedData fixed_data(CoordCheckResult& res) {
  const TrainConfig& tc = res.config.train;
  const ModelConfig& mc = tc.model;
  auto data = make_data(tc.data);
  const bool language = model_kind(mc.kind).language();
  if (data->is_language() != language)
    throw UserError(tc.source, "data.source", fmt::format("'{}' does not fit model '{}'", tc.data.source, mc.kind),
                    data_fit_fix());
  FixedData fd{resolve_device(tc.train.device, tc.source, "train.device"), {}};
  // fp32 matmuls stay fp32 on CUDA, whatever an earlier run in this process set (TF32 is a
  // process-wide switch; `bench --device cuda` trains with it on before its coordcheck part), so
  // the GPU measures the same networks as the CPU.
  if (fd.dev.is_cuda()) compat::set_tf32(false);
  for (int64_t i = 0; i < res.config.train_batches; ++i) {
    Batch b = data->batch(Split::Train, i, tc.train.batch_size);
    fd.batches.push_back({b.x.to(fd.dev), b.y.to(fd.dev)});
  }
  res.n_probe = fd.batches.front().y.numel();  // one target per position (language) or per sample
  res.n_out = language ? mc.vocab : mc.n_classes;
  if (language && fd.batches.front().y.dim() == 2) {  // [B, T] under causal attention
    const int64_t B = fd.batches.front().y.size(0), T = fd.batches.front().y.size(1);
    res.n_pairs = B * T * (T + 1) / 2;
  }
  if (!res.experts.empty()) res.n_assign = res.n_probe * mc.top_k;
  return fd;
}

// Every run, depth by depth, width by width, seed by seed, into res.runs: the (width, depth) grid
// at the smallest expert count, then every other expert count at each width and the first depth.
// Returns the layers the runs recorded (measure_run), keyed "a:" + activation and "w:" + parameter.
std::map<std::string, OwnCoordLayer> run_grid(CoordCheckResult& res, const ParamTable& model_table,
                                              const FixedData& fd) {
  const CoordCheckConfig& cc = res.config;
  const int e0 = res.grid_experts();
  std::vector<std::array<int, 3>> points;  // (width, depth, experts)
  for (int d : res.depths)
    for (int w : res.widths) points.push_back({w, d, e0});
  for (size_t i = 1; i < res.experts.size(); ++i)
    for (int w : res.widths) points.push_back({w, res.depths.front(), res.experts[i]});
  const long total = static_cast<long>(points.size() * cc.seeds.size());
  std::unique_ptr<Progress> bar;
  if (cc.show_progress) bar = std::make_unique<Progress>(total, "coordcheck", "runs");
  long done = 0;
  std::map<std::string, OwnCoordLayer> layers;
  for (const auto& [w, d, e] : points)
    for (int64_t s : cc.seeds) {
      res.runs.push_back(measure_run(cc, model_table, w, d, e, s, fd.batches, fd.dev, layers));
      ++done;
      if (bar)
        bar->update(done, fmt::format("width {} depth {}{} seed {}", w, d, e > 0 ? fmt::format(" experts {}", e) : "", s));
    }
  if (bar) bar->finish();
  return layers;
}

// The layer map's input. Parameters in registration order and activations in forward order matter
// for a chain's rows: order by the first run's series (forward order, then registration order).
std::vector<OwnCoordLayer> layers_in_order(const std::vector<CoordRun>& runs,
                                           const std::map<std::string, OwnCoordLayer>& layers) {
  std::vector<OwnCoordLayer> ordered;
  std::set<std::string> placed;
  for (const CoordRun& run : runs)
    for (const CoordSeries& se : run.series) {
      const std::string key = (is_activation_quantity(se.q) ? "a:" : "w:") + se.layer;
      if (placed.insert(key).second && layers.count(key)) ordered.push_back(layers.at(key));
    }
  return ordered;
}

}  // namespace

// ============================================================================================
// The drivers
// ============================================================================================

CoordCheckResult run_coordcheck(const CoordCheckConfig& cc_in) {
  const ConfigSource config_source(cc_in.train.source);  // library checks name this file
  const auto t0 = std::chrono::steady_clock::now();
  CoordCheckResult res;
  res.config = cc_in;
  const CoordCheckConfig& cc = res.config;
  const ModelConfig& mc = cc.train.model;
  res.widths = sorted_unique(cc.widths.empty() ? std::vector<int>{mc.width} : cc.widths);
  res.depths = sorted_unique(cc.depths.empty() ? std::vector<int>{mc.depth} : cc.depths);
  const bool mixture = model_kind(mc.kind, "command line", "--model").experts;
  res.experts = sorted_unique(!cc.experts.empty() ? cc.experts : mixture ? std::vector<int>{mc.experts} : std::vector<int>{});
  res.table = resolve_param(cc.train);
  res.family = optimizer_family(cc.train.optim.kind);
  validate(cc, res.widths, res.depths, res.experts, res.table, res.family);
  ParamTable model_table = res.table;
  if (cc.break_mode == "readout-multiplier") model_table.row(Role::Readout).a = 0;

  const std::map<int, WidthTheory> width_theories = build_theories(res);
  const FixedData data = fixed_data(res);
  const std::map<std::string, OwnCoordLayer> layers = run_grid(res, model_table, data);

  const ModelKind& kind = model_kind(mc.kind);
  const std::string& stream_prefix = kind.stream_prefix;
  const bool qk_unmodelled = mc.n_heads > 0 && std::fabs(res.table.attn_logit - 0.5) > kExponentTol;
  const bool power_law = !kind.chains_without_pre_ln || mc.pre_ln || res.depth_theory.alpha >= 0.5 - kExponentTol;
  fit_rows(res, width_theories, stream_prefix, qk_unmodelled, power_law,
           role_layer_map(layers_in_order(res.runs, layers), kind.depth_rows));
  judge(res);
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace scaleinv
