#include "engine/train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"

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

// The file is the torch archive followed by a 20-byte trailer: kTrailerMagic, the archive's
// length (8 bytes, little-endian) and its CRC-32 (4 bytes, zlib). Loading checks both before the
// archive is parsed, so a torn or bit-flipped checkpoint is refused instead of loading garbage.
constexpr char kTrailerMagic[8] = {'S', 'C', 'I', 'V', 'C', 'R', 'C', '1'};
constexpr size_t kTrailerBytes = 20;

uint32_t crc32_of(const char* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {  // zlib's crc32 takes a uInt length
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string with_trailer(std::string archive) {
  const uint64_t len = archive.size();
  const uint32_t crc = crc32_of(archive.data(), archive.size());
  archive.append(kTrailerMagic, sizeof kTrailerMagic);
  for (int i = 0; i < 8; ++i) archive.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  for (int i = 0; i < 4; ++i) archive.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  return archive;
}

torch::serialize::InputArchive open_archive(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw UserError(path, "", "checkpoint not found", "train first, or point at an existing checkpoint.pt");
  const std::string bytes = read_file(path);
  const char* fix = "the file is damaged: delete it to start over, or restore a copy";
  if (bytes.size() < kTrailerBytes ||
      bytes.compare(bytes.size() - kTrailerBytes, sizeof kTrailerMagic, kTrailerMagic, sizeof kTrailerMagic) != 0)
    throw UserError(path, "checksum", "no scaleinv checksum trailer (truncated, not a checkpoint, or written before checksums)", fix);
  const auto* t = reinterpret_cast<const unsigned char*>(bytes.data() + bytes.size() - kTrailerBytes + 8);
  uint64_t len = 0;
  uint32_t crc = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(t[i]) << (8 * i);
  for (int i = 0; i < 4; ++i) crc |= static_cast<uint32_t>(t[8 + i]) << (8 * i);
  if (len != bytes.size() - kTrailerBytes)
    throw UserError(path, "checksum", fmt::format("length {} in the trailer, {} bytes in the file", len,
                                                  bytes.size() - kTrailerBytes), fix);
  if (crc32_of(bytes.data(), len) != crc)
    throw UserError(path, "checksum", "CRC-32 mismatch: the checkpoint's bytes changed after it was written", fix);
  torch::serialize::InputArchive ar;
  try {
    // Onto the CPU: a checkpoint written by a CUDA run holds CUDA tensors, which would otherwise be
    // restored on a GPU (and fail where there is none: `sample` or an export on a laptop). The
    // loaders copy each tensor to where the model and optimizer live.
    ar.load_from(bytes.data(), static_cast<size_t>(len), torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    throw UserError(path, "", "not a readable checkpoint", fix);
  }
  return ar;
}

}  // namespace

void save_checkpoint(const std::string& path, const CheckpointMeta& meta, Model& model, const Optimizer* opt) {
  torch::serialize::OutputArchive ar;
  ar.write("meta", c10::IValue(meta_json(meta)));
  torch::serialize::OutputArchive params;
  for (const TaggedParam& p : model.tagged_parameters()) {
    // A parameter packed beside others (Model::move_to on CUDA) is a view of a larger buffer, which
    // the archive would write whole: write its own values, so the file is the same either way.
    torch::Tensor t = p.tensor.detach();
    if (t.storage().nbytes() != static_cast<size_t>(t.numel()) * t.element_size()) t = t.clone();
    params.write(p.name, t, /*is_buffer=*/true);
  }
  ar.write("params", params);
  // Model state that is not trained (a mixture's selection biases), only when the model has some:
  // the files of the other models are as they were.
  if (const auto buffers = model.named_buffers(/*recurse=*/true); buffers.size() > 0) {
    torch::serialize::OutputArchive bs;
    for (const auto& b : buffers) bs.write(b.key(), b.value().detach(), /*is_buffer=*/true);
    ar.write("buffers", bs);
  }
  ar.write("losses", torch::tensor(meta.losses, torch::kFloat64), /*is_buffer=*/true);
  if (opt) {
    torch::serialize::OutputArchive os;
    opt->save(os);
    ar.write("optimizer", os);
  }
  std::ostringstream archive;
  ar.save_to(archive);
  write_file_atomic(path, with_trailer(std::move(archive).str()));  // unique temporary name, renamed
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  torch::serialize::InputArchive ar = open_archive(path);
  c10::IValue v;
  if (!ar.try_read("meta", v) || !v.isString())
    throw UserError(path, "meta", "missing metadata", "this is not a scaleinv checkpoint");
  CheckpointMeta m;
  try {
    const nlohmann::json j = nlohmann::json::parse(v.toStringRef());
    m.step = j.at("step").get<int64_t>();
    m.table = param_from_json(j.at("table"));
    m.config = train_config_from_json(j.at("config"));
    m.fingerprint = j.at("fingerprint").get<std::string>();
  } catch (const nlohmann::json::exception& e) {  // intact bytes (the checksum held), unusable contents
    throw UserError(path, "meta", fmt::format("unreadable metadata ({})", e.what()),
                    "the file is damaged or not from this scaleinv: delete it to start over, or restore a copy");
  }
  if (m.step < 0)
    throw UserError(path, "meta", fmt::format("step {} is negative", m.step),
                    "the file is damaged: delete it to start over, or restore a copy");
  torch::Tensor losses;
  if (!ar.try_read("losses", losses, /*is_buffer=*/true) || losses.dim() != 1 || losses.size(0) != m.step)
    throw UserError(path, "losses", fmt::format("the loss history does not cover the {} steps done", m.step),
                    "the file is damaged: delete it to start over, or restore a copy");
  losses = losses.to(torch::kFloat64).contiguous();
  m.losses.assign(losses.data_ptr<double>(), losses.data_ptr<double>() + losses.numel());
  if (m.fingerprint != param_fingerprint(m.table))
    throw UserError(path, "fingerprint", "the stored table does not match its fingerprint", "the file is corrupt");
  return m;
}

void load_checkpoint(const std::string& path, Model& model, Optimizer* opt) {
  torch::serialize::InputArchive ar = open_archive(path);
  torch::serialize::InputArchive params;
  if (!ar.try_read("params", params))
    throw UserError(path, "params", "no parameters in the checkpoint",
                    "the file is damaged: delete it to start over, or restore a copy");
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
  if (const auto buffers = model.named_buffers(/*recurse=*/true); buffers.size() > 0) {
    torch::serialize::InputArchive bs;
    if (!ar.try_read("buffers", bs))
      throw UserError(path, "buffers", "no model state besides the parameters (e.g. a mixture's selection biases)",
                      "the model config differs from the checkpoint's (e.g. model.bias_rate)");
    for (const auto& b : buffers) {
      torch::Tensor t;
      if (!bs.try_read(b.key(), t, /*is_buffer=*/true) || !t.sizes().equals(b.value().sizes()))
        throw UserError(path, b.key(), "missing from the checkpoint or of another shape",
                        "build the model with the checkpoint's config");
      b.value().copy_(t);
    }
  }
  if (opt) {
    torch::serialize::InputArchive os;
    if (!ar.try_read("optimizer", os))
      throw UserError(path, "optimizer", "no optimizer state in the checkpoint",
                      "the file is damaged: delete it to start over, or restore a copy");
    opt->load(os);
  }
}

}  // namespace scaleinv
