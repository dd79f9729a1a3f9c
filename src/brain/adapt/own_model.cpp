// Roles and the shifted plan for a model scaleinv did not write (see own_model.h).
#include "brain/adapt/own_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <re2/re2.h>

#include "brain/util/errors.h"
#include "brain/optim/optimizer_kinds.h"

namespace scaleinv {

const char* layout_name(TensorLayout l) {
  switch (l) {
    case TensorLayout::OutIn: return "out_in";
    case TensorLayout::InOut: return "in_out";
    case TensorLayout::Vector: return "vector";
    case TensorLayout::Bare: return "bare";
  }
  return "?";
}

namespace {

// The name split at its first integer component: container "blocks", index 3, rest "attn.weight".
struct BlockName {
  bool indexed = false;
  std::string container, rest;
  long index = 0;
};

BlockName block_name(const std::string& name) {
  BlockName b;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('.', start);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(start, end - start);
    if (!part.empty() && part.find_first_not_of("0123456789") == std::string::npos && part.size() < 10) {
      b.indexed = true;
      b.container = start == 0 ? "" : name.substr(0, start - 1);
      b.index = std::stol(part);
      b.rest = end < name.size() ? name.substr(end + 1) : "";
      return b;
    }
    start = end + 1;
  }
  return b;
}

std::string canonical_name(const BlockName& b) {
  return (b.container.empty() ? "" : b.container + ".") + "*" + (b.rest.empty() ? "" : "." + b.rest);
}

// Which tensors of one model sit in repeated blocks (see the header), and blocks per container.
struct Blocks {
  std::vector<bool> in_block;
  std::map<std::string, std::set<long>> indices;  // container -> every index seen
};

Blocks find_blocks(const std::vector<OwnTensor>& ts) {
  // An index of a container is a block when another index holds exactly the same tensors (names
  // after the index, and shapes): nn.Sequential's layers of different shapes are not blocks.
  using Signature = std::set<std::pair<std::string, std::vector<int64_t>>>;
  std::map<std::pair<std::string, long>, Signature> sig;
  std::vector<BlockName> names;
  Blocks b;
  for (const OwnTensor& t : ts) {
    names.push_back(block_name(t.name));
    const BlockName& n = names.back();
    if (n.indexed) {
      sig[{n.container, n.index}].insert({n.rest, t.shape});
      b.indices[n.container].insert(n.index);
    }
  }
  std::map<std::pair<std::string, Signature>, int> count;
  for (const auto& [key, s] : sig) ++count[{key.first, s}];
  for (size_t i = 0; i < ts.size(); ++i) {
    const BlockName& n = names[i];
    b.in_block.push_back(n.indexed && count[{n.container, sig[{n.container, n.index}]}] >= 2);
  }
  return b;
}

// fan_out, fan_in of a shape under a layout.
std::pair<int64_t, int64_t> fans(const std::vector<int64_t>& s, TensorLayout l) {
  if (s.size() <= 1 || l == TensorLayout::Vector) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return {n, 1};
  }
  int64_t rest = 1;
  for (size_t i = 1; i < s.size(); ++i) rest *= s[i];
  return l == TensorLayout::OutIn ? std::make_pair(s[0], rest) : std::make_pair(rest, s[0]);
}

const OwnTensor* find_match(const std::vector<OwnTensor>& ts, const Blocks& blocks, const OwnTensor& t,
                            bool in_block) {
  for (const OwnTensor& o : ts)
    if (o.name == t.name) return &o;
  if (!in_block) return nullptr;
  const std::string canon = canonical_name(block_name(t.name));
  const OwnTensor* any = nullptr;
  for (size_t i = 0; i < ts.size(); ++i) {
    const BlockName b = block_name(ts[i].name);
    if (!b.indexed || canonical_name(b) != canon || ts[i].shape.size() != t.shape.size()) continue;
    if (blocks.in_block[i]) return &ts[i];
    if (!any) any = &ts[i];
  }
  return any;
}

