// What a sweep run did, and where its store goes (see sweep_summary.h).
#include "brain/sweep/sweep_summary.h"

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "brain/util/progress.h"

namespace scaleinv {

std::string default_db_path(const SweepSpec& spec, const Shard& shard) {
  std::string path = spec.db_path.empty() ? "runs/sweeps/" + spec.name + ".db" : spec.db_path;
  if (shard.count <= 1) return path;
  std::filesystem::path p(path);
  return (p.parent_path() / fmt::format("{}.shard-{}-of-{}{}", p.stem().string(), shard.index, shard.count,
                                        p.extension().string()))
      .string();
}

std::vector<size_t> begin_run(SweepStore& store, const SweepSpec& spec, const Shard& shard, bool resume,
                              SweepRunSummary& sum) {
  sum.name = spec.name;
  sum.db_path = store.path();
  sum.shard = shard.str();
  sum.grid_points = static_cast<int64_t>(spec.points.size());
  store.begin_sweep(spec, shard, resume);
  const std::set<std::string> done = store.finished_ids();
  const std::vector<size_t> mine = shard_points(spec, shard);
  sum.shard_points = static_cast<int64_t>(mine.size());
  std::vector<size_t> pending;
  for (size_t i : mine) {
    if (done.count(spec.points[i].id)) ++sum.skipped;
    else pending.push_back(i);
  }
  return pending;
}

std::string render_sweep_summary(const SweepRunSummary& s) {
  std::string out = "sweep summary\n";
  auto row = [&](const std::string& k, const std::string& v) { out += fmt::format("  {:<16} {}\n", k, v); };
  row("sweep", s.name);
  row("shard", s.shard + (s.shard == "0/1" ? " (the whole grid)" : ""));
  row("grid points", fmt::format("{} ({} in this shard)", s.grid_points, s.shard_points));
  row("run now", fmt::format("{} in {} ensemble chunk{}, {} at a time", s.run, s.chunks, s.chunks == 1 ? "" : "s",
                             s.jobs));
  if (s.out_of_memory > 0)
    row("out of memory", fmt::format("{} chunk{} rerun after running out beside others; {} at a time at the end", s.out_of_memory,
                                     s.out_of_memory == 1 ? "" : "s", s.jobs_at_end));
  row("skipped", fmt::format("{} (already in the db)", s.skipped));
  row("diverged", fmt::format("{}", s.diverged));
  if (s.failed > 0) row("failed", fmt::format("{} (the training raised, or its worker died past its retries: the db's failures table has each message)", s.failed));
  row("wall time", format_duration(s.wall_s));
  row("db", s.db_path);
  return out;
}

}  // namespace scaleinv
