// build_model: validates the architecture config and builds the model (src/engine/models/model.h).
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "brain/models/model_kinds.h"
#include "engine/models/zoo.h"

namespace scaleinv {

namespace {

using Maker = std::shared_ptr<Model> (*)(const ModelConfig&, const ScaleContext&, const Hyper&);

// The builder of each row of brain/models/model_kinds.cpp (Models.EveryKindBuilds builds them all).
const std::map<std::string, Maker>& makers() {
  static const std::map<std::string, Maker> m = {{"bigram", make_bigram}, {"mlp", make_mlp}, {"resmlp", make_resmlp},
                                                 {"gpt", make_gpt},       {"vit", make_vit}, {"llama", make_llama},
                                                 {"moe", make_moe}};
  return m;
}

// The base width's head count (kv_heads is stated there). UserError naming model.kv_heads when the
// base width does not split into heads.
int64_t base_heads(const ModelConfig& cfg, const ScaleContext& ctx) {
  ModelConfig base = cfg;
  base.width = ctx.table.base_width;
  try {
    return head_shape(base, ctx).n_heads;
  } catch (const UserError&) {
    throw UserError("config", "model.kv_heads",
                    fmt::format("the base width {} does not split into heads, so kv_heads {} has no base head count",
                                ctx.table.base_width, cfg.kv_heads),
                    "use a base width divisible by model.head_dim (or model.n_heads), or kv_heads = 0");
  }
}

}  // namespace

int64_t kv_heads_at(const ModelConfig& cfg, const ScaleContext& ctx) {
  const HeadShape hs = head_shape(cfg, ctx);
  if (cfg.kv_heads == 0) return hs.n_heads;
  const int64_t h0 = base_heads(cfg, ctx);
  if (cfg.kv_heads > h0 || h0 % cfg.kv_heads != 0)
    throw UserError("config", "model.kv_heads",
                    fmt::format("kv_heads {} does not divide the {} query heads at the base width {}", cfg.kv_heads,
                                h0, ctx.table.base_width),
                    "use a kv_heads that divides the base width's head count (base width / head_dim)");
  const int64_t group = h0 / cfg.kv_heads;  // query heads per key/value head, at every width
  if (hs.n_heads % group != 0)
    throw UserError("config", "model.width",
                    fmt::format("width {} has {} heads, not a multiple of {} query heads per key/value head",
                                cfg.width, hs.n_heads, group),
                    "use a width whose head count is a multiple of (base heads / model.kv_heads)");
  return hs.n_heads / group;
}

void validate_model_config(const ModelConfig& cfg, const ScaleContext& ctx) {
  const ModelKind& kind = model_kind(cfg.kind);
  require_positive(cfg.width, "model.width");
  require_positive(cfg.depth, "model.depth");
  parse_activation(cfg.activation);  // throws on an unknown name (field model.activation)
  parse_placement(cfg.block);        // throws on an unknown name (field model.block)
  if (ctx.table.base_width <= 0 || ctx.table.base_depth <= 0)
    throw UserError("param", "base_width", "base_width and base_depth must be positive",
                    "fix the parameterization table");
  if (kind.language()) require_positive(cfg.vocab, "model.vocab");
  if (cfg.tied && !kind.language())
    throw UserError("config", "model.tied",
                    fmt::format("tied embeddings need a token embedding; '{}' has none", cfg.kind),
                    "set model.tied = false, or use a language model (" +
                        model_kind_list([](const ModelKind& k) { return k.language(); }) + ")");
  if (cfg.tied && cfg.zero_readout)
    throw UserError("config", "model.zero_readout", "zero_readout with tied embeddings would zero the embedding",
                    "use at most one of model.tied and model.zero_readout");
  if (cfg.kv_heads != 0 && !kind.gqa)
    throw UserError("config", "model.kv_heads", fmt::format("'{}' has no grouped-query attention", cfg.kind),
                    "remove model.kv_heads, or use " + model_kind_list([](const ModelKind& k) { return k.gqa; }));
  kind.validate(cfg);
  if (!kind.experts && is_moe_table(ctx.table))
    throw UserError("config", "param.name",
                    fmt::format("'{}' is a mixture-of-experts table, and '{}' has no experts", ctx.table.name, cfg.kind),
                    "use a dense table (e.g. mup, completep) for this model, or model.kind = one of " +
                        model_kind_list([](const ModelKind& k) { return k.experts; }));
  if (kind.attention) head_shape(cfg, ctx);  // throws when the width does not split into heads
  if (kind.gqa) kv_heads_at(cfg, ctx);
}

namespace {

// This machine's memory in bytes (0 where the system does not say).
double physical_memory() {
  const double pages = static_cast<double>(::sysconf(_SC_PHYS_PAGES)), page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  return pages > 0 && page > 0 ? pages * page : 0.0;
}

void check_fits_in_memory(const ModelConfig& cfg) {
  const double have = physical_memory();
  if (!(have > 0)) return;
  // Training holds each parameter about 4 times (value, gradient, two Adam moments) in float32.
  const ModelKind& kind = model_kind(cfg.kind);
  const double need = 16.0 * kind.parameters(cfg);
  if (need <= have) return;
  if (kind.experts && cfg.experts > 1) {  // the experts alone past memory: name them, not the width
    ModelConfig one = cfg;
    one.experts = 1;
    one.top_k = 1;
    if (16.0 * kind.parameters(one) <= have)
      throw UserError("config", "model.experts",
                      fmt::format("{} experts of width {} and depth {} need about {:.0f} GB for their parameters "
                                  "alone; this machine has {:.0f} GB",
                                  cfg.experts, cfg.width, cfg.depth, need / 1e9, have / 1e9),
                      "use fewer model.experts (or a smaller model.width or model.depth)");
  }
  throw UserError("config", "model.width",
                    fmt::format("a {} of width {} and depth {} needs about {:.0f} GB for its parameters alone; this "
                                "machine has {:.0f} GB",
                                cfg.kind, cfg.width, cfg.depth, need / 1e9, have / 1e9),
                    "use a smaller model.width or model.depth");
}

}  // namespace

void check_batch_fits_in_memory(const ModelConfig& cfg, int64_t batch) {
  const double have = physical_memory();
  if (!(have > 0)) return;
  // float32 values kept per item: one output per layer and the logits (language models: per token).
  const bool language = model_kind(cfg.kind).language();
  const double items = static_cast<double>(batch) * (language ? cfg.seq_len : 1);
  const double per_item = static_cast<double>(cfg.depth) * cfg.width + (language ? cfg.vocab : cfg.n_classes);
  const double need = 4.0 * items * per_item;
  if (need > have)
    throw UserError("config", "train.batch_size",
                    fmt::format("a batch of {} needs at least {:.0f} GB for one step's activations; this machine has "
                                "{:.0f} GB",
                                batch, need / 1e9, have / 1e9),
                    "use a smaller train.batch_size (or model.seq_len)");
}

std::shared_ptr<Model> build_model(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) {
  validate_model_config(cfg, ctx);
  if (hp.router_mult != 1 && !model_kind(cfg.kind).experts)
    throw UserError("config", "hp.router_mult", fmt::format("'{}' has no router", cfg.kind),
                    "remove hp.router_mult, or use model.kind = one of " +
                        model_kind_list([](const ModelKind& k) { return k.experts; }));
  check_fits_in_memory(cfg);
  if (ctx.width != cfg.width || ctx.depth != cfg.depth)
    throw std::invalid_argument(fmt::format("build_model: ScaleContext shape {}x{} differs from the model's {}x{}",
                                            ctx.width, ctx.depth, cfg.width, cfg.depth));
  if (ctx.members > 0 && !model_kind(cfg.kind).ensemble)
    throw std::invalid_argument("build_model: batched ensembles take " +
                                model_kind_list([](const ModelKind& k) { return k.ensemble; }) + " (engine/train/ensemble.h)");
  return makers().at(cfg.kind)(cfg, ctx, hp);
}

std::shared_ptr<Model> build_model_seeded(uint64_t seed, const ModelConfig& cfg, const ScaleContext& ctx,
                                          const Hyper& hp) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  return build_model(cfg, ctx, hp);
}

}  // namespace scaleinv
