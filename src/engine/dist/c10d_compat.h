#pragma once
// What differs between libtorch versions in c10d, torch's distributed engine (the rest of the
// version differences are in engine/runtime/torch_compat.h): the collectives' base class, the rendezvous
// store's libuv server, and NCCL, which only a CUDA libtorch has. With engine/runtime/torch_compat.cpp, this
// header and c10d_compat.cpp are the only files that read TORCH_VERSION.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO  // Debian's libtorch is built with Gloo; its header hides the class without this
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

#include <chrono>
#include <string>

namespace scaleinv::compat {

// The base class of ProcessGroupGloo and ProcessGroupNCCL, through which every collective is called
// (allreduce, broadcast, allgather, barrier): c10d::ProcessGroup in 1.13, c10d::Backend in 2.x.
#if TORCH_VERSION_MAJOR >= 2
using Collectives = c10d::Backend;
#else
using Collectives = c10d::ProcessGroup;
#endif

// A TCPStore at host:opts.port (served when opts.isServer). libtorch >= 2.4 asks for its libuv
// server by default, and a libtorch built without libuv (Debian's 2.6) then refuses every store:
// there the store is made again without it (the classic server; clients speak to either).
// Throws what the TCPStore constructor throws otherwise (a port in use, no server in time).
c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, c10d::TCPStoreOptions opts);

// True where this build can make a NCCL group (a CUDA libtorch 2.x built with NCCL).
bool has_nccl();

// A NCCL group of `world` ranks over `store` (every rank calls it; collectives then take CUDA
// tensors on `device`, one GPU per rank), its communicator connected here rather than at the first
// collective, so that a failure to start is thrown by this call. `timeout` is the caller's own
// stall limit; NCCL's watchdog gets 2 * timeout + 60 s, so the caller's limit runs out first. Throws std::runtime_error where
// has_nccl() is false, and what NCCL's start-up throws.
c10::intrusive_ptr<Collectives> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                std::chrono::milliseconds timeout, const at::Device& device);

// After a failure: aborts `group`'s NCCL communicators where it is a NCCL group (a peer that died
// mid-all-reduce leaves this rank's NCCL kernel spinning; without the abort, exiting could wait
// for NCCL's watchdog and end in SIGABRT rather than the rank's own exit code). A no-op for any
// other group and without NCCL; throws nothing.
void abort_if_nccl(const c10::intrusive_ptr<Collectives>& group);

// At a normal end: shuts `group` down where it is a NCCL group (its pending work finished, its
// communicators destroyed), as torch's destroy_process_group does; the group's destructor in
// libtorch >= 2.4 does the same after a warning on stderr that the run did not. A no-op for any
// other group and without NCCL; throws nothing.
void shutdown_if_nccl(const c10::intrusive_ptr<Collectives>& group);

}  // namespace scaleinv::compat
