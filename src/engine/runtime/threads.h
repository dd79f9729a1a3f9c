#pragma once
// How a process splits its cores between libtorch's intra-op pool (elementwise ops, norms,
// softmax) and OpenBLAS's own pthread pool (every matmul). Measured on 2 cores (docs/speed.md):
// matmuls on all cores through OpenBLAS and the elementwise ops on the calling thread beat the
// other splits at GPT widths 64, 256 and 512 and tied at 128 (width 512: 1999 vs 1067 tokens/s
// for the torch-2, BLAS-1 split this replaced).
namespace scaleinv {

struct ThreadPlan {
  int cores = 1;          // what the process may use (--threads, else the machine's cores)
  int torch_threads = 1;  // libtorch intra-op pool
  int blas_threads = 0;   // OpenBLAS pool; 0 when the BLAS is not OpenBLAS (left alone)
};

// Applies the split for `requested` cores (<= 0: the machine's core count) and returns it.
// Overrides: SCALEINV_TORCH_THREADS, SCALEINV_BLAS_THREADS (0 leaves OpenBLAS's default); either
// set to anything but a count in 0..4096 is a UserError naming it.
ThreadPlan configure_threads(int requested = 0);
// The split configure_threads last applied (the defaults before any call).
const ThreadPlan& thread_plan();
// OpenBLAS's own pthread pool (libtorch's matmuls; see threads.cpp): sets it to n threads and
// returns the previous count; -1 (and nothing set) when the BLAS is not OpenBLAS.
int set_blas_threads(int n);
}  // namespace scaleinv
