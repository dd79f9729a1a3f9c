#pragma once
// Any row of the table on a model scaleinv did not write (issue 15). No torch here: the plan is
// computed from names, shapes and init RMS values, so the CLI, the C++ API (engine/adapt/apply_module.h)
// and the Python module (python/) share it.
//
// Roles (like microsoft/mup's base shapes, with depth). Every tensor is compared at three shapes:
// the base model (the width the hyperparameters were tuned at), a delta model (a second width: it
// only tells which dimensions grow) and the target model. With fan_out and fan_in read from the
// tensor's layout (out_in: Linear/Conv [out, in, ...]; in_out: Embedding [num, dim]):
//   fan-out and fan-in grow -> hidden       fan-out only -> embedding
//   fan-in only             -> readout      neither, or a 1-D tensor -> vector
// An override (a regular expression searched in the name, first match wins) sets the role; it must
// fit the shape (an embedding whose fan-in grows is an error naming the tensor). A tensor missing
// from the base or delta model is an error naming it. A bare parameter (layout Bare) with two or more growing dimensions is
// hidden (fan-out: the first growing dimension, fan-in: the last), with one or none vector-like.
// Growing dimensions may grow by different factors (a SwiGLU hidden size rounded up to a multiple):
// each tensor's exponents use its own ratio, the fan-in's for hidden, attention and readout tensors,
// the fan-out's for embeddings and vectors; a dimension that shrinks from the base is an error.
// Blocks: the first integer component of a name ("blocks.3.attn.weight") names a block of a
// container ("blocks"); an index is a repeated block when another index of the same container holds
// exactly the same tensors (names after the index, and shapes): nn.Sequential's layers "0", "2" of
// different shapes are not blocks. The depth multiplier k is the target's number of blocks over
// the base's (one k for every container, else an error).
//
// Application (seed 000 eq. 28): a row (a, b, c) is shifted by theta = -a to a' = 0, so the user's
// forward needs no multiplier: b' = b + a, c' = c + a (Adam-like, Muon), c + 2a (SGD), eps' =
// eps - a (brain/param/table.h shift: the stored tensor's gradient grows by m^a without the multiplier).
// Then each tensor gets, with m its width ratio (OwnRole::m) and k the depth multiplier (tensor_scale
// of that row):
//   init factor  base_rms * m^-b' / rms     (the tensor's RMS becomes the base model's, scaled by
//                                            the table; a zero tensor stays zero)
//   lr, wd, eps  m^-c' k^-depth_lr, m^-wd k^-depth_wd, m^-eps' k^-depth_eps (depth: in-block only)
// Exactness: the shift is exact for SGD, Adam(W) with decoupled decay and Muon. Refused, naming the
// cause: Adafactor (its relative step and eps2 floor follow RMS(W), which the shift changes);
// coupled L2 decay in Adam (optimizer "adam" with weight decay: the decay enters Adam's
// normalisation); a tied tensor whose uses take two roles other than embedding and readout (see
// OwnTie for the tied embedding). Not expressible as a per-tensor scale
// and so returned as notes the user's forward must apply: the residual branch multiplier k^-branch
// and the attention logit scale d_head^-attn_logit.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "brain/param/table.h"

