#include "train/config.h"

#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/toml_reader.h"

namespace scaleinv {

namespace {

void read_model(const TomlReader& r, ModelConfig& m) {
  r.get("kind", &m.kind);
  r.get("width", &m.width);
  r.get("depth", &m.depth);
  r.get("vocab", &m.vocab);
  r.get("seq_len", &m.seq_len);
  r.get("head_dim", &m.head_dim);
  r.get("n_heads", &m.n_heads);
  r.get("block", &m.block);
  r.get("qk_norm", &m.qk_norm);
  r.get("tied", &m.tied);
  r.get("zero_readout", &m.zero_readout);
  r.get("zero_query", &m.zero_query);
  r.get("mlp_ratio", &m.mlp_ratio);
  r.get("activation", &m.activation);
  r.get("rmsnorm", &m.rmsnorm);
  r.get("block_depth", &m.block_depth);
  r.get("pre_ln", &m.pre_ln);
  r.get("mean_subtract", &m.mean_subtract);
  r.get("in_dim", &m.in_dim);
  r.get("n_classes", &m.n_classes);
  r.get("image_size", &m.image_size);
  r.get("channels", &m.channels);
  r.get("patch", &m.patch);
  r.reject_unknown();
  if (m.width <= 0) r.fail("width", "must be positive", "e.g. width = 128");
  if (m.depth <= 0) r.fail("depth", "must be positive", "e.g. depth = 4");
}

void read_hp(const TomlReader& r, Hyper& h) {
  r.get("init_scale", &h.init_scale);
  r.get("output_mult", &h.output_mult);
  r.get("embed_mult", &h.embed_mult);
  r.get("branch_mult", &h.branch_mult);
  r.get("attn_mult", &h.attn_mult);
  r.reject_unknown();
}

void read_optim(const TomlReader& r, OptimConfig& o) {
  r.get("kind", &o.kind);
  r.get("lr", &o.lr);
  r.get("momentum", &o.momentum);
  r.get("beta1", &o.beta1);
  r.get("beta2", &o.beta2);
  r.get("eps", &o.eps);
  r.get("weight_decay", &o.weight_decay);
  r.get("wd_mode", &o.wd_mode);
  r.get("clip_grad_norm", &o.clip_grad_norm);
  r.get("schedule", &o.schedule);
  r.get("warmup_steps", &o.warmup_steps);
  r.get("total_steps", &o.total_steps);
  r.get("min_lr_ratio", &o.min_lr_ratio);
  r.get("muon_momentum", &o.muon_momentum);
  r.get("nesterov", &o.nesterov);
  r.get("ns_steps", &o.ns_steps);
  r.get("muon_scale", &o.muon_scale);
  r.get("muon_eps", &o.muon_eps);
  r.reject_unknown();
  if (!(o.lr > 0)) r.fail("lr", "must be positive", "e.g. lr = 0.01");
  if (o.wd_mode != "coupled" && o.wd_mode != "independent")
    r.fail("wd_mode", "must be coupled or independent", "see seed 000 A.2.2");
}

void read_data(const TomlReader& r, DataConfig& d) {
  r.get("source", &d.source);
  r.get("path", &d.path);
  r.get("val_fraction", &d.val_fraction);
  r.get("vocab", &d.vocab);
  r.get("markov_temperature", &d.markov_temperature);
  r.get("markov_length", &d.markov_length);
  r.get("fashion_dir", &d.fashion_dir);
  r.get("flatten", &d.flatten);
  r.get("seed", &d.seed);
  r.reject_unknown();
}

void read_train(const TomlReader& r, TrainSettings& t) {
  r.get("steps", &t.steps);
  r.get("batch_size", &t.batch_size);
  r.get("seed", &t.seed);
  r.get("log_every", &t.log_every);
  r.get("eval_every", &t.eval_every);
  r.get("eval_batches", &t.eval_batches);
  r.get("checkpoint_every", &t.checkpoint_every);
  r.get("out_dir", &t.out_dir);
  r.get("device", &t.device);
  r.get("precision", &t.precision);
  r.get("autocast", &t.autocast);
  r.get("tf32", &t.tf32);
  r.get("dist_timeout_s", &t.dist_timeout_s);
  r.reject_unknown();
  if (t.steps <= 0) r.fail("steps", "must be positive", "e.g. steps = 200");
  if (t.batch_size <= 0) r.fail("batch_size", "must be positive", "e.g. batch_size = 16");
  if (t.device != "cpu" && t.device != "cuda") r.fail("device", "must be cpu or cuda", "device = \"cpu\"");
  if (t.precision != "fp32" && t.precision != "bf16" && t.precision != "e4m3" && t.precision != "e5m2" &&
      t.precision != "fp8")
    r.fail("precision", "must be one of fp32, bf16, e4m3, e5m2, fp8 (E4M3 forward, E5M2 gradients)",
           "precision = \"fp32\" (simulated low precision)");
  if (!(t.dist_timeout_s > 0)) r.fail("dist_timeout_s", "must be positive", "e.g. dist_timeout_s = 60");
  if (t.out_dir.empty()) r.fail("out_dir", "is empty", "e.g. out_dir = \"runs/my-run\"");
  if (t.eval_batches < 1) r.fail("eval_batches", fmt::format("value {} is below 1", t.eval_batches), "e.g. eval_batches = 4");
  if (t.log_every < 1) r.fail("log_every", fmt::format("value {} is below 1", t.log_every), "e.g. log_every = 10");
  if (t.eval_every < 0) r.fail("eval_every", fmt::format("value {} is negative", t.eval_every), "0 (only at the end) or a positive interval");
  if (t.checkpoint_every < 0)
    r.fail("checkpoint_every", fmt::format("value {} is negative", t.checkpoint_every), "0 (only at the end) or a positive interval");
  if (t.autocast != "off" && t.autocast != "bf16") r.fail("autocast", "must be off or bf16", "autocast = \"bf16\" (CUDA)");
  if (t.autocast == "bf16" && t.device != "cuda")
    r.fail("autocast", "bf16 autocast needs device = \"cuda\"", "set train.device = \"cuda\" or autocast = \"off\"");
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
    p.get("name", &c.param);
    p.get("base_width", &c.param_base_width);
    p.get("base_depth", &c.param_base_depth);
    if (c.param_base_width < 0) p.fail("base_width", fmt::format("value {} is negative", c.param_base_width), "0 (the table's own) or a positive width");
    if (c.param_base_depth < 0) p.fail("base_depth", fmt::format("value {} is negative", c.param_base_depth), "0 (the table's own) or a positive depth");
    p.reject_unknown();
  }
  read_hp(r.sub("hp"), c.hp);
  read_optim(r.sub("optim"), c.optim);
  try {  // the optimizer module's own checks (kind, schedule, ranges), reported against this file
    validate_optim_config(c.optim);
  } catch (const UserError& e) {
    std::string msg = e.what();
    if (msg.rfind("config: ", 0) == 0) msg = src + ": " + msg.substr(8);
    throw UserError(msg);
  }
  read_data(r.sub("data"), c.data);
  read_train(r.sub("train"), c.train);
  r.reject_unknown();
  // One source of truth for shapes shared by model and data.
  c.data.seq_len = c.model.seq_len;
  if (c.data.source == "markov") c.model.vocab = c.data.vocab;
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
  const ModelConfig& m = c.model;
  nlohmann::json j;
  j["model"] = {{"kind", m.kind},       {"width", m.width},         {"depth", m.depth},
                {"vocab", m.vocab},     {"seq_len", m.seq_len},     {"head_dim", m.head_dim},
                {"n_heads", m.n_heads}, {"block", m.block},         {"qk_norm", m.qk_norm},
                {"tied", m.tied},       {"zero_readout", m.zero_readout}, {"zero_query", m.zero_query},
                {"mlp_ratio", m.mlp_ratio}, {"activation", m.activation}, {"rmsnorm", m.rmsnorm},
                {"block_depth", m.block_depth}, {"pre_ln", m.pre_ln}, {"mean_subtract", m.mean_subtract},
                {"in_dim", m.in_dim},   {"n_classes", m.n_classes}, {"image_size", m.image_size},
                {"channels", m.channels}, {"patch", m.patch}};
  j["param"] = {{"name", c.param}, {"base_width", c.param_base_width}, {"base_depth", c.param_base_depth}};
  j["hp"] = {{"init_scale", c.hp.init_scale}, {"output_mult", c.hp.output_mult}, {"embed_mult", c.hp.embed_mult},
             {"branch_mult", c.hp.branch_mult}, {"attn_mult", c.hp.attn_mult}};
  const OptimConfig& o = c.optim;
  j["optim"] = {{"kind", o.kind}, {"lr", o.lr}, {"momentum", o.momentum}, {"beta1", o.beta1}, {"beta2", o.beta2},
                {"eps", o.eps}, {"weight_decay", o.weight_decay}, {"wd_mode", o.wd_mode},
                {"clip_grad_norm", o.clip_grad_norm}, {"schedule", o.schedule}, {"warmup_steps", o.warmup_steps},
                {"total_steps", o.total_steps}, {"min_lr_ratio", o.min_lr_ratio}};
  // Muon's fields only under muon, so the JSON (and the identity of runs, sweeps and checkpoints)
  // of every other optimizer is what it was before Muon existed.
  if (o.kind == "muon") {
    j["optim"]["muon_momentum"] = o.muon_momentum;
    j["optim"]["nesterov"] = o.nesterov;
    j["optim"]["ns_steps"] = o.ns_steps;
    j["optim"]["muon_scale"] = o.muon_scale;
    j["optim"]["muon_eps"] = o.muon_eps;
  }
  const DataConfig& d = c.data;
  j["data"] = {{"source", d.source}, {"path", d.path}, {"val_fraction", d.val_fraction}, {"vocab", d.vocab},
               {"markov_temperature", d.markov_temperature}, {"markov_length", d.markov_length},
               {"fashion_dir", d.fashion_dir}, {"flatten", d.flatten}, {"seed", d.seed}};
  const TrainSettings& t = c.train;
  j["train"] = {{"steps", t.steps}, {"batch_size", t.batch_size}, {"seed", t.seed}, {"log_every", t.log_every},
                {"eval_every", t.eval_every}, {"eval_batches", t.eval_batches},
                {"checkpoint_every", t.checkpoint_every}, {"out_dir", t.out_dir}, {"device", t.device}, {"precision", t.precision},
                {"autocast", t.autocast}, {"tf32", t.tf32}, {"dist_timeout_s", t.dist_timeout_s}};
  return j;
}

std::vector<std::string> run_altering_differences(const TrainConfig& saved, const TrainConfig& now) {
  static const std::set<std::string> kFree = {"train.out_dir",    "train.log_every",        "train.eval_every",
                                              "train.eval_batches", "train.checkpoint_every", "train.dist_timeout_s",
                                              "train.steps",      "param.name"};
  const bool constant = saved.optim.schedule == "constant" && now.optim.schedule == "constant";
  const nlohmann::json a = train_config_to_json(saved), b = train_config_to_json(now);
  std::vector<std::string> out;
  for (const auto& [section, fields] : b.items())
    for (const auto& [key, value] : fields.items()) {
      const std::string name = section + "." + key;
      if (kFree.count(name) || (constant && name == "optim.total_steps")) continue;
      if (!a.contains(section) || !a[section].contains(key) || a[section][key] != value) out.push_back(name);
    }
  return out;
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