// Does a role fit a growth pattern (fan_out grows, fan_in grows) of a matrix?
bool role_fits(Role r, bool out_grows, bool in_grows) {
  switch (r) {
    case Role::Embedding: return out_grows && !in_grows;
    case Role::Readout:
    case Role::Router: return in_grows && !out_grows;  // fan-out fixed (vocabulary, classes, experts)
    case Role::Vector: return !(out_grows && in_grows);
    default: return out_grows && in_grows;  // hidden and attention matrices
  }
}

Role role_from_growth(bool out_grows, bool in_grows) {
  if (out_grows && in_grows) return Role::Hidden;
  if (out_grows) return Role::Embedding;
  if (in_grows) return Role::Readout;
  return Role::Vector;
}

// The spec's refusals before anything is matched: no tensors.
void check_spec(const OwnModelSpec& spec) {
  if (spec.target.empty())
    throw UserError(spec.where, "parameters", "the model has no trainable tensors", "pass a model with parameters");
}

// The overrides' patterns, compiled in order (UserError for one that is not a regular expression,
// or one that matches no tensor of the target: a typo would otherwise be ignored). RE2, not
// std::regex: RE2 matches in time linear in the name and never recurses on the input, where
// libstdc++'s std::regex recurses once per character and a pattern such as ^(a|b)*$ against a long
// name overflows the stack, killing the process that loaded the library (issue 38).
using Patterns = std::vector<std::unique_ptr<RE2>>;

bool matches(const RE2& re, const std::string& name) { return RE2::PartialMatch(name, re); }

Patterns compile_overrides(const OwnModelSpec& spec) {
  Patterns overrides;
  RE2::Options opts;
  opts.set_log_errors(false);
  for (const RoleOverride& o : spec.overrides) {
    auto re = std::make_unique<RE2>(o.pattern, opts);
    if (!re->ok())
      throw UserError(spec.where, "overrides", fmt::format("'{}' is not a regular expression ({})", o.pattern, re->error()),
                      "give an RE2 pattern (Python re syntax without backreferences or lookaround)");
    const bool hit = std::any_of(spec.target.begin(), spec.target.end(), [&](const OwnTensor& t) { return matches(*re, t.name); }) ||
                     std::any_of(spec.tied.begin(), spec.tied.end(), [&](const TiedUse& u) { return matches(*re, u.name); });
    if (!hit)
      throw UserError(spec.where, "overrides",
                      fmt::format("'{}' matches no tensor of the model (its names look like '{}')", o.pattern,
                                  spec.target.front().name),
                      "correct the pattern (it is searched in each tensor's name), or drop it");
    overrides.push_back(std::move(re));
  }
  return overrides;
}

// The repeated blocks of each of the three models.
struct SpecBlocks {
  Blocks target, base, delta;
};

// The width multiplier as seen so far: the first growing dimension's ratio, and whether any grew.
struct WidthGrowth {
  std::optional<double> m;
  bool any = false;
};

// A target tensor's counterparts in the base and delta models, which must exist with its rank.
std::pair<const OwnTensor*, const OwnTensor*> find_counterparts(const OwnModelSpec& spec, const SpecBlocks& blocks,
                                                                const OwnTensor& t, bool by_block) {
  const OwnTensor* base = find_match(spec.base, blocks.base, t, by_block);
  const OwnTensor* delta = find_match(spec.delta, blocks.delta, t, by_block);
  if (!base || !delta)
    throw UserError(spec.where, t.name,
                    fmt::format("has no counterpart in the {} model", !base ? "base" : "delta"),
                    "build base and delta from the same code as the model, differing only in width (and depth)");
  if (base->shape.size() != t.shape.size() || delta->shape.size() != t.shape.size())
    throw UserError(spec.where, t.name,
                    fmt::format("has shape {} but {} in the base and {} in the delta model", t.shape, base->shape,
                                delta->shape),
                    "only the width (and the number of blocks) may differ between the three models");
  return {base, delta};
}