namespace scaleinv {

// How a tensor's dimensions read, from the layer that owns it: OutIn (Linear, Conv, RNN weights,
// MultiheadAttention's packed in_proj_weight [3d, d]), InOut (Embedding [num, dim], ConvTranspose),
// Vector (norm gains, biases), Bare (a parameter no known layer owns: its growing dimensions decide,
// see infer_roles).
enum class TensorLayout : int { OutIn = 0, InOut, Vector, Bare };
const char* layout_name(TensorLayout l);  // "out_in", "in_out", "vector", "bare"

// One tensor of one of the three models.
struct OwnTensor {
  std::string name;
  std::vector<int64_t> shape;
  TensorLayout layout = TensorLayout::OutIn;  // 1-D tensors are read as Vector whatever this says
  double rms = 0;                             // RMS at init (the base and target models)
};

struct RoleOverride {
  std::string pattern;  // an RE2 regular expression, searched in the tensor name (one that matches none is refused)
  Role role = Role::Hidden;
};

// A second name of a tensor (tied weights): `name` reads the tensor `shares` (a target tensor's
// name) under its own layer's layout (nanoGPT: lm_head.weight, an nn.Linear, shares
// transformer.wte.weight, an nn.Embedding).
struct TiedUse {
  std::string name, shares;
  TensorLayout layout = TensorLayout::OutIn;
};

struct OwnModelSpec {
  std::vector<OwnTensor> base, delta, target;
  std::vector<RoleOverride> overrides;
  std::vector<TiedUse> tied;      // the target's second names (base and delta tie the same way)
  std::string where = "model";    // what errors name as the file ("model", a TOML file, ...)
  // Whether the model has attention (nullopt: not known): the attention-logit note is given only
  // where it can apply.
  std::optional<bool> attention;
};

// The role of one target tensor and how it was found.
struct OwnRole {
  std::string name;
  Role role = Role::Vector;
  bool in_block = false;
  std::string canonical;  // the name with the block index replaced by '*' (how it matched the base)
  int64_t fan_in = 1, fan_out = 1, base_fan_in = 1, base_fan_out = 1;
  double m = 1;           // the width ratio its exponents use (fan-in's: hidden, attention, readout;
                          // fan-out's: embedding, vector)
  std::string why;        // "fan-in and fan-out grow", "override 'head' -> readout", ...
};

// A tie as planned: each use classified by its own layout. Uses of the same role share that
// role's plan. An embedding read again as a readout (tied embeddings): the tensor takes the
// embedding's init, LR, WD and eps, and the readout use's output is multiplied in the forward by
// m^-exponent, exponent = (a_r + b_r) - (a_e + b_e) (init-matched, as the zoo's tied_readout_factor;
// a + b is invariant under seed 000 eq. 28's shift): the readout use starts at the untied readout's
// init, so its forward (logits at init), every backward through it (h', W' at step 0) and the
// logit update W_r,0 dh it drives scale as the table's readout. Its own update then scales as
// m^-(exponent + c_e') rather than the readout's m^-c_r'; the two agree where b_r - b_e = (c_r - c_e) / q
// (q = 2 for SGD): every mup-like row. Where they differ (standard, sp, ntk) the update-matched
// exponent (a_r - a_e) + (c_r - c_e) / q was measured to break the table's h' and W' at step 0 on
// every layer and, under sp, to turn the model into mup (tests/python/test_real_modules.py).
// Any other pair of roles is an error naming the tie.
struct OwnTie {
  std::string tensor;       // the target tensor's (first) name
  std::string use;          // the second name
  Role tensor_role = Role::Vector, use_role = Role::Vector;
  std::string readout;      // the name read as a readout where the roles differ ("" otherwise)
  double exponent = 0;      // of the readout use's forward multiplier
  double multiplier = 1;    // m^-exponent
};

struct OwnRoles {
  std::vector<OwnRole> tensors;  // target order
  std::vector<OwnTie> ties;
  double m = 1;                  // the first growing dimension's ratio (target / base); each tensor has its own
  double k = 1;                  // depth multiplier (target blocks / base blocks)
  int base_blocks = 0, blocks = 0;
};

// Throws UserError(spec.where, <tensor name>, problem, fix) as the header says.
OwnRoles infer_roles(const OwnModelSpec& spec);

struct OwnTensorPlan {
  std::string name;
  Role role = Role::Vector;
  bool in_block = false;
  double init = 1;  // multiply the target tensor by this
  double lr = 1, wd = 1, eps = 1;
};

struct OwnPlan {
  ParamTable table;      // the table asked for
  ParamTable shifted;    // the same row with a' = 0 (what is applied)
  OptFamily family = OptFamily::Adam;
  OwnRoles roles;
  std::vector<OwnTensorPlan> tensors;
  std::vector<OwnTie> ties;      // roles.ties with the readout multipliers worked out
  double branch_multiplier = 1;  // k^-branch: the user's residual branches must carry it
  std::vector<std::string> notes;  // what the user's forward must do, where the shift is not exact
};

// optimizer: a scaleinv optimizer kind ("sgd", "adam", "adamw", "sign", "muon") or the Python
// module's torch ones (the same names). weight_decay > 0 with "adam" is refused (coupled L2).
OwnPlan plan_own_model(const ParamTable& table, const std::string& optimizer, double weight_decay,
                       const OwnModelSpec& spec);

// JSON forms for the Python module: spec {"base": [{"name", "shape", "layout", "rms"}], "delta",
// "target", "overrides": [{"pattern", "role"}], "tied": [{"name", "shares", "layout"}], "attention"
// (bool, optional)}; plan {"m", "k", "table", "shifted", "tensors": [{"name", "role", "in_block",
// "why", "init", "lr", "wd", "eps", "fan_in", "fan_out", "m"}], "ties": [{"tensor", "use",
// "tensor_role", "use_role", "readout", "exponent", "multiplier"}], "branch_multiplier", "notes"}.
OwnModelSpec own_spec_from_json(const nlohmann::json& j);
nlohmann::json own_plan_to_json(const OwnPlan& p);

}  // namespace scaleinv
