// The zoo's rows (brain/models/model_kinds.h). One row per model; a new model is a new row here, its file
// in src/engine/models/ and its builder in factory.cpp.
#include "brain/models/model_kinds.h"

#include <algorithm>
#include <cmath>
#include <ranges>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/util/errors.h"

namespace scaleinv {

namespace {

// A coefficient or rate that may be 0 but not negative, NaN or infinite.
void require_finite_non_negative(double value, const char* field, const char* fix) {
  if (!(std::isfinite(value) && value >= 0))
    throw UserError("config", field, fmt::format("{} is not a finite number >= 0", value), fix);
}

// The coordinate check's probes (cmd_coordcheck): language models see 2 x 8 tokens of a 32-token
// Markov chain; feature models 32 and vit 16 Fashion-MNIST images (10 classes).
const std::vector<std::string> kTokenProbe = {"data.source=\"markov\"", "data.vocab=32", "data.markov_length=20000",
                                              "model.seq_len=8", "train.batch_size=2"};
// `scaleinv scales`: language models read 8 x 32 tokens of the KJV.
const std::vector<std::string> kTokenScales = {"data.source=\"kjv\"", "model.seq_len=32", "model.vocab=256",
                                               "train.batch_size=8"};
const std::vector<std::string> kFlatImages = {"data.source=\"fashion_mnist\"", "data.flatten=true", "model.in_dim=784",
                                              "model.activation=\"relu\""};

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---- bigram: seed 000 eq. 1, App. C (a depth-L chain of [d, d] matrices between two lookups) ----
void validate_bigram(const ModelConfig&) {}
double parameters_bigram(const ModelConfig& c) { return c.depth * double(c.width) * c.width + 2.0 * c.vocab * c.width; }
TheoryShape theory_bigram(const ModelConfig& mc, int depth) {
  return {depth, mc.rmsnorm,
          fmt::format("bigram: rows of width_theory(L = {}{}) one to one", depth, mc.rmsnorm ? ", RMSNorm" : "")};
}

// ---- mlp: the muP paper's MLP, in_dim -> w -> ... -> n_classes ----
void validate_mlp(const ModelConfig& c) {
  require_positive(c.in_dim, "model.in_dim");
  require_positive(c.n_classes, "model.n_classes");
}
double parameters_mlp(const ModelConfig& c) {
  const double d = c.width;
  return c.depth * d * d + static_cast<double>(c.in_dim + c.n_classes) * d;
}
TheoryShape theory_mlp(const ModelConfig&, int depth) {
  return {depth, false, fmt::format("mlp: rows of width_theory(L = {}) one to one (a dense input as W_0)", depth)};
}

// ---- resmlp: seed 004's residual MLP ----
void validate_resmlp(const ModelConfig& c) {
  require_positive(c.in_dim, "model.in_dim");
  require_positive(c.n_classes, "model.n_classes");
  if (c.block_depth != 1 && c.block_depth != 2)
    throw UserError("config", "model.block_depth", fmt::format("block_depth must be 1 or 2, got {}", c.block_depth),
                    "use 1 (seed 004 eq. 1) or 2 (seed 004 App. K)");
}
double parameters_resmlp(const ModelConfig& c) {
  const double d = c.width;
  return c.depth * c.block_depth * d * d + static_cast<double>(c.in_dim + c.n_classes) * d;
}
TheoryShape theory_resmlp(const ModelConfig& mc, int depth) {
  TheoryShape s;
  s.L = mc.pre_ln ? mc.block_depth : depth * mc.block_depth;
  s.note = mc.pre_ln ? fmt::format("residual stream = hidden activations of width_theory(L = {}): each block is "
                                   "a {}-matrix chain on a normalised input",
                                   s.L, mc.block_depth)
                     : fmt::format("residual stream = hidden activations of width_theory(L = {}): without "
                                   "pre-LN the blocks chain",
                                   s.L);
  return s;
}

// ---- transformers (gpt, vit, llama): every sublayer reads a normalised stream and applies two
// matrices (v then o; fc then proj, or SwiGLU's up/gate then down) before adding to it: the stream
// follows the hidden activations of an L = 2 chain.
TheoryShape theory_transformer(const ModelConfig&, int) {
  return {2, false,
          "residual stream = hidden activations of width_theory(L = 2): each sublayer is a 2-matrix chain "
          "(attn v,o; mlp fc,proj) on a normalised input"};
}
TheoryShape theory_llama(const ModelConfig&, int) {
  return {2, false,
          "residual stream = hidden activations of width_theory(L = 2): each sublayer is a 2-matrix chain "
          "(attn v,o; SwiGLU gate and up, then down) on a normalised input"};
}
void validate_gpt(const ModelConfig& c) {
  require_positive(c.mlp_ratio, "model.mlp_ratio");
  require_positive(c.seq_len, "model.seq_len");
}
double parameters_gpt(const ModelConfig& c) {
  const double d = c.width, r = std::max(1, c.mlp_ratio);
  return c.depth * (4 + 2 * r) * d * d + 2.0 * c.vocab * d + static_cast<double>(c.seq_len) * d;
}
void validate_vit(const ModelConfig& c) {
  require_positive(c.mlp_ratio, "model.mlp_ratio");
  require_positive(c.n_classes, "model.n_classes");
  require_positive(c.image_size, "model.image_size");
  require_positive(c.channels, "model.channels");
  require_positive(c.patch, "model.patch");
  if (c.image_size % c.patch != 0)
    throw UserError("config", "model.patch", fmt::format("image_size {} is not divisible by patch {}", c.image_size, c.patch),
                    "use a patch size that divides the image size (28: 4, 7, 14)");
}
double parameters_vit(const ModelConfig& c) {
  const double d = c.width, r = std::max(1, c.mlp_ratio);
  const double patch_in = static_cast<double>(c.channels) * c.patch * c.patch;
  return c.depth * (4 + 2 * r) * d * d + patch_in * d + static_cast<double>(c.n_classes) * d;
}
void validate_llama(const ModelConfig& c) {
  require_positive(c.seq_len, "model.seq_len");
  if (c.block != "pre")
    throw UserError("config", "model.block", fmt::format("llama is a pre-norm decoder, got block '{}'", c.block),
                    "set model.block = \"pre\" (or leave it out)");
  if (c.kv_heads < 0)
    throw UserError("config", "model.kv_heads", fmt::format("kv_heads must be >= 0, got {}", c.kv_heads),
                    "use 0 (as many key/value heads as query heads) or a count that divides the heads");
  if (c.ffn_multiple <= 0)
    throw UserError("config", "model.ffn_multiple", fmt::format("must be a positive integer, got {}", c.ffn_multiple),
                    "set model.ffn_multiple > 0 (the SwiGLU hidden width is rounded up to a multiple of it)");
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 1))
    throw UserError("config", "model.rope_theta", fmt::format("{} is not a finite number > 1", c.rope_theta),
                    "use e.g. model.rope_theta = 10000.0");
}
double parameters_llama(const ModelConfig& c) {
  const double d = c.width, hidden = swiglu_hidden(c.width, c.ffn_multiple);
  return c.depth * (4 * d * d + 3 * hidden * d) + (c.tied ? 1.0 : 2.0) * c.vocab * d;
}