// One tensor's fans (target and base) under its layout, and which fans grow from base to delta.
// A bare parameter (no layer owns it) is laid out by its growing dimensions: with two or more, a
// matrix whose fan-out is the first growing dimension and fan-in the last ([E, 4d, d] expert
// weights: fan-out 4d, fan-in d, E a fixed batch dimension); with one or none, a vector (a class
// token [1, 1, d] or a position embedding [1, n, d] is added to the stream like a bias).
struct TensorFans {
  TensorLayout layout;
  int64_t fo, fi, bo, bi;
  bool out_grows, in_grows;
  std::string layout_why;  // how a bare parameter was read ("" otherwise)
};

TensorFans tensor_fans(const OwnTensor& t, const OwnTensor& base, const OwnTensor& delta) {
  TensorLayout layout = t.shape.size() <= 1 ? TensorLayout::Vector : t.layout;
  std::string why;
  if (layout == TensorLayout::Bare) {
    std::vector<size_t> grow;
    for (size_t d = 0; d < t.shape.size(); ++d)
      if (delta.shape[d] != base.shape[d]) grow.push_back(d);
    if (grow.size() >= 2) {
      const size_t o = grow.front(), i = grow.back();
      return TensorFans{TensorLayout::Bare, t.shape[o], t.shape[i], base.shape[o], base.shape[i], true, true,
                        fmt::format("a bare parameter with {} growing dimensions (fan-out dimension {}, fan-in "
                                    "dimension {})",
                                    grow.size(), o, i)};
    }
    layout = TensorLayout::Vector;
    why = grow.empty() ? "a bare parameter with no growing dimension: vector-like"
                       : "a bare parameter with one growing dimension: vector-like (added like a bias)";
  }
  auto [fo, fi] = fans(t.shape, layout);
  auto [bo, bi] = fans(base.shape, layout);
  auto [dout, din] = fans(delta.shape, layout);
  return TensorFans{layout, fo, fi, bo, bi, dout != bo, din != bi, why};
}

// Every dimension must either stay fixed in all three models or grow from the base (in delta and
// target alike, never shrinking). Growing dimensions may grow by different factors (a SwiGLU
// hidden size rounded up to a multiple grows by 1.83 when the width doubles): each tensor's
// exponents use the ratio of the dimension they are about (OwnRole::m). `growth` keeps the first.
void check_width_dims(const std::string& where, const OwnTensor& t, const OwnTensor& base, const OwnTensor& delta,
                      WidthGrowth& growth) {
  for (size_t d = 0; d < t.shape.size(); ++d) {
    const bool grows = delta.shape[d] != base.shape[d];
    if (!grows && t.shape[d] != base.shape[d])
      throw UserError(where, t.name,
                      fmt::format("dimension {} is {} here and {} in the base model, but the delta model keeps it "
                                  "({}): not a width dimension",
                                  d, t.shape[d], base.shape[d], delta.shape[d]),
                      "keep non-width dimensions (vocabulary, classes, kernel sizes) the same in all three models");
    if (grows && (delta.shape[d] < base.shape[d] || t.shape[d] < base.shape[d]))
      throw UserError(where, t.name,
                      fmt::format("dimension {} shrinks from the base model ({} in the base, {} in the delta, {} "
                                  "here)",
                                  d, base.shape[d], delta.shape[d], t.shape[d]),
                      "the base model is the smallest: build base at the width the hyperparameters were tuned at, "
                      "delta and the model at larger widths");
    if (grows) {
      growth.any = true;
      if (!growth.m) {
        growth.m = static_cast<double>(t.shape[d]) / static_cast<double>(base.shape[d]);
      }
    }
  }
}

