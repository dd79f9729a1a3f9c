// build_model: validates the architecture config and builds the model (src/models/model.h).
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "core/errors.h"
#include "models/zoo.h"

namespace scaleinv {

namespace {

void require_positive(int value, const char* field) {
  if (value <= 0)
    throw UserError("config", field, fmt::format("must be a positive integer, got {}", value),
                    fmt::format("set {} > 0", field));
}

}  // namespace

void validate_model_config(const ModelConfig& cfg, const ScaleContext& ctx) {
  const std::string& k = cfg.kind;
  if (k != "bigram" && k != "resmlp" && k != "gpt" && k != "vit" && k != "mlp")
    throw UserError("config", "model.kind", fmt::format("unknown model kind '{}'", k),
                    "use one of bigram, mlp, resmlp, gpt, vit");
  require_positive(cfg.width, "model.width");
  require_positive(cfg.depth, "model.depth");
  parse_activation(cfg.activation);  // throws on an unknown name (field model.activation)
  parse_placement(cfg.block);        // throws on an unknown name (field model.block)
  if (ctx.table.base_width <= 0 || ctx.table.base_depth <= 0)
    throw UserError("param", "base_width", "base_width and base_depth must be positive",
                    "fix the parameterization table");
  const bool language = k == "bigram" || k == "gpt";
  if (language) require_positive(cfg.vocab, "model.vocab");
  if (cfg.tied && !language)
    throw UserError("config", "model.tied", fmt::format("tied embeddings need a token embedding; '{}' has none", k),
                    "set model.tied = false, or use kind bigram or gpt");
  if (cfg.tied && cfg.zero_readout)
    throw UserError("config", "model.zero_readout",
                    "zero_readout with tied embeddings would zero the embedding",
                    "use at most one of model.tied and model.zero_readout");
  if (k == "resmlp") {
    require_positive(cfg.in_dim, "model.in_dim");
    if (cfg.block_depth != 1 && cfg.block_depth != 2)
      throw UserError("config", "model.block_depth", fmt::format("block_depth must be 1 or 2, got {}", cfg.block_depth),
                      "use 1 (seed 004 eq. 1) or 2 (seed 004 App. K)");
  }
  if (k == "mlp") require_positive(cfg.in_dim, "model.in_dim");
  if (k == "resmlp" || k == "vit" || k == "mlp") require_positive(cfg.n_classes, "model.n_classes");
  if (k == "gpt" || k == "vit") {
    require_positive(cfg.mlp_ratio, "model.mlp_ratio");
    head_shape(cfg, ctx);  // throws when the width does not split into heads
  }
  if (k == "gpt") require_positive(cfg.seq_len, "model.seq_len");
  if (k == "vit") {
    require_positive(cfg.image_size, "model.image_size");
    require_positive(cfg.channels, "model.channels");
    require_positive(cfg.patch, "model.patch");
    if (cfg.image_size % cfg.patch != 0)
      throw UserError("config", "model.patch",
                      fmt::format("image_size {} is not divisible by patch {}", cfg.image_size, cfg.patch),
                      "use a patch size that divides the image size (28: 4, 7, 14)");
  }
}

namespace {

// Parameters the config asks for, from its shapes (an estimate within a small factor: matrices
// only), so that a width or depth this machine cannot hold is refused before anything allocates.
double estimated_parameters(const ModelConfig& c) {
  const double d = c.width, L = c.depth;
  const double r = std::max(1, c.mlp_ratio);
  if (c.kind == "gpt") return L * (4 + 2 * r) * d * d + 2.0 * c.vocab * d + static_cast<double>(c.seq_len) * d;
  if (c.kind == "vit") {
    const double patch_in = static_cast<double>(c.channels) * c.patch * c.patch;
    return L * (4 + 2 * r) * d * d + patch_in * d + static_cast<double>(c.n_classes) * d;
  }
  if (c.kind == "mlp") return L * d * d + static_cast<double>(c.in_dim + c.n_classes) * d;
  if (c.kind == "resmlp") return L * c.block_depth * d * d + static_cast<double>(c.in_dim + c.n_classes) * d;
  return L * d * d + 2.0 * c.vocab * d;  // bigram
}

// This machine's memory in bytes (0 where the system does not say).
double physical_memory() {
  const double pages = static_cast<double>(::sysconf(_SC_PHYS_PAGES)), page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  return pages > 0 && page > 0 ? pages * page : 0.0;
}

void check_fits_in_memory(const ModelConfig& cfg) {
  const double have = physical_memory();
  if (!(have > 0)) return;
  // Training holds each parameter about 4 times (value, gradient, two Adam moments) in float32.
  const double need = 16.0 * estimated_parameters(cfg);
  if (need > have)
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
  const bool language = cfg.kind == "gpt" || cfg.kind == "bigram";
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
  check_fits_in_memory(cfg);
  if (ctx.width != cfg.width || ctx.depth != cfg.depth)
    throw std::invalid_argument(fmt::format("build_model: ScaleContext shape {}x{} differs from the model's {}x{}",
                                            ctx.width, ctx.depth, cfg.width, cfg.depth));
  if (ctx.members > 0 && (cfg.kind == "vit" || cfg.kind == "mlp"))
    throw std::invalid_argument("build_model: batched ensembles take bigram, resmlp and gpt (train/ensemble.h)");
  if (cfg.kind == "bigram") return make_bigram(cfg, ctx, hp);
  if (cfg.kind == "resmlp") return make_resmlp(cfg, ctx, hp);
  if (cfg.kind == "mlp") return make_mlp(cfg, ctx, hp);
  if (cfg.kind == "gpt") return make_gpt(cfg, ctx, hp);
  return make_vit(cfg, ctx, hp);
}

std::shared_ptr<Model> build_model_seeded(uint64_t seed, const ModelConfig& cfg, const ScaleContext& ctx,
                                          const Hyper& hp) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(seed);
  return build_model(cfg, ctx, hp);
}

}  // namespace scaleinv
