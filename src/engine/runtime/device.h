// The device a run asked for, checked once for every caller (train, ensemble, coordinate check,
// bench). Throws UserError(where, field, ...) for a name other than cpu/cuda, or for cuda where
// no CUDA device is available (a CPU-only libtorch, or no GPU): the one line names the file or
// the command line, the field and the fix.
#pragma once

#include <string>

#include <torch/types.h>

namespace scaleinv {

// "cpu" -> the CPU; "cuda" -> CUDA device local_rank mod the device count (data-parallel ranks on
// one machine share its GPUs round-robin).
torch::Device resolve_device(const std::string& device, const std::string& where, const std::string& field,
                             int local_rank = 0);

}  // namespace scaleinv