// The role (and why) that the growth of the fans tells.
void role_by_growth(const TensorFans& f, OwnRole& r) {
  r.role = f.layout == TensorLayout::Vector ? Role::Vector : role_from_growth(f.out_grows, f.in_grows);
  r.why = !f.layout_why.empty() ? f.layout_why
          : f.layout == TensorLayout::Vector
              ? "a vector"
              : (f.out_grows && f.in_grows ? "fan-in and fan-out grow"
                                           : f.out_grows ? "fan-out grows" : f.in_grows ? "fan-in grows"
                                                                                        : "no fan grows");
}

// The width ratio a tensor's exponents use: the fan-in's for matrices read from their input
// (hidden, attention, readout: the LR and a readout's multiplier are about the fan-in), the
// fan-out's for an embedding and a vector (what grows is what they write).
double role_ratio(Role role, const TensorFans& f) {
  const bool by_fan_in = role != Role::Embedding && role != Role::Vector;
  return by_fan_in ? static_cast<double>(f.fi) / static_cast<double>(f.bi)
                   : static_cast<double>(f.fo) / static_cast<double>(f.bo);
}

// The first override whose pattern matches the name sets the role; a matrix whose layout reads the
// other way round for that role has its fans swapped; a role that fits neither reading is refused.
void apply_override(const OwnModelSpec& spec, const Patterns& overrides, const OwnTensor& t,
                    const OwnTensor& base, TensorFans& f, OwnRole& r) {
  const std::string& where = spec.where;
  for (size_t o = 0; o < overrides.size(); ++o) {
    if (!matches(*overrides[o], t.name)) continue;
    const Role want = spec.overrides[o].role;
    if (f.layout == TensorLayout::Vector && want != Role::Vector)
      throw UserError(where, t.name,
                      fmt::format("override '{}' -> {} on a vector (shape {}): only a matrix takes a matrix role",
                                  spec.overrides[o].pattern, role_name(want), t.shape),
                      "narrow the pattern so that it matches the matrices only");
    if (f.layout != TensorLayout::Vector && !role_fits(want, f.out_grows, f.in_grows)) {
      if (role_fits(want, f.in_grows, f.out_grows)) {  // the other reading of the layout fits: take it
        std::swap(f.fo, f.fi);
        std::swap(f.bo, f.bi);
        std::swap(f.out_grows, f.in_grows);
      } else {
        throw UserError(where, t.name,
                        fmt::format("override '{}' -> {} does not fit its shape {} (base {}): {}",
                                    spec.overrides[o].pattern, role_name(want), t.shape, base.shape, r.why),
                        "an embedding's fan-out grows, a readout's fan-in, a hidden matrix's both; fix the "
                        "pattern or the role");
      }
    }
    r.role = want;
    r.why = fmt::format("override '{}'", spec.overrides[o].pattern);
    break;
  }
}

// A mixture of experts (docs/moe.md) read from shapes: a matrix whose fan-in grows and fan-out does
// not, inside a repeated block, is a router (a model's readout is never inside one); a bare
// [E, out, in] parameter whose first dimension does not grow and whose other two do holds E
// experts' matrices. Under a dense table both roles are their default rows (the readout's and the
// hidden one's), so only the name changes; an MoE table gives them their own.
void mixture_role(const OwnTensor& t, const OwnTensor& base, const OwnTensor& delta, const TensorFans& f, OwnRole& r) {
  if (r.role == Role::Readout && r.in_block) {
    r.role = Role::Router;
    r.why = "fan-in grows, fan-out fixed, inside a repeated block: a router";
  } else if (r.role == Role::Hidden && f.layout == TensorLayout::Bare && t.shape.size() == 3 &&
             delta.shape[0] == base.shape[0] && f.out_grows && f.in_grows) {
    r.role = Role::Expert;
    r.why = "a bare [E, out, in] parameter (its first dimension fixed, the other two growing): E experts";
  }
}