// ---- moe: the Llama decoder with a mixture of SwiGLU experts as each block's MLP (engine/models/moe.cpp).
// The stream follows the same L = 2 chain: each token's MLP output is a gate-weighted sum of k
// SwiGLU chains (gate and up, then down) on the normalised stream.
TheoryShape theory_moe(const ModelConfig&, int) {
  return {2, false,
          "residual stream = hidden activations of width_theory(L = 2): each sublayer is a 2-matrix chain "
          "(attn v,o; each chosen expert's gate and up, then down) on a normalised input; router logits = a "
          "readout of the normalised stream (the router row)"};
}
void validate_moe(const ModelConfig& c) {
  validate_llama(c);
  if (c.experts < 1)
    throw UserError("config", "model.experts", fmt::format("a mixture needs at least one expert, got {}", c.experts),
                    "set model.experts >= 1 (e.g. 8)");
  if (c.top_k < 1 || c.top_k > c.experts)
    throw UserError("config", "model.top_k", fmt::format("top_k {} is not between 1 and the {} experts", c.top_k, c.experts),
                    fmt::format("set model.top_k between 1 and model.experts ({})", c.experts));
  require_positive(c.granularity, "model.granularity");
  require_finite_non_negative(c.aux_coef, "model.aux_coef", "use e.g. model.aux_coef = 0.01 (0: no balance loss)");
  require_finite_non_negative(c.bias_rate, "model.bias_rate", "use e.g. model.bias_rate = 0.001 (0: no selection bias)");
}
double parameters_moe(const ModelConfig& c) {
  const double d = c.width, n = expert_hidden(c.width, c.ffn_multiple, c.granularity);
  const double ffn = c.experts * 3 * n * d + c.experts * d + (c.shared_expert ? 3 * n * d : 0.0);
  return c.depth * (4 * d * d + ffn) + (c.tied ? 1.0 : 2.0) * c.vocab * d;
}

