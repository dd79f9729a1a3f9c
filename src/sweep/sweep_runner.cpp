// Running a sweep shard (see sweep_runner.h).
#include "sweep/sweep_runner.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/device.h"
#include "core/errors.h"
#include "core/stop_signal.h"
#include "core/progress.h"
#include "core/threads.h"
#include "core/torch_compat.h"
#include "data/data.h"
#include "sweep/sweep_store.h"
#include "train/ensemble.h"

namespace scaleinv {

namespace {

// What the store records of each trained member.
std::vector<PointResult> point_results(const std::vector<RunSummary>& runs) {
  std::vector<PointResult> out;
  for (const RunSummary& s : runs) {
    PointResult r;
    r.losses = s.losses;
    r.diverged = s.diverged;
    r.diverged_step = s.diverged_step;
    r.steps_done = s.steps_done;
    r.final_val_loss = s.final_val_loss;
    r.wall_s = s.wall_s;
    r.items_per_s = s.items_per_s;
    r.unigram_entropy = s.unigram_entropy;
    out.push_back(std::move(r));
  }
  return out;
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
  // Every point's data cache (the KJV text) exists before any worker starts: workers only read.
  {
    std::set<std::string> prepared;
    for (size_t i : pending) {
      const DataConfig& d = spec.points[i].config.data;
      if (prepared.insert(d.source + "\n" + d.path).second) prepare_data(d);
    }
  }
  // Chunks exist for batching; where points run one by one anyway, each point is its own unit of
  // work, so the workers share the grid evenly and every point reaches the store as it finishes.
  const bool batched = !spec.points.empty() && will_batch(spec.points.front().config, opts.batching);
  const auto chunks = ensemble_chunks(spec.points, pending, batched ? spec.ensemble : 1);

  // The bar counts member-steps (smooth ETA); its status shows points and divergences.
  int64_t total_steps = 0;
  for (size_t i : pending) total_steps += spec.points[i].config.train.steps;
  std::unique_ptr<Progress> bar;
  if (opts.show_progress) bar = std::make_unique<Progress>(std::max<int64_t>(1, total_steps),
                                                    opts.bar_label.empty() ? "sweep " + spec.name : opts.bar_label, "step");
  auto status = [&] {
    return fmt::format("| points {}/{} (skipped {}) | diverged {}", sum.skipped + sum.run, sum.shard_points,
                       sum.skipped, sum.diverged);
  };

  // Chunks go to `jobs` worker threads, each taking the next chunk when it is free. Everything
  // shared (the store, the bar, the sums, the queue of chunks given back) is touched under `mu`.
  int jobs = static_cast<int>(std::min<size_t>(chunks.size(), static_cast<size_t>(std::max(1, sweep_jobs(spec, opts)))));
  // On CUDA with several jobs each worker queues its chunks on a stream of its own, so that the
  // chunks' kernels (small ones, for the widths a sweep starts from) can run side by side on the
  // device instead of one after another on its default stream. Checked first: a CUDA sweep on a
  // machine without one is the one-line device error, not a stream's.
  const TrainConfig* first = spec.points.empty() ? nullptr : &spec.points.front().config;
  const bool cuda = first && first->train.device == "cuda";
  // TF32 is one switch for the whole process (every run sets it at its start): jobs running side by
  // side with different train.tf32 would set it for each other. Asked for, that is an error; by
  // default such a grid runs one chunk at a time.
  auto tf32_varies = [&] {
    for (size_t i : pending)
      if (spec.points[i].config.train.tf32 != spec.points[pending.front()].config.train.tf32) return true;
    return false;
  };
  if (cuda && jobs > 1 && tf32_varies()) {
    if (opts.jobs > 1)
      throw UserError(first->source, "train.tf32",
                      "varies across the grid, and TF32 is one switch for the whole process, which jobs running "
                      "side by side would set for each other",
                      "run this sweep with --jobs 1, or one sweep per train.tf32");
    jobs = 1;
  }
  sum.jobs = std::max(1, jobs);
  const bool own_streams = cuda && sum.jobs > 1;
  const torch::Device stream_device =
      own_streams ? resolve_device(first->train.device, first->source, "train.device") : torch::Device(torch::kCPU);
  std::mutex mu;
  size_t next = 0;                    // the next chunk no worker has taken (under mu)
  std::vector<size_t> given_back;     // chunks that ran out of memory beside others (under mu)
  int live = sum.jobs;                // workers still taking chunks (under mu)
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  int64_t steps_finished = 0;                           // member-steps of chunks in the store
  std::vector<int64_t> in_flight(static_cast<size_t>(sum.jobs), 0);  // member-steps of each worker's chunk
  auto redraw = [&] {  // (under mu)
    int64_t d = steps_finished;
    for (int64_t f : in_flight) d += f;
    if (bar) bar->update(static_cast<long>(d), status());
  };
  // Out of memory: a chunk that ran out beside other workers' chunks goes back on the queue and its
  // worker stops (the sweep goes on with one job fewer; the chunk reruns from its start, nothing
  // of it was stored). A worker alone with its chunk retries it once, the others' memory now free;
  // a chunk that runs out in a worker that was alone from the chunk's start is the sweep's error
  // (the CLI's one line: its model is too large for the device). Returns true when the worker goes
  // on with `retry_alone` set, false when it stops.
  auto on_out_of_memory = [&](size_t c, size_t slot, bool started_alone, bool& retry_alone) {
    std::lock_guard<std::mutex> lock(mu);
    compat::empty_cuda_cache();  // the failed chunk's blocks back to the driver, for the others
    in_flight[slot] = 0;
    ++sum.out_of_memory;
    if (live > 1) {
      given_back.push_back(c);
      --live;
      sum.jobs_at_end = live;
      redraw();
      return false;
    }
    if (started_alone) throw;  // rethrows the chunk's own allocation error (we are in its handler)
    retry_alone = true;
    return true;
  };
  sum.jobs_at_end = sum.jobs;
  auto worker = [&](size_t slot) {
    try {
      const compat::CudaSideStream stream(own_streams, stream_device);
      bool retry_alone = false;
      size_t c = 0;
      for (;;) {
        bool started_alone = false;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (retry_alone) {
            retry_alone = false;  // the same chunk again, now alone
          } else if (!given_back.empty()) {
            c = given_back.back();
            given_back.pop_back();
          } else {
            c = next++;
          }
          if (c >= chunks.size() || failed || stop_requested() != 0) {  // a stop signal: no new chunk
            --live;
            break;
          }
          started_alone = live == 1;
        }
        std::vector<TrainConfig> members;
        std::vector<const SweepPoint*> pts;
        int64_t chunk_steps = 0;
        for (size_t i : chunks[c]) {
          members.push_back(spec.points[i].config);
          pts.push_back(&spec.points[i]);
          chunk_steps += spec.points[i].config.train.steps;
        }
        EnsembleOptions eo;
        eo.batching = opts.batching;
        eo.show_progress = false;
        if (bar)
          eo.on_step = [&, slot, chunk_steps](int64_t member_steps) {
            std::lock_guard<std::mutex> lock(mu);
            // Short of the chunk's end: the bar reaches it once the chunk is in the store.
            in_flight[slot] = std::min(chunk_steps - 1, member_steps);
            redraw();
          };
        std::vector<RunSummary> res;
        try {
          if (opts.before_chunk_for_tests) opts.before_chunk_for_tests(c, started_alone);
          res = train_ensemble(members, eo);
        } catch (const std::exception& e) {
          if (!compat::is_out_of_memory(e)) throw;
          if (!on_out_of_memory(c, slot, started_alone, retry_alone)) return;
          continue;
        }
        std::lock_guard<std::mutex> lock(mu);
        store.write_points(spec, opts.shard, pts, point_results(res));
        ++sum.chunks;
        sum.run += static_cast<int64_t>(res.size());
        for (const auto& r : res) sum.diverged += r.diverged ? 1 : 0;
        steps_finished += chunk_steps;
        in_flight[slot] = 0;
        redraw();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  // A point's numerics must not depend on --jobs: OpenBLAS and libtorch choose kernels and
  // reduction orders by thread count (on some CPUs the last bits of a loss differ between 1 and 2
  // BLAS threads). So where points run one by one on the CPU, every point runs with both pools at
  // 1 thread, whatever the number of workers, and the pools are restored afterwards. Batched
  // chunks (a GPU) are unaffected by the CPU pools.
  const bool one_thread_points = !batched;
  const int torch_before = torch::get_num_threads();
  const int blas_before = one_thread_points ? set_blas_threads(1) : -1;
  if (one_thread_points) torch::set_num_threads(1);
  if (sum.jobs == 1) {
    worker(0);
  } else {
    std::vector<std::thread> pool;
    for (int j = 0; j < sum.jobs; ++j) pool.emplace_back(worker, static_cast<size_t>(j));
    for (auto& t : pool) t.join();
  }
  if (blas_before > 0) set_blas_threads(blas_before);
  if (one_thread_points) torch::set_num_threads(torch_before);
  if (error) std::rethrow_exception(error);
  if (bar) bar->finish(status());
  sum.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sum.run < static_cast<int64_t>(pending.size())) sum.stopped_by = stop_requested();  // points left
  return sum;
}

}  // namespace scaleinv