// The role of target tensor i: matched to base and delta, classified by which fans grow, overridden.
OwnRole classify_tensor(const OwnModelSpec& spec, const Patterns& overrides, const SpecBlocks& blocks,
                        size_t i, WidthGrowth& growth) {
  const OwnTensor& t = spec.target[i];
  OwnRole r;
  r.name = t.name;
  r.in_block = blocks.target.in_block[i];
  const BlockName bn = block_name(t.name);
  r.canonical = r.in_block ? canonical_name(bn) : t.name;
  const auto [base, delta] = find_counterparts(spec, blocks, t, r.in_block || bn.indexed);
  TensorFans f = tensor_fans(t, *base, *delta);
  check_width_dims(spec.where, t, *base, *delta, growth);
  role_by_growth(f, r);
  mixture_role(t, *base, *delta, f, r);
  apply_override(spec, overrides, t, *base, f, r);
  r.m = role_ratio(r.role, f);
  r.fan_out = f.fo;
  r.fan_in = f.fi;
  r.base_fan_out = f.bo;
  r.base_fan_in = f.bi;
  return r;
}

// A tie (see OwnTie): the second use classified under its own layout against the shared tensor's
// base and delta counterparts. Equal roles share the plan; an embedding read as a readout makes the
// tensor an embedding (its fans and ratio those of the embedding reading) and names the readout use.
void classify_tie(const OwnModelSpec& spec, const Patterns& overrides, const SpecBlocks& blocks,
                  const TiedUse& u, OwnRoles& out) {
  size_t i = 0;
  while (i < spec.target.size() && spec.target[i].name != u.shares) ++i;
  if (i == spec.target.size())
    throw UserError(spec.where, u.name, fmt::format("is tied to '{}', which is not a tensor of the model", u.shares),
                    "name the tensor's first name (as named_parameters() gives it) in shares");
  OwnRole& owner = out.tensors[i];
  const auto [base, delta] = find_counterparts(spec, blocks, spec.target[i], owner.in_block);
  OwnTensor t = spec.target[i], b = *base, d = *delta;
  t.name = u.name;
  t.layout = b.layout = d.layout = u.layout;
  TensorFans f = tensor_fans(t, b, d);
  OwnRole use;
  use.name = u.name;
  role_by_growth(f, use);
  apply_override(spec, overrides, t, b, f, use);
  OwnTie tie{owner.name, u.name, owner.role, use.role, "", 0, 1};
  if (use.role != owner.role) {
    const bool emb_read_out = owner.role == Role::Embedding && use.role == Role::Readout;
    const bool out_read_emb = owner.role == Role::Readout && use.role == Role::Embedding;
    if (!emb_read_out && !out_read_emb)
      throw UserError(spec.where, u.name,
                      fmt::format("shares '{}' (shape {}): read as {} here ({}) and as {} there ({}), and one tensor "
                                  "cannot take two roles' init and LR",
                                  u.shares, spec.target[i].shape, role_name(use.role), use.why, role_name(owner.role),
                                  owner.why),
                      "untie it, or override one use's role to match (only an embedding read again as the readout "
                      "is planned as a tie)");
    tie.readout = emb_read_out ? u.name : owner.name;
    if (out_read_emb) {  // the tensor takes the embedding reading's fans and ratio
      owner.role = Role::Embedding;
      owner.fan_out = f.fo;
      owner.fan_in = f.fi;
      owner.base_fan_out = f.bo;
      owner.base_fan_in = f.bi;
      owner.m = role_ratio(Role::Embedding, f);
    }
    owner.why = fmt::format("tied: the embedding of '{}', read again as the readout by '{}' (its output gets the "
                            "readout's multiplier)",
                            emb_read_out ? owner.name : u.name, tie.readout);
    tie.tensor_role = Role::Embedding;
    tie.use_role = emb_read_out ? Role::Readout : Role::Embedding;
  }
  out.ties.push_back(std::move(tie));
}