std::vector<ModelKind> build_model_rows() {
  std::vector<ModelKind> rows;
  auto add = [&](ModelKind k) { rows.push_back(std::move(k)); };
  {
    ModelKind k;
    k.name = "bigram";
    k.summary = "token lookup, a chain of [d, d] matrices, readout (seed 000 eq. 1)";
    k.input = ModelInput::Tokens;
    k.ensemble = true;
    k.unit_scaling = true;
    k.coordcheck_defaults = kTokenProbe;
    k.scales_defaults = kTokenScales;
    k.alignment = AlignmentView::EveryLayer;
    k.validate = validate_bigram;
    k.parameters = parameters_bigram;
    k.theory_shape = theory_bigram;
    add(k);
  }
  {
    ModelKind k;
    k.name = "mlp";
    k.summary = "the muP paper's MLP: in_dim -> w -> ... -> n_classes";
    k.input = ModelInput::Features;
    k.unit_scaling = true;
    k.coordcheck_defaults = plus(kFlatImages, {"model.depth=1", "train.batch_size=32"});
    k.scales_defaults = plus(kFlatImages, {"train.batch_size=32"});
    k.validate = validate_mlp;
    k.parameters = parameters_mlp;
    k.theory_shape = theory_mlp;
    add(k);
  }
  {
    ModelKind k;
    k.name = "resmlp";
    k.summary = "residual MLP of seed 004 (branch multiplier, optional pre-LN)";
    k.input = ModelInput::Features;
    k.ensemble = true;
    k.unit_scaling = true;
    k.stream_prefix = "x";
    k.depth_rows = true;
    k.chains_without_pre_ln = true;
    k.coordcheck_defaults = plus(kFlatImages, {"model.pre_ln=true", "train.batch_size=32"});
    k.scales_defaults = plus(kFlatImages, {"model.pre_ln=true", "train.batch_size=32"});
    k.validate = validate_resmlp;
    k.parameters = parameters_resmlp;
    k.theory_shape = theory_resmlp;
    add(k);
  }
  {
    ModelKind k;
    k.name = "gpt";
    k.summary = "GPT-2-style decoder: LayerNorm, GELU MLP, learned positions";
    k.input = ModelInput::Tokens;
    k.ensemble = true;
    k.attention = true;
    k.unit_scaling = true;
    k.coordcheck_defaults = kTokenProbe;
    k.scales_defaults = kTokenScales;
    k.alignment = AlignmentView::Readout;
    k.init_stats = true;
    k.transport = true;
    k.validate = validate_gpt;
    k.parameters = parameters_gpt;
    k.theory_shape = theory_transformer;
    add(k);
  }
  {
    ModelKind k;
    k.name = "vit";
    k.summary = "vision transformer on image patches";
    k.input = ModelInput::Images;
    k.attention = true;
    k.unit_scaling = true;
    k.coordcheck_defaults = {"data.source=\"fashion_mnist\"", "train.batch_size=16"};
    k.scales_defaults = {"data.source=\"fashion_mnist\"", "train.batch_size=32"};
    k.init_stats = true;
    k.validate = validate_vit;
    k.parameters = parameters_vit;
    k.theory_shape = theory_transformer;
    add(k);
  }
  {
    ModelKind k;
    k.name = "llama";
    k.summary = "Llama-style decoder: RMSNorm, SwiGLU, rotary positions, grouped-query attention";
    k.input = ModelInput::Tokens;
    k.attention = true;
    k.gqa = true;
    k.coordcheck_defaults = kTokenProbe;
    k.scales_defaults = kTokenScales;
    k.validate = validate_llama;
    k.parameters = parameters_llama;
    k.theory_shape = theory_llama;
    add(k);
  }
  {
    ModelKind k;
    k.name = "moe";
    k.summary = "mixture of experts: the Llama decoder with top-k routed SwiGLU experts in each block";
    k.input = ModelInput::Tokens;
    k.attention = true;
    k.gqa = true;
    k.experts = true;
    k.coordcheck_defaults = kTokenProbe;
    k.scales_defaults = kTokenScales;
    k.validate = validate_moe;
    k.parameters = parameters_moe;
    k.theory_shape = theory_moe;
    add(k);
  }
  return rows;
}

}  // namespace

void require_positive(int value, const char* field) {
  if (value <= 0)
    throw UserError("config", field, fmt::format("must be a positive integer, got {}", value),
                    fmt::format("set {} > 0", field));
}

int swiglu_hidden(int width, int multiple) {
  const long long raw = (8LL * width + 2) / 3;  // round(8 d / 3)
  const long long m = std::max(1, multiple);
  return static_cast<int>((raw + m - 1) / m * m);
}

int expert_hidden(int width, int multiple, int granularity) {
  const long long m = std::max(1, multiple), g = std::max(1, granularity);
  const long long n = (swiglu_hidden(width, multiple) + g - 1) / g;
  return static_cast<int>((n + m - 1) / m * m);
}

const std::vector<ModelKind>& model_kinds() {
  static const std::vector<ModelKind> rows = build_model_rows();
  return rows;
}

std::string model_kind_list() {
  return model_kind_list([](const ModelKind&) { return true; });
}

std::string model_kind_list(bool (*pred)(const ModelKind&)) {
  auto names = model_kinds() | std::views::filter(pred) | std::views::transform(&ModelKind::name);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string data_fit_fix() {
  return fmt::format("language models ({}) take kjv/text/markov; {} take fashion_mnist",
                     model_kind_list([](const ModelKind& k) { return k.language(); }),
                     model_kind_list([](const ModelKind& k) { return !k.language(); }));
}

const ModelKind* find_model_kind(const std::string& name) {
  for (const ModelKind& k : model_kinds())
    if (k.name == name) return &k;
  return nullptr;
}

const ModelKind& model_kind(const std::string& name, const std::string& file, const std::string& field) {
  if (const ModelKind* k = find_model_kind(name)) return *k;
  throw UserError(file, field, fmt::format("unknown model kind '{}'", name), "use one of " + model_kind_list());
}

}  // namespace scaleinv
