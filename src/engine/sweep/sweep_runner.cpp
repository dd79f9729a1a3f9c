// Running a sweep shard (see sweep_runner.h).
#include "engine/sweep/sweep_runner.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "engine/runtime/device.h"
#include "brain/util/errors.h"
#include "brain/util/stop_signal.h"
#include "brain/util/progress.h"
#include "engine/runtime/threads.h"
#include "engine/runtime/torch_compat.h"
#include "engine/data/data.h"
#include "brain/sweep/sweep_store.h"
#include "engine/train/ensemble.h"

namespace scaleinv {

namespace {

// Every point's data cache (the KJV text) exists before any worker starts: workers only read.
void prepare_point_data(const SweepSpec& spec, const std::vector<size_t>& pending) {
  std::set<std::string> prepared;
  for (size_t i : pending) {
    const DataConfig& d = spec.points[i].config.data;
    if (prepared.insert(d.source + "\n" + d.path).second) prepare_data(d);
  }
}

// The bar counts member-steps (smooth ETA); its status (sweep_status) shows points and divergences.
std::unique_ptr<Progress> sweep_bar(const SweepSpec& spec, const SweepRunOptions& opts,
                                    const std::vector<size_t>& pending) {
  if (!opts.show_progress) return nullptr;
  int64_t total_steps = 0;
  for (size_t i : pending) total_steps += spec.points[i].config.train.steps;
  return std::make_unique<Progress>(std::max<int64_t>(1, total_steps),
                                    opts.bar_label.empty() ? "sweep " + spec.name : opts.bar_label, "step");
}

std::string sweep_status(const SweepRunSummary& sum) {
  return fmt::format("| points {}/{} (skipped {}) | diverged {}", sum.skipped + sum.run, sum.shard_points,
                     sum.skipped, sum.diverged);
}

// Whether the pending points differ in train.tf32.
bool tf32_varies(const SweepSpec& spec, const std::vector<size_t>& pending) {
  for (size_t i : pending)
    if (spec.points[i].config.train.tf32 != spec.points[pending.front()].config.train.tf32) return true;
  return false;
}

// How many workers take the `n_chunks` chunks: sweep_jobs, at most one per chunk, at least one.
int worker_count(const SweepSpec& spec, const SweepRunOptions& opts, const std::vector<size_t>& pending,
                 size_t n_chunks) {
  int jobs = static_cast<int>(std::min<size_t>(n_chunks, static_cast<size_t>(std::max(1, sweep_jobs(spec, opts)))));
  const TrainConfig* first = spec.points.empty() ? nullptr : &spec.points.front().config;
  const bool cuda = first && first->train.device == "cuda";
  // TF32 is one switch for the whole process (every run sets it at its start): jobs running side by
  // side with different train.tf32 would set it for each other. Asked for, that is an error; by
  // default such a grid runs one chunk at a time.
  if (cuda && jobs > 1 && tf32_varies(spec, pending)) {
    if (opts.jobs > 1)
      throw UserError(first->source, "train.tf32",
                      "varies across the grid, and TF32 is one switch for the whole process, which jobs running "
                      "side by side would set for each other",
                      "run this sweep with --jobs 1, or one sweep per train.tf32");
    jobs = 1;
  }
  return std::max(1, jobs);
}

// On CUDA with several jobs each worker queues its chunks on a stream of its own, so that the
// chunks' kernels (small ones, for the widths a sweep starts from) can run side by side on the
// device instead of one after another on its default stream. Resolved before any worker starts: a
// CUDA sweep on a machine without one is the one-line device error, not a stream's.
struct WorkerStreams {
  bool own = false;
  torch::Device device{torch::kCPU};
};

WorkerStreams worker_streams(const SweepSpec& spec, int jobs) {
  const TrainConfig* first = spec.points.empty() ? nullptr : &spec.points.front().config;
  WorkerStreams s;
  s.own = first && first->train.device == "cuda" && jobs > 1;
  if (s.own) s.device = resolve_device(first->train.device, first->source, "train.device");
  return s;
}

// A chunk's members as train_ensemble takes them, their points as the store records them, and
// their member-steps as the bar counts them.
struct ChunkWork {
  std::vector<TrainConfig> members;
  std::vector<const SweepPoint*> pts;
  int64_t steps = 0;
};

ChunkWork chunk_work(const SweepSpec& spec, const std::vector<size_t>& chunk) {
  ChunkWork w;
  for (size_t i : chunk) {
    w.members.push_back(spec.points[i].config);
    w.pts.push_back(&spec.points[i]);
    w.steps += spec.points[i].config.train.steps;
  }
  return w;
}

// The workers of one run_sweep: `sum.jobs` of them, each taking the next chunk when it is free,
// training it and writing it to the store. Everything shared (the store, the bar, the sums, the
// queue of chunks given back) is touched under `mu_`.
class ChunkWorkers {
 public:
  ChunkWorkers(const SweepSpec& spec, const SweepRunOptions& opts, SweepStore& store,
               const std::vector<std::vector<size_t>>& chunks, Progress* bar, SweepRunSummary& sum,
               WorkerStreams streams)
      : spec_(spec), opts_(opts), store_(store), chunks_(chunks), bar_(bar), sum_(sum), streams_(streams),
        live_(sum.jobs), in_flight_(static_cast<size_t>(sum.jobs), 0) {
    sum_.jobs_at_end = sum_.jobs;
  }