// Depth: blocks of every container holding in-block tensors, target over base (sets k and the counts).
void infer_depth(const OwnModelSpec& spec, const Blocks& tb, const Blocks& bb, OwnRoles& out) {
  const std::string& where = spec.where;
  std::set<std::string> containers;
  for (size_t i = 0; i < spec.target.size(); ++i)
    if (tb.in_block[i]) containers.insert(block_name(spec.target[i].name).container);
  std::optional<double> k;
  for (const std::string& c : containers) {
    const auto tit = tb.indices.find(c);
    const auto bit = bb.indices.find(c);
    const int nt = tit == tb.indices.end() ? 0 : static_cast<int>(tit->second.size());
    const int nb = bit == bb.indices.end() ? 0 : static_cast<int>(bit->second.size());
    if (nb == 0)
      throw UserError(where, c.empty() ? "(top level)" : c, "holds repeated blocks but none in the base model",
                      "give the base model at least one block");
    const double kk = static_cast<double>(nt) / nb;
    if (k && std::fabs(kk / *k - 1) > 1e-9)
      throw UserError(where, c.empty() ? "(top level)" : c,
                      fmt::format("has {} blocks for the base's {}, a depth factor {:g} unlike the other stacks' {:g}",
                                  nt, nb, kk, *k),
                      "scale every block stack by the same factor");
    if (!k) {
      k = kk;
      out.blocks = nt;
      out.base_blocks = nb;
    }
  }
  out.k = k.value_or(1.0);
}

}  // namespace

OwnRoles infer_roles(const OwnModelSpec& spec) {
  check_spec(spec);
  const Patterns overrides = compile_overrides(spec);
  const SpecBlocks blocks{find_blocks(spec.target), find_blocks(spec.base), find_blocks(spec.delta)};
  OwnRoles out;
  WidthGrowth growth;
  for (size_t i = 0; i < spec.target.size(); ++i)
    out.tensors.push_back(classify_tensor(spec, overrides, blocks, i, growth));
  if (!growth.any)
    throw UserError(spec.where, "delta",
                    "the base and delta models have the same shapes, so no tensor's role can be told",
                    "build the delta model at another width than the base");
  out.m = growth.m.value_or(1.0);
  for (const TiedUse& u : spec.tied) classify_tie(spec, overrides, blocks, u, out);
  infer_depth(spec, blocks.target, blocks.base, out);
  return out;
}

namespace {

bool own_model_ok(const OptimizerKind& k) { return k.own_model_refusal.empty(); }

OptFamily own_family(const std::string& optimizer, double weight_decay, const std::string& where) {
  const OptimizerKind* k = find_optimizer_kind(optimizer);
  if (!k || !own_model_ok(*k))
    throw UserError(where, "optimizer", k ? k->own_model_refusal : fmt::format("unknown optimizer '{}'", optimizer),
                    k ? fmt::format("use {} on your own model (the zoo's models take {})", optimizer_kind_list(own_model_ok),
                                    optimizer)
                      : fmt::format("use one of {}", optimizer_kind_list(own_model_ok)));
  if (weight_decay > 0 && k->l2_in_normalisation()) {
    // The fix names the same rule with decoupled decay (adam -> adamw).
    std::string decoupled;
    for (const OptimizerKind& r : optimizer_kind_rows())
      if (decoupled.empty() && own_model_ok(r) && r.family == k->family && r.eps == k->eps &&
          r.decay == DecayMode::Decoupled)
        decoupled = r.kind;
    throw UserError(where, "weight_decay",
                    fmt::format("{} with weight decay is coupled L2: the decay enters {}'s normalisation, so removing "
                                "the table's multipliers (seed 000 eq. 28) does not leave the training unchanged",
                                k->kind, k->kind),
                    decoupled.empty() ? std::string("use weight_decay = 0")
                                      : fmt::format("use optimizer '{}' (decoupled decay) or weight_decay = 0", decoupled));
  }
  return k->family;
}

}  // namespace

