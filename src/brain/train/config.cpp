#include "brain/train/config.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/util/toml_reader.h"
#include "brain/models/model_kinds.h"
#include "brain/optim/optimizer_kinds.h"

namespace scaleinv {

namespace {

// ---- the fields, each declared once --------------------------------------------------------
// Every section's keys, as (TOML/JSON key, member): the TOML reader, the JSON writer and so the
// identity of runs, sweeps and checkpoints (run_altering_differences) all derive from these lists.
// A new field is one line here (and its member in config.h). X is the section's struct, const or
// not; F is called as f(key, member) for every field in order, or f(key, member, rule) where the
// field has a rule of its own (below): the checker applies it after a section is read, the reader
// and the writer pass it by. Rules that tie two fields together (autocast needs cuda) stay after
// the lists, in the section's reader.

// ---- the rules a single field's value must follow -------------------------------------------
// Each names the fix the error message gives (TomlReader::fail: file, field, problem, fix).
struct Positive {  // > 0: "must be positive"
  const char* fix;
};
struct AtLeast1 {  // >= 1: "value V is below 1"
  const char* fix;
};
struct NonNegative {  // >= 0: "value V is negative"
  const char* fix;
};
struct OpenUnit {  // in (0, 1): "value V is outside (0, 1)"
  const char* fix;
};
struct NonEmpty {  // a non-empty string: "is empty"
  const char* fix;
};
struct OneOf {  // a string among `values`: "must be <problem>"
  std::vector<std::string> values;
  const char* problem;
  const char* fix;
};

template <class T>
void check_rule(const TomlReader& r, const char* key, const T& v, const Positive& rule) {
  if (!(v > 0)) r.fail(key, "must be positive", rule.fix);
}
template <class T>
void check_rule(const TomlReader& r, const char* key, const T& v, const AtLeast1& rule) {
  if (v < 1) r.fail(key, fmt::format("value {} is below 1", v), rule.fix);
}
template <class T>
void check_rule(const TomlReader& r, const char* key, const T& v, const NonNegative& rule) {
  if (v < 0) r.fail(key, fmt::format("value {} is negative", v), rule.fix);
}
template <class T>
void check_rule(const TomlReader& r, const char* key, const T& v, const OpenUnit& rule) {
  if (!(v > 0 && v < 1)) r.fail(key, fmt::format("value {} is outside (0, 1)", v), rule.fix);
}
inline void check_rule(const TomlReader& r, const char* key, const std::string& v, const NonEmpty& rule) {
  if (v.empty()) r.fail(key, "is empty", rule.fix);
}
inline void check_rule(const TomlReader& r, const char* key, const std::string& v, const OneOf& rule) {
  if (std::find(rule.values.begin(), rule.values.end(), v) == rule.values.end())
    r.fail(key, std::string("must be ") + rule.problem, rule.fix);
}

// [model]
template <class X, class F>
void model_fields(X& x, F&& f) {
  f("kind", x.kind);
  f("width", x.width, Positive{"e.g. width = 128"});
  f("depth", x.depth, Positive{"e.g. depth = 4"});
  f("vocab", x.vocab);
  f("seq_len", x.seq_len);
  f("head_dim", x.head_dim);
  f("n_heads", x.n_heads);
  f("block", x.block);
  f("qk_norm", x.qk_norm);
  f("tied", x.tied);
  f("zero_readout", x.zero_readout);
  f("zero_query", x.zero_query);
  f("mlp_ratio", x.mlp_ratio);
  f("activation", x.activation);
  f("rmsnorm", x.rmsnorm);
  f("block_depth", x.block_depth);
  f("pre_ln", x.pre_ln);
  f("mean_subtract", x.mean_subtract);
  f("in_dim", x.in_dim);
  f("n_classes", x.n_classes);
  f("image_size", x.image_size);
  f("channels", x.channels);
  f("patch", x.patch);
}

// [model], the Llama fields (brain/models/model_config.h): read under any kind, written only for a kind
// with grouped-query attention (as Muon's fields only under optim.kind = "muon"), so the configs of
// the other models (a store's rows, a checkpoint's metadata) are as they were.
template <class X, class F>
void llama_fields(X& x, F&& f) {
  f("kv_heads", x.kv_heads, NonNegative{"0 (one key/value head per query head) or a count dividing the heads"});
  f("ffn_multiple", x.ffn_multiple, Positive{"e.g. ffn_multiple = 16"});
  f("rope_theta", x.rope_theta, Positive{"e.g. rope_theta = 10000.0"});
}

bool writes_llama_fields(const ModelConfig& m) {
  const ModelKind* k = find_model_kind(m.kind);
  return k && k->gqa;
}

// [model], the mixture-of-experts fields: read under any kind, written only for a kind with experts.
template <class X, class F>
void moe_fields(X& x, F&& f) {
  f("experts", x.experts, Positive{"e.g. experts = 8 (at least 1)"});
  f("top_k", x.top_k, Positive{"e.g. top_k = 2 (at most model.experts)"});
  f("granularity", x.granularity, Positive{"e.g. granularity = 1 (expert hidden width = SwiGLU width / granularity)"});
  f("aux_coef", x.aux_coef, NonNegative{"e.g. aux_coef = 0.01 (0: no balance loss)"});
  f("shared_expert", x.shared_expert);
}

bool writes_moe_fields(const ModelConfig& m) {
  const ModelKind* k = find_model_kind(m.kind);
  return k && k->experts;
}

// [model], a mixture's aux-loss-free balancing (engine/models/moe.cpp): read under any kind, written only
// when it is on, so the configs of the runs without it (a store's point ids, which hash them, and a
// checkpoint's metadata) are as they were before the field existed.
template <class X, class F>
void balance_fields(X& x, F&& f) {
  f("bias_rate", x.bias_rate, NonNegative{"e.g. bias_rate = 0.001 (0: no selection bias)"});
}

// [hp]
template <class X, class F>
void hp_fields(X& x, F&& f) {
  // Scales of the table's init and multipliers: 0 cuts a part of the network off (nothing learns
  // through a zero multiplier or from all-zero weights); a negative one is no parameterization.
  f("init_scale", x.init_scale, Positive{"e.g. init_scale = 1 (the table's init)"});
  f("output_mult", x.output_mult, Positive{"e.g. output_mult = 1"});
  f("embed_mult", x.embed_mult, Positive{"e.g. embed_mult = 1"});
  f("branch_mult", x.branch_mult, Positive{"e.g. branch_mult = 1"});
  f("attn_mult", x.attn_mult, Positive{"e.g. attn_mult = 1"});
}

// [hp], a mixture's router multiplier: read under any kind (build_model refuses it on a model
// without a router), written only when it is not 1, so the configs of every run without it (a
// store's point ids, which hash them, and a checkpoint's metadata) are as they were before it existed.
template <class X, class F>
void router_hp_fields(X& x, F&& f) {
  f("router_mult", x.router_mult, Positive{"e.g. router_mult = 1"});
}

// [optim], every optimizer
template <class X, class F>
void optim_fields(X& x, F&& f) {
  f("kind", x.kind);
  f("lr", x.lr);
  f("momentum", x.momentum);
  f("beta1", x.beta1);
  f("beta2", x.beta2);
  f("eps", x.eps);
  f("weight_decay", x.weight_decay);
  f("wd_mode", x.wd_mode);
  f("clip_grad_norm", x.clip_grad_norm);
  f("schedule", x.schedule);
  f("warmup_steps", x.warmup_steps);
  f("total_steps", x.total_steps);
  f("min_lr_ratio", x.min_lr_ratio);
}

// [optim], Muon only: written only under kind = "muon", so the JSON (and the identity) of
// every other optimizer is what it was before Muon existed
template <class X, class F>
void muon_fields(X& x, F&& f) {
  f("muon_momentum", x.muon_momentum);
  f("nesterov", x.nesterov);
  f("ns_steps", x.ns_steps);
  f("muon_scale", x.muon_scale);
  f("muon_eps", x.muon_eps);
}

// [optim], wsd only: written only under schedule = "wsd", so the JSON (and the identity) of every
// other schedule is what it was before wsd existed
template <class X, class F>
void wsd_fields(X& x, F&& f) {
  f("decay_fraction", x.decay_fraction);
}

// [data]
template <class X, class F>
void data_fields(X& x, F&& f) {
  f("source", x.source);
  f("path", x.path);
  f("val_fraction", x.val_fraction, OpenUnit{"e.g. val_fraction = 0.1"});
  f("vocab", x.vocab);
  f("markov_temperature", x.markov_temperature);
  f("markov_length", x.markov_length);
  f("fashion_dir", x.fashion_dir);
  f("flatten", x.flatten);
  f("seed", x.seed);
}

// [train]
template <class X, class F>
void train_fields(X& x, F&& f) {
  f("steps", x.steps, Positive{"e.g. steps = 200"});
  f("batch_size", x.batch_size, Positive{"e.g. batch_size = 16"});
  f("seed", x.seed);
  f("log_every", x.log_every, AtLeast1{"e.g. log_every = 10"});
  f("eval_every", x.eval_every, NonNegative{"0 (only at the end) or a positive interval"});
  f("eval_batches", x.eval_batches, AtLeast1{"e.g. eval_batches = 4"});
  f("checkpoint_every", x.checkpoint_every, NonNegative{"0 (only at the end) or a positive interval"});
  f("out_dir", x.out_dir, NonEmpty{"e.g. out_dir = \"runs/my-run\""});
  f("device", x.device, OneOf{{"cpu", "cuda"}, "cpu or cuda", "device = \"cpu\""});
  f("precision", x.precision,
    OneOf{{"fp32", "bf16", "e4m3", "e5m2", "fp8"}, "one of fp32, bf16, e4m3, e5m2, fp8 (E4M3 forward, E5M2 gradients)",
          "precision = \"fp32\" (simulated low precision)"});
  f("autocast", x.autocast, OneOf{{"off", "bf16"}, "off or bf16", "autocast = \"bf16\" (CUDA)"});
  f("tf32", x.tf32);
  f("cuda_graph", x.cuda_graph);
  f("dist_timeout_s", x.dist_timeout_s, Positive{"e.g. dist_timeout_s = 60"});
}

// [param]: TrainConfig's own members.
template <class X, class F>
void param_fields(X& c, F&& f) {
  f("name", c.param);
  f("base_width", c.param_base_width, NonNegative{"0 (the table's own) or a positive width"});
  f("base_depth", c.param_base_depth, NonNegative{"0 (the table's own) or a positive depth"});
}

// The three visitors: read a field from a TOML section (TomlReader::get: a missing key keeps the
// default), check its rule, write it into a JSON object.
auto read_from(const TomlReader& r) {
  return [&r](const char* key, auto& member, const auto&...) { r.get(key, &member); };
}
auto check_with(const TomlReader& r) {
  return [&r](const char* key, const auto& member, const auto&... rule) { (check_rule(r, key, member, rule), ...); };
}
auto write_into(nlohmann::json& j) {
  return [&j](const char* key, const auto& member, const auto&...) { j[key] = member; };
}
// A fourth, for a group of fields the model's kind does not read (the Llama fields on a GPT, the
// mixture's on a dense model): one present in the section is refused by name, not read and ignored
// (issue 63 class 4: model.experts = 8 on a llama was accepted).
auto refuse_present(const TomlReader& r, const std::string& kind, const char* lacks, bool (*has)(const ModelKind&)) {
  return [&r, kind, lacks, has](const char* key, const auto&, const auto&...) {
    if (r.has(key))
      r.fail(key, fmt::format("'{}' has no {}: the field would be ignored", kind, lacks),
             fmt::format("remove {}, or use model.kind = one of {}", key, model_kind_list(has)));
  };
}
bool has_gqa(const ModelKind& k) { return k.gqa; }
bool has_experts(const ModelKind& k) { return k.experts; }

void read_model(const TomlReader& r, ModelConfig& m) {
  model_fields(m, read_from(r));
  llama_fields(m, read_from(r));
  moe_fields(m, read_from(r));
  balance_fields(m, read_from(r));
  r.reject_unknown();
  model_fields(m, check_with(r));
  llama_fields(m, check_with(r));
  moe_fields(m, check_with(r));
  balance_fields(m, check_with(r));
  if (const ModelKind* k = find_model_kind(m.kind)) {  // (an unknown kind is named by model_fields' rule)
    if (!k->gqa) llama_fields(m, refuse_present(r, m.kind, "grouped-query attention", has_gqa));
    if (!k->experts) {
      moe_fields(m, refuse_present(r, m.kind, "experts", has_experts));
      balance_fields(m, refuse_present(r, m.kind, "experts", has_experts));
    }
  }
}

void read_hp(const TomlReader& r, Hyper& h, const std::string& kind) {
  hp_fields(h, read_from(r));
  router_hp_fields(h, read_from(r));
  r.reject_unknown();
  hp_fields(h, check_with(r));
  router_hp_fields(h, check_with(r));
  if (const ModelKind* k = find_model_kind(kind); k && !k->experts)
    router_hp_fields(h, refuse_present(r, kind, "router", has_experts));
}

void read_optim(const TomlReader& r, OptimConfig& o) {
  optim_fields(o, read_from(r));
  muon_fields(o, read_from(r));
  wsd_fields(o, read_from(r));
  r.reject_unknown();
}

void read_data(const TomlReader& r, DataConfig& d) {
  data_fields(d, read_from(r));
  r.reject_unknown();
  data_fields(d, check_with(r));
}

void read_train(const TomlReader& r, TrainSettings& t) {
  train_fields(t, read_from(r));
  r.reject_unknown();
  train_fields(t, check_with(r));
  if (t.autocast == "bf16" && t.device != "cuda")
    r.fail("autocast", "bf16 autocast needs device = \"cuda\"", "set train.device = \"cuda\" or autocast = \"off\"");
  if (t.cuda_graph && t.device != "cuda")
    r.fail("cuda_graph", "CUDA graphs need device = \"cuda\"", "set train.device = \"cuda\" or cuda_graph = false");
  if (t.cuda_graph && t.precision != "fp32")
    r.fail("cuda_graph", "simulated precision counts its roundings call by call on the host, which a replayed graph skips",
           "set cuda_graph = false or precision = \"fp32\"");
}

}  // namespace

TrainConfig train_config_from_toml_text(const std::string& text, const std::string& where,
                                        const std::vector<std::string>& sets) {
  toml::table root = parse_toml(text, where);
  for (const auto& s : sets) apply_override(root, s);
  const std::string src = sets.empty() ? where : where + " (with --set)";
  TomlReader r(root, src, "");
  TrainConfig c;
  c.source = where;
  read_model(r.sub("model"), c.model);
  {
    TomlReader p = r.sub("param");
    param_fields(c, read_from(p));
    param_fields(c, check_with(p));
    p.reject_unknown();
  }
  read_hp(r.sub("hp"), c.hp, c.model.kind);
  read_optim(r.sub("optim"), c.optim);
  // The library's own checks below (the optimizer module's kind, schedule and ranges; the Markov
  // vocabulary) name "config": reported against this file.
  const ConfigSource source(src);
  validate_optim_config(c.optim);
  read_data(r.sub("data"), c.data);
  read_train(r.sub("train"), c.train);
  r.reject_unknown();
  // One source of truth for shapes shared by model and data.
  c.data.seq_len = c.model.seq_len;
  if (c.data.source == "markov") {  // the chain's vocabulary is the model's: checked here, under its own name
    check_markov_vocab(c.data.vocab);
    c.model.vocab = c.data.vocab;
  }
  if (!r.has("optim") || !root["optim"].as_table()->contains("total_steps")) c.optim.total_steps = c.train.steps;
  return c;
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& sets) {
  if (path.empty()) return train_config_from_toml_text("", "(defaults)", sets);
  std::string text;
  try {
    text = read_file(path);
  } catch (const UserError&) {
    throw UserError(path, "", "cannot open config file", "check the path (examples/ has one config per model)");
  }
  return train_config_from_toml_text(text, path, sets);
}

ParamTable resolve_param(const TrainConfig& c) {
  ParamTable t = load_param(c.param);
  if (c.param_base_width > 0) t.base_width = c.param_base_width;
  if (c.param_base_depth > 0) t.base_depth = c.param_base_depth;
  return t;
}

nlohmann::json train_config_to_json(const TrainConfig& c) {
  nlohmann::json j;
  model_fields(c.model, write_into(j["model"]));
  if (writes_llama_fields(c.model)) llama_fields(c.model, write_into(j["model"]));
  if (writes_moe_fields(c.model)) moe_fields(c.model, write_into(j["model"]));
  if (writes_moe_fields(c.model) && c.model.bias_rate > 0) balance_fields(c.model, write_into(j["model"]));
  param_fields(c, write_into(j["param"]));
  hp_fields(c.hp, write_into(j["hp"]));
  if (c.hp.router_mult != 1) router_hp_fields(c.hp, write_into(j["hp"]));
  optim_fields(c.optim, write_into(j["optim"]));
  if (const OptimizerKind* k = find_optimizer_kind(c.optim.kind); k && k->reads("muon_momentum"))
    muon_fields(c.optim, write_into(j["optim"]));
  if (c.optim.schedule == "wsd") wsd_fields(c.optim, write_into(j["optim"]));
  data_fields(c.data, write_into(j["data"]));
  train_fields(c.train, write_into(j["train"]));
  return j;
}

std::vector<std::string> run_altering_differences(const TrainConfig& saved, const TrainConfig& now) {
  static const std::set<std::string> kFree = {"train.out_dir",      "train.log_every",        "train.eval_every",
                                              "train.eval_batches", "train.checkpoint_every", "train.dist_timeout_s",
                                              "train.cuda_graph",   "train.steps",            "param.name"};
  const bool constant = saved.optim.schedule == "constant" && now.optim.schedule == "constant";
  const nlohmann::json a = train_config_to_json(saved), b = train_config_to_json(now);
  // Over the fields either config writes: a field written only away from its default (bias_rate,
  // hp.router_mult) is in one of them alone when it was set and then removed, or the other way.
  std::set<std::string> out;
  for (const nlohmann::json* x : {&a, &b})
    for (const auto& [section, fields] : x->items())
      for (const auto& [key, value] : fields.items()) {
        const std::string name = section + "." + key;
        if (kFree.count(name) || (constant && name == "optim.total_steps")) continue;
        const bool both = a.contains(section) && a[section].contains(key) && b.contains(section) && b[section].contains(key);
        if (!both || a[section][key] != b[section][key]) out.insert(name);
      }
  return {out.begin(), out.end()};
}

TrainConfig train_config_from_json(const nlohmann::json& j) {
  // The JSON mirrors the TOML sections exactly, so reuse the validated TOML reader.
  std::string toml_text;
  for (const auto& [section, fields] : j.items()) {
    toml_text += "[" + section + "]\n";
    for (const auto& [k, v] : fields.items()) toml_text += k + " = " + v.dump() + "\n";
  }
  TrainConfig c = train_config_from_toml_text(toml_text, "checkpoint config");
  c.optim.total_steps = j.at("optim").at("total_steps").get<int64_t>();
  return c;
}

}  // namespace scaleinv
