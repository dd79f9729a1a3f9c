#include "core/threads.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <thread>

namespace scaleinv {

namespace {

// OpenBLAS (Debian's libopenblas0-pthread, what libtorch's matmuls call here) keeps its own
// pthread pool beside libtorch's OpenMP pool. With both at the core count, a 2-core machine runs
// 3-4 busy threads (OpenBLAS workers spin after each call): measured in `scaleinv bench` (README,
// Speed), GPT training at width 64 went from 7.8 s to 0.30 s per step under load with the BLAS
// pool at 1 thread. Looked up at run time, so other BLAS builds are left alone. OpenBLAS splits
// a GEMM's output, not its reduction, across threads: results do not depend on this setting.
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

int configure_threads(int requested) {
  int n = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  torch::set_num_threads(n);
  // SCALEINV_BLAS_THREADS overrides the BLAS pool's size (0: leave OpenBLAS's own default).
  int blas = 1;
  if (const char* e = std::getenv("SCALEINV_BLAS_THREADS")) blas = std::atoi(e);
  if (blas > 0) set_blas_threads(blas);
  return n;
}

}  // namespace scaleinv
