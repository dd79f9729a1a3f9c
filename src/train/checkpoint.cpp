#include "train/checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace scaleinv {

namespace {

std::string meta_json(const CheckpointMeta& m) {
  nlohmann::json j;
  j["format"] = "scaleinv-checkpoint-1";
  j["step"] = m.step;
  j["table"] = param_to_json(m.table);
  j["config"] = train_config_to_json(m.config);
  j["fingerprint"] = param_fingerprint(m.table);
  return j.dump();
}

torch::serialize::InputArchive open_archive(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw UserError(path, "", "checkpoint not found", "train first, or point at an existing checkpoint.pt");
  torch::serialize::InputArchive ar;
  try {
    ar.load_from(path);
  } catch (const c10::Error& e) {
    throw UserError(path, "", "not a readable checkpoint", "delete it to start over, or restore a copy");
  }
  return ar;
}

}  // namespace

void save_checkpoint(const std::string& path, const CheckpointMeta& meta, Model& model, const Optimizer* opt) {
  torch::serialize::OutputArchive ar;
  ar.write("meta", c10::IValue(meta_json(meta)));
  torch::serialize::OutputArchive params;
  for (const TaggedParam& p : model.tagged_parameters()) params.write(p.name, p.tensor.detach(), /*is_buffer=*/true);
  ar.write("params", params);
  if (opt) {
    torch::serialize::OutputArchive os;
    opt->save(os);
    ar.write("optimizer", os);
  }
  const std::filesystem::path target(path);
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  ar.save_to(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw UserError(path, "", "cannot replace checkpoint", "check the directory's permissions");
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  torch::serialize::InputArchive ar = open_archive(path);
  c10::IValue v;
  if (!ar.try_read("meta", v) || !v.isString())
    throw UserError(path, "meta", "missing metadata", "this is not a scaleinv checkpoint");
  nlohmann::json j = nlohmann::json::parse(v.toStringRef());
  CheckpointMeta m;
  m.step = j.at("step").get<int64_t>();
  m.table = param_from_json(j.at("table"));
  m.config = train_config_from_json(j.at("config"));
  m.fingerprint = j.at("fingerprint").get<std::string>();
  if (m.fingerprint != param_fingerprint(m.table))
    throw UserError(path, "fingerprint", "the stored table does not match its fingerprint", "the file is corrupt");
  return m;
}

void load_checkpoint(const std::string& path, Model& model, Optimizer* opt) {
  torch::serialize::InputArchive ar = open_archive(path);
  torch::serialize::InputArchive params;
  ar.read("params", params);
  torch::NoGradGuard ng;
  for (const TaggedParam& p : model.tagged_parameters()) {
    torch::Tensor t;
    if (!params.try_read(p.name, t, /*is_buffer=*/true))
      throw UserError(path, p.name, "tensor missing from checkpoint", "the model config differs from the checkpoint's");
    if (!t.sizes().equals(p.tensor.sizes()))
      throw UserError(path, p.name,
                      fmt::format("shape mismatch: checkpoint {} vs model {}", fmt::join(t.sizes(), "x"),
                                  fmt::join(p.tensor.sizes(), "x")),
                      "build the model with the checkpoint's config");
    p.tensor.copy_(t);
  }
  if (opt) {
    torch::serialize::InputArchive os;
    ar.read("optimizer", os);
    opt->load(os);
  }
}

}  // namespace scaleinv