OwnPlan plan_own_model(const ParamTable& table, const std::string& optimizer, double weight_decay,
                       const OwnModelSpec& spec) {
  OwnPlan p;
  p.table = table;
  p.family = own_family(optimizer, weight_decay, spec.where);
  if (table.unit.any())
    throw UserError(spec.where, "param", fmt::format("'{}' scales the operations themselves (unit scaling)", table.name),
                    "use a row without [unit] op rules on your own model (its ops are plain torch ops)");
  for (Role r : all_roles())
    if (table.row(r).unit != 0)
      throw UserError(spec.where, "param",
                      fmt::format("'{}' puts part of the init scale in the op (role {} unit = {:g})", table.name,
                                  role_name(r), table.row(r).unit),
                      "use a row with unit = 0 on your own model");
  p.roles = infer_roles(spec);
  std::array<double, kNumRoles> theta{};
  for (Role r : all_roles()) theta[static_cast<int>(r)] = -table.row(r).a;
  p.shifted = shift(table, theta);
  p.shifted.name = table.name;
  for (size_t i = 0; i < p.roles.tensors.size(); ++i) {
    const OwnRole& r = p.roles.tensors[i];
    const OwnTensor& t = spec.target[i];
    const OwnTensor* base = nullptr;
    for (const OwnTensor& b : spec.base)
      if (b.name == t.name) base = &b;
    if (!base)  // an in-block tensor beyond the base's depth: its stack's counterpart
      for (const OwnTensor& b : spec.base)
        if (block_name(b.name).indexed && canonical_name(block_name(b.name)) == r.canonical && b.shape.size() ==
                                                                                                   t.shape.size())
          base = &b;
    const TensorScale s = tensor_scale(p.shifted, r.role, p.family, r.m, p.roles.k, r.in_block);
    OwnTensorPlan tp;
    tp.name = r.name;
    tp.role = r.role;
    tp.in_block = r.in_block;
    tp.init = t.rms > 0 && base ? base->rms * s.init / t.rms : 1.0;
    tp.lr = s.lr;
    tp.wd = s.wd;
    tp.eps = s.eps;
    p.tensors.push_back(tp);
  }
  for (OwnTie tie : p.roles.ties) {
    if (!tie.readout.empty()) {
      const RoleExponents& e = table.row(Role::Embedding);
      const RoleExponents& r = table.row(Role::Readout);
      double m = 1;
      for (const OwnRole& o : p.roles.tensors)
        if (o.name == tie.tensor) m = o.m;
      // Init-matched (own_model.h OwnTie): the readout use starts at the readout row's init,
      // m^-(a_r + b_r), from a tensor stored at the embedding's, m^-(a_e + b_e) (shift-invariant).
      tie.exponent = (r.a + r.b) - (e.a + e.b);
      tie.multiplier = std::pow(m, -tie.exponent);
      if (std::fabs(tie.multiplier - 1) > 1e-12)
        p.notes.push_back(fmt::format("tied '{}': the output of the layer holding '{}' is multiplied by m^-{:g} = "
                                      "{:.6g} (a forward hook that apply installs; C++ modules: in your forward)",
                                      tie.tensor, tie.readout, tie.exponent, tie.multiplier));
    }
    p.ties.push_back(std::move(tie));
  }
  p.branch_multiplier = branch_multiplier(table, p.roles.k);
  if (table.branch != 0 && p.roles.k != 1)
    p.notes.push_back(fmt::format("multiply every residual branch by k^-{:g} = {:.6g} in your forward (table branch "
                                  "exponent; seed 000 eq. 30)",
                                  table.branch, p.branch_multiplier));
  if (table.attn_logit != 0.5 && spec.attention.value_or(true))
    p.notes.push_back(fmt::format("{}where d_head grows with width, scale attention logits by d_head0^-1/2 "
                                  "(d_head/d_head0)^-{:g} in your forward (table attn_logit; muP's 1/d attention); "
                                  "with d_head fixed (heads grow with width) nothing changes",
                                  spec.attention ? "" : "if the model has attention: ", table.attn_logit));
  if (table.shortcut != 0)
    p.notes.push_back(fmt::format("post-LN shortcut L^{:g} inside the norm (table shortcut) is not applied",
                                  table.shortcut));
  return p;
}

