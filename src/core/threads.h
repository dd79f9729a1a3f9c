#pragma once
// libtorch's intra-op pool defaults to 1 thread on these machines (DESIGN.md note): follow the cores.
namespace scaleinv {
// Sets libtorch's intra-op threads to `requested`, or to the machine's core count when requested <= 0.
// Returns the count set.
int configure_threads(int requested = 0);
// OpenBLAS's own pthread pool (libtorch's matmuls; see threads.cpp): sets it to n threads and
// returns the previous count; -1 (and nothing set) when the BLAS is not OpenBLAS.
int set_blas_threads(int n);
}  // namespace scaleinv
