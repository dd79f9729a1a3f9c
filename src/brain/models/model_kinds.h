#pragma once
// Model kinds as data: one row per model of the zoo, read by every caller that needs to know what a
// model is (which data it takes, whether it batches into an ensemble, what a coordinate check of it
// defaults to, which theory its measurements follow). No code outside src/brain/models/ and src/engine/models/ compares a kind's
// name (Structure.NoModelKindComparisons counts them); it asks model_kind(name) for a trait.
//
// Adding a model: its file in src/engine/models/ (the torch module and its make_ function), one row in
// model_kinds.cpp (the traits, torch-free: the Python extension and the coordinate check's judging
// read them), and its make_ function in factory.cpp's builder list (a test builds every row).
//
// Torch-free: the brain (docs/design.md "Build shape") builds this file.
#include <string>
#include <vector>

#include "brain/models/model_config.h"

namespace scaleinv {

// What a model reads.
enum class ModelInput {
  Tokens,    // [B, T] int64 ids: a language model (kjv, text, markov); samplable
  Features,  // [B, in_dim] floats (fashion_mnist, flattened)
  Images,    // [B, C, H, W] (fashion_mnist)
};

// How the residual stream of a model follows the width theory of seed 000 (engine/coordcheck/coordcheck.h):
// its hidden activations behave as those of a depth-L chain (L = 1 for a single matrix).
struct TheoryShape {
  int L = 1;
  bool rmsnorm = false;  // the chain normalises each hidden activation (seed 000 Lemma E.3)
  std::string note;      // one line for the check's report
};

// How `scaleinv diagnose alignment` reads a model (engine/diagnostics/alignment.cpp): every layer of the chain
// (its recorded h1.. and layers.l.weight) or only the readout (its input through ln_f).
enum class AlignmentView { None, EveryLayer, Readout };

struct ModelKind {
  std::string name;
  std::string summary;                  // one line: what the model is
  ModelInput input = ModelInput::Tokens;
  bool ensemble = false;                // trains as a batched ensemble (engine/train/ensemble.h)
  bool attention = false;               // has multi-head attention (model.head_dim / n_heads must split the width)
  bool gqa = false;                     // grouped-query attention: reads model.kv_heads
  bool experts = false;                 // a mixture of experts: reads model.experts, top_k, ... (engine/models/moe.cpp)
  bool unit_scaling = false;            // has unit-scaled ops (ParamTable::unit, src/engine/unit/)
  // Coordinate check: the recorded names of the residual stream ("block1", ...) start with this;
  // depth_rows: the check keeps a row per depth of the stream (resmlp's x_l).
  std::string stream_prefix = "block";
  bool depth_rows = false;
  // Without a normalisation before each block (model.pre_ln false) the blocks chain, and a branch
  // exponent below 1/2 gives no depth power law (seed 004 4.2): resmlp.
  bool chains_without_pre_ln = false;
  // The `--set` lines a coordinate check (`scaleinv coordcheck`) and `scaleinv scales` use without
  // --config: a small probe (engine/coordcheck/coordcheck.h: the check is sharp for widths well above the
  // probe's size).
  std::vector<std::string> coordcheck_defaults;
  std::vector<std::string> scales_defaults;
  // Kind-specific checks of a config (UserError, file "config", field "model.*"); the common ones
  // (width, depth, activation, placement, heads) are validate_model_config's (engine/models/model.h).
  void (*validate)(const ModelConfig&) = nullptr;
  // Parameters the config asks for (matrices only: an estimate within a small factor).
  double (*parameters)(const ModelConfig&) = nullptr;
  // The chain whose hidden activations the stream follows, at `depth` blocks (engine/coordcheck/coordcheck.h).
  TheoryShape (*theory_shape)(const ModelConfig&, int depth) = nullptr;

  // The `scaleinv diagnose` measurements that build this model (engine/diagnostics/diagnostics.h), each reading
  // tensors by the names this model records: alignment (above), init statistics (init_stats.cpp), the
  // post-LN transport of its blocks (transport.cpp: TransformerBlock's LayerNorms).
  AlignmentView alignment = AlignmentView::None;
  bool init_stats = false;
  bool transport = false;

  bool language() const { return input == ModelInput::Tokens; }
};

// UserError (file "config", field `field`) unless value > 0.
void require_positive(int value, const char* field);

// The SwiGLU hidden width of a Llama MLP at width d: round(8 d / 3) rounded up to a multiple of
// `multiple` (model.ffn_multiple, default 16): 64 -> 176, 128 -> 352, 256 -> 688, 512 -> 1376. It
// grows with d (the fan-in of the down projection, the fan-out of gate and up), so the table's
// hidden row scales all three.
int swiglu_hidden(int width, int multiple);

// The hidden width of one expert of a mixture (model.granularity G): swiglu_hidden(width) / G,
// rounded up to a multiple of `multiple` (64, G = 1 -> 176; G = 4 -> 48).
int expert_hidden(int width, int multiple, int granularity);

// Every row, in the order error messages list them.
const std::vector<ModelKind>& model_kinds();
// The row of `name`; UserError (file `file`, field `field`) naming the kinds when there is none.
const ModelKind& model_kind(const std::string& name, const std::string& file = "config",
                            const std::string& field = "model.kind");
// The row of `name`, or null (for code that must not throw on an unvalidated config).
const ModelKind* find_model_kind(const std::string& name);
// "bigram, mlp, resmlp, gpt, vit, ..." (for a fix line).
std::string model_kind_list();
// Names of the rows with a trait, e.g. "bigram, gpt" for language models.
std::string model_kind_list(bool (*pred)(const ModelKind&));

// The fix line for data that does not fit a model: "language models (bigram, gpt, llama) take
// kjv/text/markov; mlp, resmlp and vit take fashion_mnist".
std::string data_fit_fix();

}  // namespace scaleinv
