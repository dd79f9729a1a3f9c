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
#include "core/progress.h"
#include "core/threads.h"
#include "core/torch_compat.h"
#include "data/data.h"
#include "sweep/sweep_store.h"
#include "train/ensemble.h"

namespace scaleinv {

std::string default_db_path(const SweepSpec& spec, const Shard& shard) {
  std::string path = spec.db_path.empty() ? "runs/sweeps/" + spec.name + ".db" : spec.db_path;
  if (shard.count <= 1) return path;
  std::filesystem::path p(path);
  return (p.parent_path() / fmt::format("{}.shard-{}-of-{}{}", p.stem().string(), shard.index, shard.count,
                                        p.extension().string()))
      .string();
}

int sweep_jobs(const SweepSpec& spec, const SweepRunOptions& opts) {
  if (opts.jobs > 0) return opts.jobs;
  if (spec.points.empty()) return 1;
  const TrainConfig& c = spec.points.front().config;
  // On a GPU, one job: its chunks batch where they can, and where they cannot (a vit, adafactor,
  // clipping, a unit-scaled table, --batch off) its points still share one device's memory, so
  // one job per core would multiply the memory. --jobs N overrides, each job on a CUDA stream of
  // its own (run_sweep). For small, launch-bound chunks it pays: the 144-run settle sweep
  // (widths 64..512) took 96 s at --jobs 1 and 46 s at --jobs 4 on an H200 (docs/gpu.md); the
  // default stays 1, since a job count that suits a model's memory is the user's to choose.
  // On a CPU, where chunks run one point after another (batching_pays), one point per core:
  // measured (README, Speed) two width-512 runs at 1 thread each made 3.2k tok/s together against
  // 2.3k for one run on both cores, because a run on both cores leaves one idle through every
  // elementwise op.
  if (c.train.device == "cuda") return 1;
  return will_batch(c, opts.batching) ? 1 : std::max(1, thread_plan().cores);
}

SweepRunSummary run_sweep(const SweepSpec& spec, const SweepRunOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  SweepRunSummary sum;
  sum.name = spec.name;
  sum.db_path = opts.db_path;
  sum.shard = opts.shard.str();
  sum.grid_points = static_cast<int64_t>(spec.points.size());

  SweepStore store(opts.db_path);
  store.begin_sweep(spec, opts.shard, opts.resume);
  const std::set<std::string> done = store.finished_ids();
  const std::vector<size_t> mine = shard_points(spec, opts.shard);
  sum.shard_points = static_cast<int64_t>(mine.size());
  std::vector<size_t> pending;
  for (size_t i : mine) {
    if (done.count(spec.points[i].id)) ++sum.skipped;
    else pending.push_back(i);
  }
  if (opts.resume && done.empty() && store.meta("points_written").value_or("0") != "0")
    throw UserError(opts.db_path, "--resume",
                    fmt::format("the database recorded {} finished points but holds none (its -wal file was lost, "
                                "or it was replaced)", *store.meta("points_written")),
                    "restore the database with its -wal file, or start over without --resume under another --out");
  if (opts.resume && done.empty() && opts.show_progress)
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
  // shared (the store, the bar, the sums) is touched under `mu`.
  const int jobs = static_cast<int>(std::min<size_t>(chunks.size(), static_cast<size_t>(std::max(1, sweep_jobs(spec, opts)))));
  sum.jobs = std::max(1, jobs);
  std::mutex mu;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  int64_t steps_finished = 0;                           // member-steps of chunks in the store
  std::vector<int64_t> in_flight(static_cast<size_t>(sum.jobs), 0);  // member-steps of each worker's chunk
  auto redraw = [&] {  // (under mu)
    int64_t d = steps_finished;
    for (int64_t f : in_flight) d += f;
    if (bar) bar->update(static_cast<long>(d), status());
  };
  // On CUDA with several jobs each worker queues its chunks on a stream of its own, so that the
  // chunks' kernels (small ones, for the widths a sweep starts from) can run side by side on the
  // device instead of one after another on its default stream. Checked first: a CUDA sweep on a
  // machine without one is the one-line device error, not a stream's.
  const TrainConfig* first = spec.points.empty() ? nullptr : &spec.points.front().config;
  const bool own_streams = first && first->train.device == "cuda" && sum.jobs > 1;
  const torch::Device stream_device =
      own_streams ? resolve_device(first->train.device, first->source, "train.device") : torch::Device(torch::kCPU);
  // TF32 is one switch for the whole process (every run sets it at its start): jobs running side by
  // side with different train.tf32 would set it for each other.
  if (own_streams)
    for (size_t i : pending)
      if (spec.points[i].config.train.tf32 != spec.points[pending.front()].config.train.tf32)
        throw UserError(first->source, "train.tf32",
                        "varies across the grid, and TF32 is one switch for the whole process, which jobs running "
                        "side by side would set for each other",
                        "run this sweep with --jobs 1, or one sweep per train.tf32");
  auto worker = [&](size_t slot) {
    try {
      const compat::CudaSideStream stream(own_streams, stream_device);
      for (size_t c = next++; c < chunks.size() && !failed; c = next++) {
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
        std::vector<RunSummary> res = train_ensemble(members, eo);
        std::lock_guard<std::mutex> lock(mu);
        store.write_points(spec, opts.shard, pts, res);
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
  return sum;
}

std::string render_sweep_summary(const SweepRunSummary& s) {
  std::string out = "sweep summary\n";
  auto row = [&](const std::string& k, const std::string& v) { out += fmt::format("  {:<16} {}\n", k, v); };
  row("sweep", s.name);
  row("shard", s.shard + (s.shard == "0/1" ? " (the whole grid)" : ""));
  row("grid points", fmt::format("{} ({} in this shard)", s.grid_points, s.shard_points));
  row("run now", fmt::format("{} in {} ensemble chunk{}, {} at a time", s.run, s.chunks, s.chunks == 1 ? "" : "s",
                             s.jobs));
  row("skipped", fmt::format("{} (already in the db)", s.skipped));
  row("diverged", fmt::format("{}", s.diverged));
  row("wall time", format_duration(s.wall_s));
  row("db", s.db_path);
  return out;
}

}  // namespace scaleinv