namespace {
TensorLayout parse_layout(const std::string& l, const std::string& name) {
  for (TensorLayout t : {TensorLayout::OutIn, TensorLayout::InOut, TensorLayout::Vector, TensorLayout::Bare})
    if (l == layout_name(t)) return t;
  throw UserError("model", name, fmt::format("unknown layout '{}'", l), "use out_in, in_out, vector or bare");
}
}  // namespace

OwnModelSpec own_spec_from_json(const nlohmann::json& j) {
  OwnModelSpec s;
  auto tensors = [&](const char* key) {
    std::vector<OwnTensor> out;
    if (!j.contains(key)) throw UserError("model", key, "missing", "give the base, delta and target models");
    for (const auto& e : j.at(key)) {
      OwnTensor t;
      t.name = e.at("name").get<std::string>();
      t.shape = e.at("shape").get<std::vector<int64_t>>();
      const std::string l = e.value("layout", std::string("out_in"));
      t.layout = parse_layout(l, t.name);
      t.rms = e.value("rms", 0.0);
      out.push_back(std::move(t));
    }
    return out;
  };
  s.base = tensors("base");
  s.delta = tensors("delta");
  s.target = tensors("target");
  if (j.contains("overrides"))
    for (const auto& o : j.at("overrides")) {
      RoleOverride ro;
      ro.pattern = o.at("pattern").get<std::string>();
      const std::string role = o.at("role").get<std::string>();
      if (!parse_role(role, &ro.role))
        throw UserError("overrides", ro.pattern, fmt::format("unknown role '{}'", role),
                        "use embedding, hidden, readout, vector, attn_q, attn_k, attn_v or attn_o");
      s.overrides.push_back(ro);
    }
  if (j.contains("tied"))
    for (const auto& e : j.at("tied")) {
      TiedUse u;
      u.name = e.at("name").get<std::string>();
      u.shares = e.at("shares").get<std::string>();
      u.layout = parse_layout(e.value("layout", std::string("out_in")), u.name);
      s.tied.push_back(std::move(u));
    }
  if (j.contains("where")) s.where = j.at("where").get<std::string>();
  if (j.contains("attention") && !j.at("attention").is_null()) s.attention = j.at("attention").get<bool>();
  return s;
}

nlohmann::json own_plan_to_json(const OwnPlan& p) {
  nlohmann::json j;
  j["m"] = p.roles.m;
  j["k"] = p.roles.k;
  j["blocks"] = p.roles.blocks;
  j["base_blocks"] = p.roles.base_blocks;
  j["family"] = family_name(p.family);
  j["table"] = param_to_json(p.table);
  j["shifted"] = param_to_json(p.shifted);
  nlohmann::json ts = nlohmann::json::array();
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const OwnTensorPlan& t = p.tensors[i];
    const OwnRole& r = p.roles.tensors[i];
    ts.push_back({{"name", t.name},
                  {"role", role_name(t.role)},
                  {"in_block", t.in_block},
                  {"why", r.why},
                  {"fan_in", r.fan_in},
                  {"fan_out", r.fan_out},
                  {"m", r.m},
                  {"init", t.init},
                  {"lr", t.lr},
                  {"wd", t.wd},
                  {"eps", t.eps}});
  }
  j["tensors"] = ts;
  nlohmann::json ties = nlohmann::json::array();
  for (const OwnTie& t : p.ties)
    ties.push_back({{"tensor", t.tensor},
                    {"use", t.use},
                    {"tensor_role", role_name(t.tensor_role)},
                    {"use_role", role_name(t.use_role)},
                    {"readout", t.readout},
                    {"exponent", t.exponent},
                    {"multiplier", t.multiplier}});
  j["ties"] = ties;
  j["branch_multiplier"] = p.branch_multiplier;
  j["notes"] = p.notes;
  return j;
}

}  // namespace scaleinv
