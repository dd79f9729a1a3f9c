#pragma once
// Sweeps and searches of the user's own model (issue 41; python/scaleinv/_sweep.py is the Python
// half): the space is a sweep file of target "python" (user_space.h), the points are drawn exactly
// as the CLI draws them (the same grid expansion, Halton trials, halving rungs and hyperband
// brackets, ids and fingerprint), and each rung's pending points (the grid's, for a sweep) go to an
// executor together: the caller's function one after another (sequential_executor), or anything
// that trains them elsewhere and reports each as it finishes (a Ray cluster: python/scaleinv/_ray.py).
// The brain stays the store's only writer: each result is written in its own transaction as it
// finishes (sweep_store.h: a kill -9 loses only the points in flight; the WAL is checkpointed into
// the database file at most once a second and when the run ends, so a -wal file deleted after a
// kill -9 loses at most the last second; `resume` skips the finished ones; one writer per database;
// a changed space is refused on resume). `scaleinv transfer-report --db`, `scaleinv sweep rank` and
// `scaleinv sweep merge` read the store as they read the CLI's.
//
// A training function that fails returns RunResult::error: the point is recorded as diverged
// with its message (the store's failures table) and the sweep goes on. An exception thrown by the
// function (Python's KeyboardInterrupt) ends the sweep there: every point finished before it is in
// the store, and the writer lock is released.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "brain/sweep/shard.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/sweep/sweep_store.h"

namespace scaleinv {

// The space as a sweep of a user model, from a TOML file's text or from a Python dict as it crosses
// the binding (JSON values: numbers, strings, booleans, lists and tables), read once either way; a
// [sweep] table without `target` takes "python" (and a dict's without `name`, "sweep"). `where`
// names it in errors (a file's directory is not used: a user sweep has no base file). The store
// keeps the space as toml++ formats it, so a dict and the TOML file holding the same values are
// the same sweep (ids, fingerprint, stored text). UserError naming the field for a bad space, and
// for a space of target "zoo" (a sweep of the zoo's models: scaleinv sweep runs it).
SweepSpec user_sweep_from_toml(const std::string& text, const std::string& where);
SweepSpec user_sweep_from_json(const nlohmann::json& space, const std::string& where);

// The space a user model's store was run with (its meta sweep_toml), for ranking a Python search
// from the CLI without its file. UserError naming --db when the store is not a sweep database or
// holds a sweep of the zoo's models (then give --config).
SweepSpec stored_user_sweep(const std::string& db_path);

// What the caller's function trains: one point, with its values by the user's names
// (user_hparams); returns what the store records.
using TrainPoint = std::function<RunResult(const SweepPoint& point, const nlohmann::json& hparams)>;

// One pending point of a rung as an executor gets it: `index` is what it reports it by (0 .. the
// batch's size - 1), `hparams` its values by the user's names (user_hparams).
struct PendingPoint {
  size_t index = 0;
  const SweepPoint* point = nullptr;
  nlohmann::json hparams;
};

// What an executor reports, on the thread that called it: `started(index)` when a point begins
// (the bar's running count; optional for an executor that runs one at a time), `record(index,
// result)` when it finishes, in any order, exactly once per point. record writes the result to the
// store in its own transaction before it returns; a result with `error` set (the training raised,
// or the worker running it died) is recorded as diverged with its message (the failures table).
// Both throw std::logic_error for an index out of the batch, a point recorded twice, a call from
// another thread or after the rung ended.
struct PointEvents {
  std::function<void(size_t index)> started;
  std::function<void(size_t index, RunResult result)> record;
};

// Trains a rung's pending points, all sent at once (the rung waits for every one: a halving
// search's next rung is planned from this one's losses). It returns when every point is recorded
// (std::logic_error names how many were not); an exception it throws ends the sweep there, with every
// point recorded before it in the store (resume goes on).
struct PointExecutor {
  std::function<void(const std::vector<PendingPoint>& batch, const PointEvents& events)> run;
  // Trains several at once: the bar adds "running N" (started, not yet recorded), and the summary's
  // "N at a time" is the most the bar showed (counted as each point is recorded).
  bool concurrent = false;
};

// The caller's function over the batch, one point after another, in grid order.
PointExecutor sequential_executor(TrainPoint train);

struct UserSweepOptions {
  std::string db_path;        // the store
  Shard shard;                // shard_points' share of the grid (a search with rungs refuses N > 1)
  bool resume = false;        // continue a store that holds points of this space
  bool show_progress = true;  // a bar over the points' steps on stderr
};

// Runs the space's grid, or its search rung by rung, into the store. Returns {"text": the summary
// table the CLI prints, "db", "points", "run", "skipped", "diverged", "failed", "wall_s",
// "ranking": [per trial: group, trial, bracket, values, rung, steps, mean_loss (null: not run or
// diverged), status] (a search only)}.
nlohmann::json run_user_sweep(const SweepSpec& spec, const UserSweepOptions& opts, const PointExecutor& executor);
// The same through sequential_executor(train).
nlohmann::json run_user_sweep(const SweepSpec& spec, const UserSweepOptions& opts, const TrainPoint& train);

}  // namespace scaleinv
