#pragma once
// What differs between the libtorch versions scaleinv builds against: Debian's 1.13 (the CPU
// build) and a CUDA libtorch 2.x (2.4 or newer, the GPU build). Every version test in src/ lives in
// torch_compat.cpp behind these named helpers (c10d's in engine/dist/c10d_compat.{h,cpp}); no other file
// checks TORCH_VERSION.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace scaleinv::compat {

// "MAJOR.MINOR.PATCH" of the libtorch this binary was built against.
std::string torch_version();

// True where fused scaled-dot-product attention (at::scaled_dot_product_attention with an explicit
// scale: libtorch >= 2.1) is compiled in.
bool has_fused_attention();

// softmax(scale q k^T + causal mask) v for q, k, v of shape [B, H, T, d_head]. On CUDA tensors
// with fused attention compiled in: at::scaled_dot_product_attention (flash attention on Hopper),
// `scale` passed as its scale. Otherwise (the CPU, libtorch 1.13) the explicit product, softmax
// and product, with the causal mask cached in *mask (rebuilt when T or the device changes), so
// CPU numerics are the same in every build.
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                        double scale, torch::Tensor* mask);

// bf16 autocast on CUDA for the scope's forward pass (the switch and dtype are per thread; backward
// follows the dtypes forward chose). Weights, gradients and optimizer state stay fp32. Restores the
// previous state and clears autocast's cache of bf16 weight copies: scope it to one forward pass
// (as PyTorch's `with autocast()` per step), since a cache kept across an update serves the old
// weights. libtorch 2.x's cache is one per process, so under `sweep --jobs N` one job's clear also
// drops the other jobs' cached copies, which are then cast again: extra casts, the same values.
class CudaAutocast {
 public:
  explicit CudaAutocast(bool on);
  ~CudaAutocast();
  CudaAutocast(const CudaAutocast&) = delete;
  CudaAutocast& operator=(const CudaAutocast&) = delete;

 private:
  bool on_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kHalf;
};

// bf16 autocast on the CPU for the scope (thread-local; restores the previous state and clears the
// cast cache), for tests only: the CPU suite checks with it that code written for CUDA's bf16
// autocast (custom autograd functions whose saved inputs stay fp32 while their output and incoming
// gradient are bf16) runs, without a GPU. Training never turns it on.
class CpuAutocastForTests {
 public:
  CpuAutocastForTests();
  ~CpuAutocastForTests();
  CpuAutocastForTests(const CpuAutocastForTests&) = delete;
  CpuAutocastForTests& operator=(const CpuAutocastForTests&) = delete;

 private:
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kBFloat16;
};

// The dtype autocast casts to on `t`'s device type, where autocast is on there in this thread
// (nullopt otherwise): for custom autograd functions that cast their inputs themselves.
std::optional<at::ScalarType> autocast_dtype(const torch::Tensor& t);

// One fused Adam step (PyTorch's multi-tensor CUDA kernels, libtorch >= 2.4) over tensors that
// share one step count t (1-based), LR, weight decay and epsilon: for each i, with `decay`
//   Decoupled (AdamW, _fused_adamw_):  p *= 1 - lr * weight_decay;  g' = g
//   Coupled   (Adam + L2, _fused_adam_): g' = g + weight_decay * p
// then m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
// Returns false (and touches nothing) where fused_adam_takes is false for any quadruple: the caller
// then takes its own per-tensor path. A caller stepping several sets asks fused_adam_takes of every
// tensor first, so that no set is stepped twice (fused, then again by its fallback).
enum class WeightDecay { Decoupled, Coupled };
// Whether the fused kernel takes param p, gradient g and moments m, v: compiled in (libtorch >=
// 2.4), all four fp32 on one CUDA device (or as a FusedAdamScope says), dense, with the same
// sizes and strides (the kernel throws otherwise). Views qualify: an ensemble's member slices
// p[e] of a contiguous [E, ...] tensor are dense.
bool fused_adam_takes(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m, const torch::Tensor& v);
// True where the fused kernels are compiled in (libtorch >= 2.4).
bool has_fused_adam();
// Where fused_adam_takes accepts tensors, for the lifetime of a FusedAdamScope (this thread):
//   Auto     on CUDA (the default, without a scope)
//   Off      nowhere: the optimizers' per-tensor loop everywhere (`bench` times what the fused
//            kernels save, in the same run)
//   AlsoCpu  on CUDA and on the CPU, where libtorch >= 2.4 has CPU kernels of the same update: lets
//            the CPU suite of a libtorch 2.x build check the fused path (which tensors go into
//            which set, with which LR and decay) against the loop. For tests only: a CPU run
//            otherwise keeps the loop, the path CPU results (and their bit-for-bit claims) are
//            measured on.
enum class FusedAdamUse { Auto, Off, AlsoCpu };
class FusedAdamScope {
 public:
  explicit FusedAdamScope(FusedAdamUse use);
  ~FusedAdamScope();
  FusedAdamScope(const FusedAdamScope&) = delete;
  FusedAdamScope& operator=(const FusedAdamScope&) = delete;

