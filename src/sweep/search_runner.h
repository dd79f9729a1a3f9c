#pragma once
// Running a [search] sweep (issue 16; search_space.h): rung after rung, each rung an ordinary
// sweep run (run_sweep: ensembles, jobs, the store, --resume) of its trials crossed with the
// grid; after each rung the trials are ranked within their group (the grid point without its
// seed) and bracket by the mean final loss over seeds (a trial where any seed diverged ranks
// last), the best floor(n / eta) of each go on, and (hyperband) the brackets that start at the
// next rung add their trials. Every rung's points stay in the store, so a killed
// search resumes (--resume) where it stopped: finished points are never trained again and the
// rung plan, a pure function of the file and the stored losses, comes out the same.
//
// Sharding: method "random" has one rung and shards like any sweep (merge the shards, then read
// the ranking with `scaleinv sweep rank`). Successive halving (and hyperband) needs each rung's results in one
// database before the next rung, so it refuses --shard with N > 1 (UserError naming --shard).
//
// Writes, besides the store: DB's stem + "-search.json" (atomically): per group, the final
// ranking and the best trial's values as `set` lines for a sweep file's `set = [...]`.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sweep/sweep_runner.h"
#include "sweep/sweep_spec.h"

namespace scaleinv {

struct TrialResult {
  std::string group;        // "param=mup, model.width=64" ("" when the grid has only seeds)
  int trial = 0;
  int bracket = 0;          // its bracket (search_space.h; always 0 unless hyperband)
  nlohmann::json values;    // the sampled hyperparameters
  int rung = 0;             // the last rung it ran in
  int64_t steps = 0;        // that rung's train.steps
  double mean_loss = 0;     // over its seeds (+inf when any diverged; NaN when none finished)
  int seeds = 0;
};

struct SearchRunSummary {
  std::vector<SweepRunSummary> rungs;
  std::vector<int64_t> rung_steps;
  std::vector<TrialResult> ranking;   // every trial of every group, best first within a group
  std::string json_path;              // the -search.json written
  double wall_s = 0;
};

SearchRunSummary run_search(const SweepSpec& spec, const SweepRunOptions& opts);

// The ranking of a [search] sweep from the losses stored in `db_path` (a finished, merged or
// partial store): each trial at the highest rung it reached, best first within each group.
std::vector<TrialResult> rank_search(const SweepSpec& spec, const std::string& db_path);

// The table printed at the end: the rungs, then per group the top trials and the best one's `set` lines.
std::string render_search_summary(const SweepSpec& spec, const SearchRunSummary& s);

}  // namespace scaleinv
