// Running a sweep shard (see sweep_runner.h).
#include "sweep/sweep_runner.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "core/progress.h"
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
  const auto chunks = ensemble_chunks(spec.points, pending, spec.ensemble);

  // The bar counts member-steps (smooth ETA); its status shows points and divergences.
  int64_t total_steps = 0;
  for (size_t i : pending) total_steps += spec.points[i].config.train.steps;
  std::unique_ptr<Progress> bar;
  if (opts.show_progress) bar = std::make_unique<Progress>(std::max<int64_t>(1, total_steps), "sweep " + spec.name, "step");
  int64_t steps_before = 0;
  auto status = [&] {
    return fmt::format("| points {}/{} (skipped {}) | diverged {}", sum.skipped + sum.run, sum.shard_points,
                       sum.skipped, sum.diverged);
  };
  for (const auto& chunk : chunks) {
    std::vector<TrainConfig> members;
    std::vector<const SweepPoint*> pts;
    int64_t chunk_steps = 0;
    for (size_t i : chunk) {
      members.push_back(spec.points[i].config);
      pts.push_back(&spec.points[i]);
      chunk_steps += spec.points[i].config.train.steps;
    }
    EnsembleOptions eo;
    eo.batching = opts.batching;
    eo.show_progress = false;
    if (bar)
      eo.on_step = [&](int64_t member_steps) {
        // Short of the chunk's end: the bar reaches it once the chunk is in the store.
        bar->update(static_cast<long>(steps_before + std::min(chunk_steps - 1, member_steps)), status());
      };
    std::vector<RunSummary> res = train_ensemble(members, eo);
    store.write_points(spec, opts.shard, pts, res);
    ++sum.chunks;
    sum.run += static_cast<int64_t>(res.size());
    for (const auto& r : res) sum.diverged += r.diverged ? 1 : 0;
    steps_before += chunk_steps;
    if (bar) bar->update(static_cast<long>(steps_before), status());
  }
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
  row("run now", fmt::format("{} in {} ensemble chunk{}", s.run, s.chunks, s.chunks == 1 ? "" : "s"));
  row("skipped", fmt::format("{} (already in the db)", s.skipped));
  row("diverged", fmt::format("{}", s.diverged));
  row("wall time", format_duration(s.wall_s));
  row("db", s.db_path);
  return out;
}

}  // namespace scaleinv
