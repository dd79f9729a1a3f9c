// The libtorch version differences (see torch_compat.h). The only file that reads TORCH_VERSION.
#include "engine/runtime/torch_compat.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <atomic>
#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

// SCALEINV_CUDA: CMake's flag for a CUDA libtorch (its torch_cuda target).
#if defined(SCALEINV_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

// Fused attention with an explicit scale: 2.1. Device-typed autocast calls: 2.4 (the older
// CUDA-only calls are deprecated there and crash in 2.11's bench path).
#define SCALEINV_TORCH_AT_LEAST(MAJ, MIN) \
  (TORCH_VERSION_MAJOR > (MAJ) || (TORCH_VERSION_MAJOR == (MAJ) && TORCH_VERSION_MINOR >= (MIN)))

namespace scaleinv::compat {

std::string torch_version() {
  return fmt::format("{}.{}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
}

bool has_fused_attention() { return SCALEINV_TORCH_AT_LEAST(2, 1); }

torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                        double scale, torch::Tensor* mask) {
#if SCALEINV_TORCH_AT_LEAST(2, 1)
  if (q.is_cuda()) return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal, scale);
#endif
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1));  // [B, H, T, T]
  if (scale != 1.0) scores.mul_(scale);
  if (causal) {
    const int64_t T = q.size(-2);
    if (!mask->defined() || mask->size(0) != T || mask->device() != scores.device())
      *mask = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(scores.device())).triu(1);
    scores.masked_fill_(*mask, -std::numeric_limits<double>::infinity());  // (matmul keeps no output for backward)
  }
  return torch::matmul(torch::softmax(scores, -1), v);
}

namespace {
// Autocast's switch and dtype for one device type (CUDA or the CPU), read and set through
// libtorch 2.4+'s device-typed calls or 1.13's per-device ones.
struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;
};
AutocastState autocast_state(at::DeviceType device) {
#if SCALEINV_TORCH_AT_LEAST(2, 4)
  return {at::autocast::is_autocast_enabled(device), at::autocast::get_autocast_dtype(device)};
#else
  if (device == at::kCUDA) return {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
  return {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype()};
#endif
}
void set_autocast_state(at::DeviceType device, const AutocastState& s) {
#if SCALEINV_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device, s.dtype);
  at::autocast::set_autocast_enabled(device, s.enabled);
#else
  if (device == at::kCUDA) {
    at::autocast::set_autocast_gpu_dtype(s.dtype);
    at::autocast::set_enabled(s.enabled);
  } else {
    at::autocast::set_autocast_cpu_dtype(s.dtype);
    at::autocast::set_cpu_enabled(s.enabled);
  }
#endif
}
}  // namespace

CudaAutocast::CudaAutocast(bool on) : on_(on) {
  if (!on_) return;
  const AutocastState prev = autocast_state(at::kCUDA);
  prev_enabled_ = prev.enabled;
  prev_dtype_ = prev.dtype;
  set_autocast_state(at::kCUDA, {true, at::kBFloat16});
}

CudaAutocast::~CudaAutocast() {
  if (!on_) return;
  set_autocast_state(at::kCUDA, {prev_enabled_, prev_dtype_});
  at::autocast::clear_cache();
}

CpuAutocastForTests::CpuAutocastForTests() {
  const AutocastState prev = autocast_state(at::kCPU);
  prev_enabled_ = prev.enabled;
  prev_dtype_ = prev.dtype;
  set_autocast_state(at::kCPU, {true, at::kBFloat16});
}

CpuAutocastForTests::~CpuAutocastForTests() {
  set_autocast_state(at::kCPU, {prev_enabled_, prev_dtype_});
  at::autocast::clear_cache();
}

std::optional<at::ScalarType> autocast_dtype(const torch::Tensor& t) {
  const AutocastState s = autocast_state(t.device().type());
  if (!s.enabled) return std::nullopt;
  return s.dtype;
}

namespace {
thread_local FusedAdamUse t_fused_adam_use = FusedAdamUse::Auto;
}  // namespace

FusedAdamScope::FusedAdamScope(FusedAdamUse use) : previous_(t_fused_adam_use) { t_fused_adam_use = use; }
FusedAdamScope::~FusedAdamScope() { t_fused_adam_use = previous_; }

bool has_fused_adam() { return SCALEINV_TORCH_AT_LEAST(2, 4); }

