#pragma once
// The sweep results store (issue 8; docs/design.md "Data flow of a sweep", steps 3 and 5: a sweep
// survives kill -9 and can be queried):
// one SQLite database in WAL mode per shard.
//
//   meta(key, value)   name, sweep_toml, grid (JSON), fingerprint, window, ensemble, shard
//   points             one row per finished point: id (primary key), sweep, the axes as columns
//                      (param, width, depth, lr, lr_log2, seed) plus `axes` (JSON of every axis
//                      value) and `config` (JSON of the resolved config); final_loss (mean of the
//                      last `window` of the steps; NULL when diverged), final_val_loss, min_loss,
//                      diverged (0/1), diverged_step (-1: none), steps_done, wall_s, items_per_s,
//                      unigram_entropy, curve (JSON [[step, loss]...], at most 200 points), shard,
//                      created_at (UTC, ISO 8601).
//   failures(id, message, created_at)
//                      a point whose training raised (a Python sweep's training function): its row
//                      in `points` is recorded as diverged (final_loss NULL, diverged_step -1) so
//                      that a search ranks it last and goes on; the message says what was raised.
//
// A finished ensemble chunk is written in one transaction and the WAL is then checkpointed into
// the database file, so a kill -9 at any moment loses only the chunk in flight, and losing the
// -wal file afterwards loses nothing. The grid's fingerprint (sweep_spec.h) guards --resume and
// merge. Opening runs SQLite's quick_check: a damaged database is refused (UserError naming it).
// One process writes a database at a time: begin_sweep takes an exclusive lock on PATH.lock
// (flock, released when the process ends, however it ends; the store removes the file when it is
// destroyed, a killed process leaves it unlocked); a second sweep on the same database is refused
// naming the holder's pid.
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "brain/util/sqlite_db.h"
#include "brain/util/writer_lock.h"
#include "brain/sweep/shard.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/train/run_result.h"

namespace scaleinv {

class SweepStore {
 public:
  // Opens or creates the database and its tables (parent directories are created).
  explicit SweepStore(const std::string& path);
  ~SweepStore();
  SweepStore(const SweepStore&) = delete;
  SweepStore& operator=(const SweepStore&) = delete;

  // Prepares the store for running `spec`: without `resume` a database that already holds points
  // is refused (UserError: use --resume or another --out); with it, the stored fingerprint must
  // equal spec.fingerprint, and a store that recorded finished points must still hold them (its
  // -wal file lost: UserError). Writes the meta table. Takes the writer lock (UserError when another
  // process holds it).
  void begin_sweep(const SweepSpec& spec, const Shard& shard, bool resume);
  std::set<std::string> finished_ids();
  int64_t count_points();
  std::optional<std::string> meta(const std::string& key);

  // One transaction: a row per point (points[i] trained into results[i]). The config column is
  // the point's resolved config (a user model's: SweepPoint::user).
  // With `checkpoint` (the default) the WAL is then checkpointed into the database file; a caller
  // writing many short points may checkpoint now and then instead (checkpoint()), the commit alone
  // already surviving a kill -9.
  void write_points(const SweepSpec& spec, const Shard& shard, const std::vector<const SweepPoint*>& points,
                    const std::vector<RunResult>& results, bool checkpoint = true);
  void checkpoint() { db_->checkpoint_wal(); }

  SqliteDb& db() { return *db_; }
  const std::string& path() const { return path_; }

 private:
  void lock_for_writing();
  std::string path_;
  std::unique_ptr<SqliteDb> db_;  // (declared before lock_: the database closes before the lock goes)
  WriterLock lock_;
};

// (A point's windowed loss is window_mean in engine/train/trainer.h with the sweep's window.)

// Now in UTC, ISO 8601 ("2026-11-28T21:32:46Z"): a point's created_at, an import's time.
std::string utc_now();

// The grid fingerprint a sweep database holds (read-only). UserError naming the file when it is
// not a sweep database (no meta and points tables, no fingerprint) or fails SQLite's integrity check.
std::string sweep_db_fingerprint(const std::string& path);

struct MergeSummary {
  int64_t rows_read = 0;     // rows in the inputs
  int64_t rows_added = 0;    // new rows in OUT
  int64_t total = 0;         // rows in OUT afterwards
};

// Combines shard databases of one sweep into `out` (created if missing). Every input, and `out` if
// it already holds a sweep, must carry the same fingerprint (UserError otherwise); a point present
// in several inputs is kept once. Inputs are opened read-only and never modified.
MergeSummary merge_sweep_dbs(const std::string& out, const std::vector<std::string>& inputs);

}  // namespace scaleinv
