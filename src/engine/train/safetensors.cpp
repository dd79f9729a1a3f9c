// safetensors read/write and checkpoint export/import (see safetensors.h).
#include "engine/train/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/util/fs_check.h"
#include "engine/optim/optimizer.h"
#include "engine/train/checkpoint.h"
#include "engine/train/make_run.h"
#include "brain/train/config.h"

namespace scaleinv {

namespace {

// dtype names of the format, in one table.
struct DtypeName {
  torch::ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {{torch::kFloat32, "F32"}, {torch::kFloat64, "F64"}, {torch::kBFloat16, "BF16"},
                                 {torch::kFloat16, "F16"}, {torch::kInt64, "I64"},   {torch::kInt32, "I32"},
                                 {torch::kUInt8, "U8"}};

const char* dtype_name(torch::ScalarType t, const std::string& path, const std::string& tensor) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  throw UserError(path, tensor, fmt::format("dtype {} has no safetensors name here", c10::toString(t)),
                  "convert it to float32 first");
}

}  // namespace

void write_safetensors(const std::string& path, const SafeTensors& st) {
  nlohmann::ordered_json header;
  if (!st.metadata.empty()) header["__metadata__"] = st.metadata;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : st.tensors) {
    if (name == "__metadata__") throw UserError(path, name, "is a reserved name", "rename the tensor");
    const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", dtype_name(c.scalar_type(), path, name)},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(c);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);  // little-endian
  out += h;
  out.reserve(out.size() + offset);
  for (const torch::Tensor& c : data)
    out.append(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()) * c.element_size());
  ensure_parent_dir(path, "--out");
  write_file_atomic(path, out);
}

SafeTensors read_safetensors(const std::string& path) {
  const std::string bytes = read_file(path);
  const std::string fix = "the file is truncated or not safetensors: export it again";
  if (bytes.size() < 8) throw UserError(path, "header", "shorter than the 8-byte header length", fix);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (n > bytes.size() - 8)
    throw UserError(path, "header", fmt::format("header length {} exceeds the file ({} bytes)", n, bytes.size()), fix);
  nlohmann::json header;
  // The format forbids two tensors of one name; JSON parsers keep the last silently, so the
  // header's top-level keys are counted while it is parsed.
  std::set<std::string> names;
  std::string duplicate;
  const nlohmann::json::parser_callback_t count_keys = [&](int depth, nlohmann::json::parse_event_t event,
                                                           nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string() &&
        !names.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    header = nlohmann::json::parse(bytes.substr(8, n), count_keys);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path, "header", fmt::format("not JSON ({})", e.what()), fix);
  }
  if (!header.is_object()) throw UserError(path, "header", "not a JSON object", fix);
  if (!duplicate.empty())
    throw UserError(path, duplicate, "named twice in the header (the format allows one tensor per name)", fix);
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> spans;  // each tensor's bytes, to check overlaps
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;
  SafeTensors st;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) throw UserError(path, name, "not an object of strings", fix);
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) throw UserError(path, "__metadata__." + k, "not a string", fix);
        st.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets") ||
        !v.at("dtype").is_string() || !v.at("shape").is_array() || !v.at("data_offsets").is_array() ||
        v.at("data_offsets").size() != 2)
      throw UserError(path, name, "needs dtype, shape and data_offsets [begin, end]", fix);
    const std::string dt = v.at("dtype").get<std::string>();
    const DtypeName* d = nullptr;
    for (const auto& e : kDtypes)
      if (dt == e.name) d = &e;
    if (!d) throw UserError(path, name, fmt::format("dtype '{}' is not read here", dt), "use F32, F64, BF16, F16, I64, I32 or U8");
    std::vector<int64_t> shape;
    int64_t numel = 1;
    for (const auto& s : v.at("shape")) {
      if (!s.is_number_integer() || s.get<int64_t>() < 0) throw UserError(path, name, "shape has a bad dimension", fix);
      shape.push_back(s.get<int64_t>());
      if (shape.back() > 0 && numel > (int64_t{1} << 56) / shape.back())  // also bounds numel x element size
        throw UserError(path, name, fmt::format("shape {} has more elements than any file holds", v.at("shape").dump()), fix);
      numel *= shape.back();
    }
    const auto& off = v.at("data_offsets");
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw UserError(path, name, "data_offsets are not unsigned integers", fix);
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    const uint64_t want = static_cast<uint64_t>(numel) * c10::elementSize(d->type);
    if (b > e || e > data_size || e - b != want)
      throw UserError(path, name,
                      fmt::format("data_offsets [{}, {}] do not hold {} bytes inside the {} data bytes", b, e, want,
                                  data_size),
                      fix);
    if (e > b) spans.emplace_back(b, e, name);
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(d->type));
    if (want) std::memcpy(t.data_ptr(), data + b, want);
    st.tensors.emplace_back(name, t);
  }
  // The format forbids two tensors on the same bytes.
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (std::get<0>(spans[i]) < std::get<1>(spans[i - 1]))
      throw UserError(path, std::get<2>(spans[i]),
                      fmt::format("data_offsets [{}, {}] overlap those of '{}' [{}, {}] (each tensor has bytes of its own)",
                                  std::get<0>(spans[i]), std::get<1>(spans[i]), std::get<2>(spans[i - 1]),
                                  std::get<0>(spans[i - 1]), std::get<1>(spans[i - 1])),
                      fix);
  return st;
}