bool fused_adam_takes(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m, const torch::Tensor& v) {
#if SCALEINV_TORCH_AT_LEAST(2, 4)
  // The kernels' fast-path check (check_fast_path_restrictions) throws unless the four tensors
  // share sizes and strides and are dense; it is asked here first, so nothing throws mid-step.
  const FusedAdamUse use = t_fused_adam_use;
  if (use == FusedAdamUse::Off) return false;
  for (const torch::Tensor* x : {&p, &g, &m, &v})
    if (!x->defined() || !(x->is_cuda() || (use == FusedAdamUse::AlsoCpu && x->is_cpu())) ||
        x->scalar_type() != torch::kFloat32 || x->sizes() != p.sizes() || x->strides() != p.strides() ||
        !x->is_non_overlapping_and_dense() || x->device() != p.device())
      return false;
  return true;
#else
  (void)p, (void)g, (void)m, (void)v;
  return false;
#endif
}

namespace {
std::atomic<int64_t> g_fused_adam_launches{0};
}  // namespace

int64_t fused_adam_launches() { return g_fused_adam_launches.load(); }

bool fused_adam(WeightDecay decay, const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                const std::vector<torch::Tensor>& exp_avgs, const std::vector<torch::Tensor>& exp_avg_sqs, int64_t t,
                double lr, double beta1, double beta2, double weight_decay, double eps) {
#if SCALEINV_TORCH_AT_LEAST(2, 4)
  if (params.empty()) return true;
  for (size_t i = 0; i < params.size(); ++i)
    if (!fused_adam_takes(params[i], grads.at(i), exp_avgs.at(i), exp_avg_sqs.at(i))) return false;
  // The kernel reads each tensor's step count from a device scalar; they all share t here.
  const torch::Tensor step = torch::full({}, static_cast<double>(t), params.front().options());
  const std::vector<torch::Tensor> steps(params.size(), step);
  if (decay == WeightDecay::Decoupled) {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, beta2,
                      weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  } else {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, beta2,
                     weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  }
  g_fused_adam_launches.fetch_add(1);
  return true;
#else
  return false;
#endif
}

torch::Tensor to_device_async(const torch::Tensor& host, const torch::Device& dev) {
  if (!dev.is_cuda() || !host.device().is_cpu()) return host.to(dev);
  return host.pin_memory().to(dev, /*non_blocking=*/true);
}

void set_tf32(bool on) {
  at::globalContext().setAllowTF32CuBLAS(on);
  at::globalContext().setAllowTF32CuDNN(on);
}

bool has_cuda_graphs() {
#if defined(SCALEINV_CUDA)
  return true;
#else
  return false;
#endif
}

std::string cuda_device_uuid(const torch::Device& dev) {
#if defined(SCALEINV_CUDA)
  if (!dev.is_cuda()) return "";
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(dev.has_index() ? dev.index() : c10::cuda::current_device());
  std::string hex;
  for (const char b : p->uuid.bytes) hex += fmt::format("{:02x}", static_cast<unsigned char>(b));
  return hex;
#else
  (void)dev;
  return "";
#endif
}

void use_device(const torch::Device& dev) {
#if defined(SCALEINV_CUDA)
  if (dev.is_cuda() && dev.has_index()) c10::cuda::set_device(dev.index());
#else
  (void)dev;
#endif
}

#if defined(SCALEINV_CUDA)
namespace {
// A thread already on a stream of its own (a sweep job's) stays on it. Taking another from the
// pool would not do: the pool hands its 32 streams out in turn, so a later side stream could be
// another job's, whose kernels a capture on it would then record instead of running.
c10::cuda::CUDAStream side_stream_for(const torch::Device& dev, const c10::cuda::CUDAStream& current) {
  if (current != c10::cuda::getDefaultCUDAStream(dev.index())) return current;
  return c10::cuda::getStreamFromPool(false, dev.index());
}
}  // namespace

struct CudaSideStream::Impl {
  c10::cuda::CUDAStream stream;
  c10::cuda::CUDAStreamGuard guard;
  explicit Impl(const torch::Device& dev, const c10::cuda::CUDAStream& current)
      : stream(side_stream_for(dev, current)), guard(stream) {
    if (stream == current) return;
    at::cuda::CUDAEvent queued;  // the side stream starts after what the caller's stream holds
    queued.record(current);
    queued.block(stream);
  }
};
struct CudaGraph::Impl {
  at::cuda::CUDAGraph graph;
};
#else
struct CudaSideStream::Impl {};
struct CudaGraph::Impl {};
#endif

CudaSideStream::CudaSideStream(bool on, const torch::Device& dev) {
  if (!on) return;
#if defined(SCALEINV_CUDA)
  impl_ = std::make_unique<Impl>(dev, c10::cuda::getCurrentCUDAStream(dev.index()));
#else
  (void)dev;
  throw std::runtime_error("CUDA streams need a CUDA build of libtorch");
#endif
}