 private:
  FusedAdamUse previous_;
};
// How many fused Adam/AdamW kernels this process has launched (fused_adam calls that returned
// true with tensors): lets a test tell the fused path from the loop's, which give the same curve.
int64_t fused_adam_launches();
bool fused_adam(WeightDecay decay, const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                const std::vector<torch::Tensor>& exp_avgs, const std::vector<torch::Tensor>& exp_avg_sqs, int64_t t,
                double lr, double beta1, double beta2, double weight_decay, double eps);

// A host tensor on `dev` without blocking the host: on CUDA through pinned (page-locked) memory and
// an asynchronous copy (a copy from pageable memory would wait for the stream's earlier work, a
// device sync per batch); elsewhere a plain .to(dev).
torch::Tensor to_device_async(const torch::Tensor& host, const torch::Device& dev);

// TF32 tensor cores for fp32 matmuls and convolutions on CUDA (cuBLAS and cuDNN); no effect on
// the CPU.
void set_tf32(bool on);

// True in a build against a CUDA libtorch (CUDA graphs and side streams compiled in).
bool has_cuda_graphs();

// The identity of the physical GPU behind a CUDA device: its UUID as 32 hex digits, the same
// whatever CUDA_VISIBLE_DEVICES numbers it (so ranks that each see "cuda:0" can tell whether it is
// one card). "" for the CPU and in a build without CUDA.
std::string cuda_device_uuid(const torch::Device& dev);

// Makes `dev` this thread's current CUDA device, where CUDA calls that name no tensor go (a new
// context, a stream or event without a device): a data-parallel rank on GPU LOCAL_RANK would
// otherwise also open a context on GPU 0. A no-op for the CPU and in a build without CUDA.
void use_device(const torch::Device& dev);

// For its lifetime, the CUDA work of this thread goes to a side stream of `dev` (a CUDA graph is
// captured on a non-default stream, and PyTorch warms up on the stream it captures on): the
// thread's current stream where that is already not the default one (a sweep job's own stream),
// else one from libtorch's pool, started after the work queued before it. The destructor waits for
// that stream and restores the previous one. A no-op when `on` is false.
// Throws std::runtime_error when `on` in a build without CUDA.
class CudaSideStream {
 public:
  CudaSideStream(bool on, const torch::Device& dev);
  ~CudaSideStream();
  CudaSideStream(const CudaSideStream&) = delete;
  CudaSideStream& operator=(const CudaSideStream&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A CUDA graph: `body` runs once under capture on the current (side) stream, so its kernels are
// recorded, not run; replay() then launches them all at once, on the same memory. Whatever the body
// reads must stay where it is (static inputs refilled in place between replays) and whatever it
// writes is rewritten by every replay (its outputs, the .grad a backward inside it created).
// Throws std::runtime_error in a build without CUDA, and whatever capture throws (an operation
// that cannot be captured: a host read-back, a pageable copy). A capture that fails leaves the
// stream and the CUDA allocator as they were before it (nothing routed to the graph's pool, and the
// pool released: what the body allocated goes back with the next empty_cuda_cache).
class CudaGraph {
 public:
  explicit CudaGraph(const std::function<void()>& body);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  void replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Hands the CUDA allocator's cached, unused blocks back to the driver (c10's emptyCache; the
// allocator does the same itself before it reports out of memory). Throws (an internal assert) while
// the allocator believes a graph capture is underway. A no-op without CUDA.
void empty_cuda_cache();

// True when `e` is an allocation that failed: std::bad_alloc, c10::OutOfMemoryError (CUDA's
// allocator), or the plain c10::Error that libtorch 1.13's CPU allocator throws ("not enough
// memory", "can't allocate memory"). Throws nothing.
bool is_out_of_memory(const std::exception& e);

// CUDA's sync debug mode (c10::cuda::warning_state, process-wide): while forbidden, every operation
// that makes the host wait for the device (a read-back such as .item(), a copy to pageable memory,
// a stream or device synchronize) throws a c10::Error instead. A test's proof that the steps
// between read-backs never wait for the GPU. A no-op without CUDA.
void forbid_cuda_syncs(bool forbidden);

// Caps what the CUDA allocator may hold on the current device at `fraction` of its memory (c10's
// setMemoryFraction; 1 lifts the cap): allocations past it fail as a full device's would, with
// c10::OutOfMemoryError. For tests of what an out-of-memory does. A no-op without CUDA.
void limit_cuda_memory(double fraction);
// The current CUDA device's memory in bytes; 0 without CUDA.
int64_t cuda_total_bytes();

// Bytes the CUDA allocator holds from the driver on the current device (in use or cached, every
// pool, graphs' included); 0 without CUDA.
int64_t cuda_reserved_bytes();

}  // namespace scaleinv::compat
