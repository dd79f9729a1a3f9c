#pragma once
// Weights in the safetensors format (issue 15): readable from PyTorch without scaleinv.
//
// Layout (the format's definition): 8 bytes, the header's length N as a little-endian uint64; N
// bytes of JSON, {"<tensor name>": {"dtype": "F32" | "F64" | "BF16" | "F16" | "I64" | "I32" | "U8",
// "shape": [...], "data_offsets": [begin, end]}, ..., "__metadata__": {string: string}}, padded
// with spaces to a multiple of 8; then the tensors' bytes, little-endian, row-major, each at
// [8 + N + begin, 8 + N + end).
//
// export_checkpoint writes a checkpoint's parameters under their scaleinv names (raw, as stored:
// the table's forward multipliers are not applied), then the model's untrained state (a mixture's
// selection biases "blocks.{l}.mlp.expert_bias", model.bias_rate > 0), with __metadata__ "scaleinv.table" (the table's
// JSON), "scaleinv.config" (the run config's JSON), "scaleinv.step", "scaleinv.fingerprint" and
// "scaleinv.note" (that the multipliers live in the table). import_safetensors builds the model of a
// config (the file's own metadata, or a TOML file given) and writes a checkpoint at step 0 with a
// fresh optimizer state, so `train --resume` starts from the imported weights.
// Errors a user can cause (a truncated file, a header that is not JSON, offsets outside the data,
// an unknown dtype, a tensor missing or of the wrong shape for the model) are UserErrors naming the
// file and the tensor or field. Every write is atomic (brain/util/atomic_file.h).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace scaleinv {

struct SafeTensors {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // file order
  std::map<std::string, std::string> metadata;
};

void write_safetensors(const std::string& path, const SafeTensors& st);
SafeTensors read_safetensors(const std::string& path);

// Returns the number of tensors written.
size_t export_checkpoint(const std::string& checkpoint, const std::string& out);
// config_toml: "" to take the config (and table) from the file's metadata.
size_t import_safetensors(const std::string& file, const std::string& config_toml, const std::string& out_checkpoint);

}  // namespace scaleinv
