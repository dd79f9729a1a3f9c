// c10d's version differences (see c10d_compat.h).
#include "engine/dist/c10d_compat.h"

#include <stdexcept>
#include <string>

// A CUDA libtorch's torch_cuda target defines USE_C10D_NCCL for whoever links it; CMake defines
// SCALEINV_NO_NCCL where it has no nccl.h of libtorch's NCCL version (SCALEINV_NCCL_INCLUDE).
#if defined(USE_C10D_NCCL) && TORCH_VERSION_MAJOR >= 2 && !defined(SCALEINV_NO_NCCL)
#define SCALEINV_HAS_NCCL 1
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define SCALEINV_HAS_NCCL 0
#endif

namespace scaleinv::compat {

namespace {
// Turns the libuv server off where the options have it on: false where there is nothing to turn
// off (off already, or no such field, as in libtorch 1.13: a field test, not a version test).
template <class Options>
bool turn_libuv_off(Options& o) {
  if constexpr (requires { o.useLibUV; }) {
    if (!o.useLibUV) return false;
    o.useLibUV = false;
    return true;
  } else {
    return false;
  }
}
}  // namespace

c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, c10d::TCPStoreOptions opts) {
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, opts);
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("libuv") == std::string::npos || !turn_libuv_off(opts)) throw;
  }
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

bool has_nccl() { return SCALEINV_HAS_NCCL != 0; }

c10::intrusive_ptr<Collectives> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                std::chrono::milliseconds timeout, const at::Device& device) {
#if SCALEINV_HAS_NCCL
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  // NCCL's watchdog counts each collective's timeout from its launch and, by default
  // (TORCH_NCCL_ASYNC_ERROR_HANDLING=3), tears the process down when it runs out. dist.cpp's own
  // wait counts `timeout` from when it starts waiting, after backward, which launched the first
  // buckets earlier: with the same value the watchdog would kill a rank whose peer stalled before
  // that wait could report the stall as one line naming the lost rank. NCCL gets the backward's
  // time on top (twice the timeout, plus a minute).
  opts->timeout = 2 * timeout + std::chrono::milliseconds(60000);
  auto group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, opts);
  group->eagerConnectSingleDevice(device);
  return group;
#else
  (void)store, (void)rank, (void)world, (void)timeout, (void)device;
  throw std::runtime_error("this libtorch has no NCCL (a CPU build, or libtorch 1.13)");
#endif
}

namespace {
// Calls f(the NCCL group) where `group` is one, swallowing what it throws (both callers run at the
// end of a run, where nothing is left to report it to); nothing for any other group or without NCCL.
template <class F>
void on_nccl_group(const c10::intrusive_ptr<Collectives>& group, F f) {
#if SCALEINV_HAS_NCCL
  try {
    if (auto nccl = c10::dynamic_intrusive_pointer_cast<c10d::ProcessGroupNCCL>(group)) f(*nccl);
  } catch (...) {
  }
#else
  (void)group;
  (void)f;
#endif
}
}  // namespace

void abort_if_nccl(const c10::intrusive_ptr<Collectives>& group) {
  on_nccl_group(group, [](auto& nccl) { nccl.abort(); });
}

void shutdown_if_nccl(const c10::intrusive_ptr<Collectives>& group) {
  on_nccl_group(group, [](auto& nccl) { nccl.shutdown(); });
}

}  // namespace scaleinv::compat