size_t export_checkpoint(const std::string& checkpoint, const std::string& out) {
  refuse_same_file(checkpoint, out, "--out");
  const CheckpointMeta meta = read_checkpoint_meta(checkpoint);
  auto model = build_model(meta.config.model, run_context(meta.config, meta.table), meta.config.hp);
  load_checkpoint(checkpoint, *model, nullptr);
  SafeTensors st;
  for (const TaggedParam& p : model->tagged_parameters()) st.tensors.emplace_back(p.name, p.tensor.detach());
  for (const auto& b : model->named_buffers(/*recurse=*/true)) st.tensors.emplace_back(b.key(), b.value().detach());
  st.metadata["scaleinv.table"] = param_to_json(meta.table).dump();
  st.metadata["scaleinv.config"] = train_config_to_json(meta.config).dump();
  st.metadata["scaleinv.step"] = std::to_string(meta.step);
  st.metadata["scaleinv.fingerprint"] = meta.fingerprint;
  st.metadata["scaleinv.note"] =
      "tensors as stored: the table's forward multipliers (m^-a per role) are applied in the model's forward";
  write_safetensors(out, st);
  return st.tensors.size();
}

size_t import_safetensors(const std::string& file, const std::string& config_toml, const std::string& out_checkpoint) {
  refuse_same_file(file, out_checkpoint, "--out");
  if (!config_toml.empty()) refuse_same_file(config_toml, out_checkpoint, "--out");
  const SafeTensors st = read_safetensors(file);
  CheckpointMeta meta;
  if (config_toml.empty()) {
    const auto it = st.metadata.find("scaleinv.config");
    const auto jt = st.metadata.find("scaleinv.table");
    if (it == st.metadata.end() || jt == st.metadata.end())
      throw UserError(file, "__metadata__", "no scaleinv.config / scaleinv.table (not exported by scaleinv)",
                      "give the model's config with --config FILE");
    try {
      meta.config = train_config_from_json(nlohmann::json::parse(it->second));
      meta.table = param_from_json(nlohmann::json::parse(jt->second));
    } catch (const nlohmann::json::exception& e) {
      throw UserError(file, "__metadata__", fmt::format("scaleinv.config or scaleinv.table unreadable ({})", e.what()),
                      "give the model's config with --config FILE");
    }
  } else {
    meta.config = load_train_config(config_toml);
    meta.table = resolve_param(meta.config);
  }
  meta.fingerprint = param_fingerprint(meta.table);
  // A fresh run of the file's config (its own init, a fresh optimizer state); the weights replace the init.
  const RunParts run = make_run(meta.config, {.table = meta.table});
  // The parameters, then the model's untrained state (a mixture's selection biases), as exported.
  std::vector<TaggedParam> params = run.model->tagged_parameters();
  for (const auto& b : run.model->named_buffers(/*recurse=*/true)) params.push_back({b.key(), b.value(), {}});
  std::map<std::string, const torch::Tensor*> by_name;
  for (const auto& [name, t] : st.tensors) by_name[name] = &t;
  {
    torch::NoGradGuard ng;
    for (const TaggedParam& p : params) {
      const auto it = by_name.find(p.name);
      if (it == by_name.end())
        throw UserError(file, p.name, "the model has this tensor but the file does not",
                        "export from a model of the same config");
      if (!it->second->sizes().equals(p.tensor.sizes()))
        throw UserError(file, p.name,
                        fmt::format("shape {} in the file, {} in the model", fmt::join(it->second->sizes(), "x"),
                                    fmt::join(p.tensor.sizes(), "x")),
                        "use the config the file was exported with");
      if (!torch::isfinite(*it->second).all().item<bool>())
        throw UserError(file, p.name, "holds NaN or inf values", "export the weights of a run that did not diverge");
      p.tensor.copy_(*it->second);
      by_name.erase(it);
    }
  }
  if (!by_name.empty())
    throw UserError(file, by_name.begin()->first, "is in the file but not in the model",
                    "use the config the file was exported with");
  const std::string made = first_missing_parent(out_checkpoint);  // removed again if the write fails
  ensure_parent_dir(out_checkpoint, "--out");
  try {
    save_checkpoint(out_checkpoint, meta, *run.model, run.opt.get());
  } catch (...) {
    remove_created_parents(out_checkpoint, made);
    throw;
  }
  return params.size();
}

}  // namespace scaleinv