CudaSideStream::~CudaSideStream() {
#if defined(SCALEINV_CUDA)
  // The default stream's later work sees its results. A destructor must not throw: after a sticky
  // CUDA error (a device-side assert) the synchronize fails, and the error that is already
  // unwinding, or the next CUDA call, reports it.
  if (impl_) {
    try {
      impl_->stream.synchronize();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: CUDA side stream: %s\n", e.what());
    }
  }
#endif
}

CudaGraph::CudaGraph(const std::function<void()>& body) {
#if defined(SCALEINV_CUDA)
  impl_ = std::make_unique<Impl>();
  // The graph's memory pool is named here (a pool of its own, as capture_begin would make), so a
  // failed capture can end the allocator's routing to it. libtorch 2.4-2.11's capture_end checks
  // cudaStreamEndCapture's result before it calls endAllocateToPool: a capture that an uncapturable
  // operation invalidated throws there, and the allocator goes on believing a capture is underway.
  // Its next emptyCache, and the cache release it tries before reporting out of memory, then fail
  // an internal assert, in whatever run the process does next (a sweep's later points).
  const c10::DeviceIndex device = c10::cuda::current_device();
  const auto pool = at::cuda::graph_pool_handle();
  try {
    // Thread-local capture mode: only this thread's unsafe calls (a cudaMalloc outside the graph's
    // pool, a sync) end the capture; other threads on the same device (a sweep's jobs) go on.
    impl_->graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    body();
    impl_->graph.capture_end();
  } catch (...) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(device).stream(), &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      try {
        impl_->graph.capture_end();  // the body threw: leave the stream out of capture mode
      } catch (...) {
      }
    }
    (void)cudaGetLastError();  // a failed end of capture is not the next CUDA call's error
    bool ended_here = false;
    try {
      // Throws "not currently recording" where capture_end got that far (or a libtorch that ends
      // the routing before it checks, 2.12 on): nothing left to end then.
      c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool);
      ended_here = true;
    } catch (...) {
    }
    if (ended_here) {
      // The same libtorch releases the graph's pool only for a capture that ended, so what the body
      // allocated would stay reserved for the rest of the process: it is released here (emptyCache
      // hands it back once its blocks are free). And 2.10-2.11's pinned-host allocator keeps its own
      // routing filter, which holds the CUDAGraph's address and is not ended either: the graph
      // object (a few hundred bytes) is kept alive, not destroyed under it.
      try {
        c10::cuda::CUDACachingAllocator::releasePool(device, pool);
      } catch (...) {
      }
      (void)impl_.release();
    }
    throw;
  }
#else
  (void)body;
  throw std::runtime_error("CUDA graphs need a CUDA build of libtorch");
#endif
}

CudaGraph::~CudaGraph() = default;

void empty_cuda_cache() {
#if defined(SCALEINV_CUDA)
  if (torch::cuda::is_available()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) || dynamic_cast<const c10::OutOfMemoryError*>(&e)) return true;
  const auto* c = dynamic_cast<const c10::Error*>(&e);
  if (!c) return false;
  const std::string& m = c->msg();
  return m.find("out of memory") != std::string::npos || m.find("not enough memory") != std::string::npos ||
         m.find("can't allocate memory") != std::string::npos;
}

void forbid_cuda_syncs(bool forbidden) {
#if defined(SCALEINV_CUDA)
  c10::cuda::warning_state().set_sync_debug_mode(forbidden ? c10::cuda::SyncDebugMode::L_ERROR
                                                           : c10::cuda::SyncDebugMode::L_DISABLED);
#else
  (void)forbidden;
#endif
}

void limit_cuda_memory(double fraction) {
#if defined(SCALEINV_CUDA)
  if (torch::cuda::is_available())
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, c10::cuda::current_device());
#else
  (void)fraction;
#endif
}

int64_t cuda_total_bytes() {
#if defined(SCALEINV_CUDA)
  if (!torch::cuda::is_available()) return 0;
  return static_cast<int64_t>(at::cuda::getDeviceProperties(c10::cuda::current_device())->totalGlobalMem);
#else
  return 0;
#endif
}

int64_t cuda_reserved_bytes() {
#if defined(SCALEINV_CUDA)
  if (!torch::cuda::is_available()) return 0;
  // reserved_bytes[0]: the AGGREGATE statistic (index 0 in every 2.x; the enum's namespace moved).
  return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device()).reserved_bytes[0].current;
#else
  return 0;
#endif
}

void CudaGraph::replay() {
#if defined(SCALEINV_CUDA)
  impl_->graph.replay();
#endif
}

}  // namespace scaleinv::compat