  // Runs every worker to its end: the one on this thread, or each on a thread of its own.
  void run() {
    if (sum_.jobs == 1) {
      work(0);
    } else {
      std::vector<std::thread> pool;
      for (int j = 0; j < sum_.jobs; ++j) pool.emplace_back([this, j] { work(static_cast<size_t>(j)); });
      for (auto& t : pool) t.join();
    }
  }

  // The first error a worker ended on, thrown here once they have all ended.
  void rethrow_error() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // One worker: chunks until none is left, the sweep failed, a stop was requested or its chunk
  // ran out of memory beside others. What it throws is kept for rethrow_error and stops the rest.
  void work(size_t slot) {
    try {
      const compat::CudaSideStream stream(streams_.own, streams_.device);
      bool retry_alone = false;
      size_t c = 0;
      for (;;) {
        bool started_alone = false;
        if (!take_chunk(c, retry_alone, started_alone)) break;
        const ChunkWork w = chunk_work(spec_, chunks_[c]);
        const EnsembleOptions eo = ensemble_options(slot, w.steps);
        std::vector<RunResult> res;
        try {
          if (opts_.before_chunk_for_tests) opts_.before_chunk_for_tests(c, started_alone);
          res = train_ensemble(w.members, eo);
        } catch (const std::exception& e) {
          if (!compat::is_out_of_memory(e)) throw;
          if (!on_out_of_memory(c, slot, started_alone, retry_alone)) return;
          continue;
        }
        store_chunk(w, res, slot);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      failed_ = true;
    }
  }

  // Sets c to the worker's next chunk: the same one again after retry_alone, else one given back,
  // else the next untaken. False (the worker stops) when none is left, the sweep failed or a stop
  // signal came: no new chunk.
  bool take_chunk(size_t& c, bool& retry_alone, bool& started_alone) {
    std::lock_guard<std::mutex> lock(mu_);
    if (retry_alone) {
      retry_alone = false;  // the same chunk again, now alone
    } else if (!given_back_.empty()) {
      c = given_back_.back();
      given_back_.pop_back();
    } else {
      c = next_++;
    }
    if (c >= chunks_.size() || failed_ || stop_requested() != 0) {
      --live_;
      return false;
    }
    started_alone = live_ == 1;
    return true;
  }

  EnsembleOptions ensemble_options(size_t slot, int64_t chunk_steps) {
    EnsembleOptions eo;
    eo.batching = opts_.batching;
    eo.show_progress = false;
    if (bar_)
      eo.on_step = [this, slot, chunk_steps](int64_t member_steps) {
        std::lock_guard<std::mutex> lock(mu_);
        // Short of the chunk's end: the bar reaches it once the chunk is in the store.
        in_flight_[slot] = std::min(chunk_steps - 1, member_steps);
        redraw();
      };
    return eo;
  }

  // Out of memory: a chunk that ran out beside other workers' chunks goes back on the queue and its
  // worker stops (the sweep goes on with one job fewer; the chunk reruns from its start, nothing
  // of it was stored). A worker alone with its chunk retries it once, the others' memory now free;
  // a chunk that runs out in a worker that was alone from the chunk's start is the sweep's error
  // (the CLI's one line: its model is too large for the device). Called in the chunk's handler.
  // Returns true when the worker goes on with `retry_alone` set, false when it stops.
  bool on_out_of_memory(size_t c, size_t slot, bool started_alone, bool& retry_alone) {
    std::lock_guard<std::mutex> lock(mu_);
    compat::empty_cuda_cache();  // the failed chunk's blocks back to the driver, for the others
    in_flight_[slot] = 0;
    ++sum_.out_of_memory;
    if (live_ > 1) {
      given_back_.push_back(c);
      --live_;
      sum_.jobs_at_end = live_;
      redraw();
      return false;
    }
    if (started_alone) throw;  // rethrows the chunk's own allocation error (we are in its handler)
    retry_alone = true;
    return true;
  }

  // One transaction in the store per finished chunk, then the sums and the bar.
  void store_chunk(const ChunkWork& w, const std::vector<RunResult>& res, size_t slot) {
    std::lock_guard<std::mutex> lock(mu_);
    store_.write_points(spec_, opts_.shard, w.pts, res);
    ++sum_.chunks;
    sum_.run += static_cast<int64_t>(res.size());
    for (const auto& r : res) sum_.diverged += r.diverged ? 1 : 0;
    steps_finished_ += w.steps;
    in_flight_[slot] = 0;
    redraw();
  }

  void redraw() {  // (under mu_)
    int64_t d = steps_finished_;
    for (int64_t f : in_flight_) d += f;
    if (bar_) bar_->update(static_cast<long>(d), sweep_status(sum_));
  }

  const SweepSpec& spec_;
  const SweepRunOptions& opts_;
  SweepStore& store_;
  const std::vector<std::vector<size_t>>& chunks_;
  Progress* bar_;
  SweepRunSummary& sum_;
  const WorkerStreams streams_;
  std::mutex mu_;
  size_t next_ = 0;                 // the next chunk no worker has taken
  std::vector<size_t> given_back_;  // chunks that ran out of memory beside others
  int live_;                        // workers still taking chunks
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  int64_t steps_finished_ = 0;       // member-steps of chunks in the store
  std::vector<int64_t> in_flight_;  // member-steps of each worker's chunk
};

// A point's numerics must not depend on --jobs: OpenBLAS and libtorch choose kernels and
// reduction orders by thread count (on some CPUs the last bits of a loss differ between 1 and 2
// BLAS threads). So where points run one by one on the CPU, every point runs with both pools at
// 1 thread, whatever the number of workers, and the pools are restored afterwards. Batched
// chunks (a GPU) are unaffected by the CPU pools.
void run_with_point_threads(ChunkWorkers& workers, bool one_thread_points) {
  const int torch_before = torch::get_num_threads();
  const int blas_before = one_thread_points ? set_blas_threads(1) : -1;
  if (one_thread_points) torch::set_num_threads(1);
  workers.run();
  if (blas_before > 0) set_blas_threads(blas_before);
  if (one_thread_points) torch::set_num_threads(torch_before);
}

}  // namespace

int sweep_jobs(const SweepSpec& spec, const SweepRunOptions& opts) {
  if (opts.jobs > 0) return opts.jobs;
  if (spec.points.empty()) return 1;
  const TrainConfig& c = spec.points.front().config;
  // On a GPU, kCudaJobs chunks at once, each on a CUDA stream of its own (run_sweep): small,
  // launch-bound chunks (the widths a sweep starts from) then run side by side on the device. The
  // 144-run settle sweep (widths 64..512) took 96 s at --jobs 1 and 46 s at --jobs 4 on an H200
  // (docs/gpu.md). Chunks too large for that many at once in one device's memory are not refused:
  // a chunk that runs out of memory beside others is given back and its worker stops, so the
  // sweep goes on with fewer at a time (run_sweep). --jobs N overrides.
  // On a CPU, where chunks run one point after another (batching_pays), one point per core:
  // measured (docs/speed.md) two width-512 runs at 1 thread each made 3.2k tok/s together against
  // 2.3k for one run on both cores, because a run on both cores leaves one idle through every
  // elementwise op.
  constexpr int kCudaJobs = 4;
  if (c.train.device == "cuda") return kCudaJobs;
  return will_batch(c, opts.batching) ? 1 : std::max(1, thread_plan().cores);
}

SweepRunSummary run_sweep(const SweepSpec& spec, const SweepRunOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  SweepRunSummary sum;
  SweepStore store(opts.db_path);
  const std::vector<size_t> pending = begin_run(store, spec, opts.shard, opts.resume, sum);
  if (opts.resume && store.count_points() == 0 && opts.show_progress)
    fmt::print(stderr, "note: {} holds no finished point of this sweep: all {} points run\n", opts.db_path,
               pending.size());
  prepare_point_data(spec, pending);
  // Chunks exist for batching; where points run one by one anyway, each point is its own unit of
  // work, so the workers share the grid evenly and every point reaches the store as it finishes.
  const bool batched = !spec.points.empty() && will_batch(spec.points.front().config, opts.batching);
  const auto chunks = ensemble_chunks(spec.points, pending, batched ? spec.ensemble : 1);
  const std::unique_ptr<Progress> bar = sweep_bar(spec, opts, pending);
  sum.jobs = worker_count(spec, opts, pending, chunks.size());
  ChunkWorkers workers(spec, opts, store, chunks, bar.get(), sum, worker_streams(spec, sum.jobs));
  run_with_point_threads(workers, !batched);
  workers.rethrow_error();
  if (bar) bar->finish(sweep_status(sum));
  sum.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sum.run < static_cast<int64_t>(pending.size())) sum.stopped_by = stop_requested();  // points left
  return sum;
}

}  // namespace scaleinv
