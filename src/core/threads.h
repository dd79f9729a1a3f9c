#pragma once
// libtorch's intra-op pool defaults to 1 thread on these machines (DESIGN.md note): follow the cores.
namespace scaleinv {
// Sets libtorch's intra-op threads to `requested`, or to the machine's core count when requested <= 0.
// Returns the count set.
int configure_threads(int requested = 0);
}  // namespace scaleinv
