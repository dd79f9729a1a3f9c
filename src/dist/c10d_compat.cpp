// c10d's version differences (see c10d_compat.h).
#include "dist/c10d_compat.h"

#include <stdexcept>

// A CUDA libtorch's torch_cuda target defines USE_C10D_NCCL for whoever links it.
#if defined(USE_C10D_NCCL) && TORCH_VERSION_MAJOR >= 2
#define SCALEINV_HAS_NCCL 1
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define SCALEINV_HAS_NCCL 0
#endif

namespace scaleinv::compat {

bool has_nccl() { return SCALEINV_HAS_NCCL != 0; }

c10::intrusive_ptr<Collectives> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                std::chrono::milliseconds timeout) {
#if SCALEINV_HAS_NCCL
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, opts);
#else
  (void)store, (void)rank, (void)world, (void)timeout;
  throw std::runtime_error("this libtorch has no NCCL (a CPU build, or libtorch 1.13)");
#endif
}

}  // namespace scaleinv::compat
