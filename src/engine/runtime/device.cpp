// The requested device, checked (see device.h).
#include "engine/runtime/device.h"

#include <algorithm>

#include <fmt/format.h>
#include <torch/cuda.h>

#include "brain/util/errors.h"

namespace scaleinv {

torch::Device resolve_device(const std::string& device, const std::string& where, const std::string& field,
                             int local_rank) {
  const std::string use_cpu = field.rfind("--", 0) == 0 ? fmt::format("use {} cpu", field)
                                                        : fmt::format("set {} = \"cpu\"", field);
  if (device != "cpu" && device != "cuda")
    throw UserError(where, field, fmt::format("unknown device '{}'", device), fmt::format("{} or cuda", use_cpu));
  if (device == "cpu") return torch::Device(torch::kCPU);
  if (!torch::cuda::is_available())
    throw UserError(where, field, "cuda requested but no CUDA device is available",
                    fmt::format("{}, or build against a CUDA libtorch (docs/gpu.md)", use_cpu));
  const int n = static_cast<int>(torch::cuda::device_count());
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % std::max(1, n)));
}

}  // namespace scaleinv
