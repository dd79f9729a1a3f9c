#pragma once
// A hyperparameter search's rungs and ranking (issue 16; search_space.h), torch-free: the CLI's
// search (search_runner.h) and a Python search of the user's own model (user_sweep.h) run their
// rungs through run_search_rungs and rank from the same store.
//
// Rung after rung, each rung an ordinary sweep run of its trials crossed with the grid; after each
// rung the trials are ranked within their group (the grid point without its seed) and bracket by
// the mean final loss over seeds (a trial where any seed diverged ranks last), the best
// floor(n / eta) of each go on, and (hyperband) the brackets that start at the next rung add their
// trials. Every rung's points stay in the store, so a killed search resumes where it stopped:
// finished points are never trained again and the rung plan, a pure function of the file and the
// stored losses, comes out the same.
//
// Writes, besides the store: DB's stem + "-search.json" (atomically): per group, the final
// ranking and the best trial's values as `set` lines for a sweep file's `set = [...]`.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "brain/sweep/shard.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/sweep/sweep_summary.h"

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

// One trial as the -search.json lists it: trial, bracket, values, rung, steps, seeds, mean_loss
// (null when not run or diverged) and status ("ok", "not run", "diverged").
nlohmann::json trial_json(const TrialResult& t);

// Runs one rung: `rung` holds the rung's points; `resume` whether the store may hold points
// already (later rungs add to the rungs before); `bar_label` the progress bar's title ("": the default).
using RungRunner = std::function<SweepRunSummary(const SweepSpec& rung, bool resume, const std::string& bar_label)>;

// Runs spec's search rung by rung into `db_path` (UserError for --shard N > 1 with more than one
// rung: each rung's results must be in one database before the next), then ranks it and writes the
// -search.json beside the store.
SearchRunSummary run_search_rungs(const SweepSpec& spec, const std::string& db_path, const Shard& shard, bool resume,
                                  const RungRunner& run_rung);

// The points of the rung after `rung` (0-based): the best of `rung_pts` (rung `rung`'s points) by
// the losses stored in `db_path`, and (hyperband) the trials of the brackets that start there.
std::vector<SweepPoint> next_rung_points(const SweepSpec& spec, const std::vector<SweepPoint>& rung_pts,
                                         const std::string& db_path, int rung);

// spec with the points of rung `rung` (0-based), replayed from the file and the losses of the rungs
// before it stored in `db_path`, exactly as run_search_rungs plans them: what a task of a search
// sent to a cluster trains (`scaleinv sweep --rung K --rung-db DB`, issue 61). UserError naming
// --rung when the search has no such rung.
SweepSpec search_rung_spec(const SweepSpec& spec, const std::string& db_path, int rung);

// The ranking of a [search] sweep from the losses stored in `db_path` (a finished, merged or
// partial store): each trial at the highest rung it reached, best first within each group.
std::vector<TrialResult> rank_search(const SweepSpec& spec, const std::string& db_path);

// The table printed at the end: the rungs, then per group the top trials and the best one's `set` lines.
std::string render_search_summary(const SweepSpec& spec, const SearchRunSummary& s);

}  // namespace scaleinv
