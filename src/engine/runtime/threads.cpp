#include "engine/runtime/threads.h"

#include <dlfcn.h>
#include <torch/utils.h>

#include <cstdlib>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "brain/util/errors.h"

namespace scaleinv {

namespace {

// OpenBLAS (Debian's libopenblas0-pthread, what libtorch's matmuls call here) keeps its own
// pthread pool beside libtorch's OpenMP pool. With both pools at the core count, a 2-core machine
// runs 3-4 busy threads (OpenMP workers spin after each parallel region while OpenBLAS's workers
// want the same cores). Two ways out were measured (docs/speed.md; bench at the peer's shapes):
//   torch 2 threads, BLAS 1 (the earlier policy): width 64 27.5k tok/s, width 512 1067 tok/s;
//   torch 1 thread,  BLAS 2 (this policy):        width 64 47.2k tok/s, width 512 1999 tok/s.
// The matmuls are most of the step and OpenBLAS splits them well; the elementwise ops are small
// enough that libtorch's pool costs more in wake-ups than it gains. Looked up at run time, so other
// BLAS builds are left alone (and then libtorch keeps every core). OpenBLAS splits a GEMM's
// output, not its reduction, across threads: matmul results do not depend on this setting.
ThreadPlan g_plan;

// UserError (file "environment", field NAME) when set to anything but a count in 0..4096.
int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  if (!e || !*e) return fallback;
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  if (*end != '\0' || v < 0 || v > 4096)
    throw UserError("environment", name, fmt::format("'{}' is not a thread count", e),
                    fmt::format("unset {} or give a count from 0 to 4096", name));
  return static_cast<int>(v);
}
}  // namespace

int set_blas_threads(int n) {
  using SetFn = void (*)(int);
  using GetFn = int (*)();
  auto set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!set || !get) return -1;
  const int prev = get();
  set(n);
  return prev;
}

ThreadPlan configure_threads(int requested) {
  ThreadPlan p;
  p.cores = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  if (p.cores <= 0) p.cores = 1;
  const int blas = env_int("SCALEINV_BLAS_THREADS", p.cores);
  if (blas > 0 && set_blas_threads(blas) >= 0) p.blas_threads = blas;
  // With OpenBLAS holding the cores, libtorch's own pool stays on the calling thread.
  p.torch_threads = env_int("SCALEINV_TORCH_THREADS", p.blas_threads > 0 ? 1 : p.cores);
  if (p.torch_threads <= 0) p.torch_threads = 1;
  torch::set_num_threads(p.torch_threads);
  g_plan = p;
  return p;
}

const ThreadPlan& thread_plan() { return g_plan; }

}  // namespace scaleinv
