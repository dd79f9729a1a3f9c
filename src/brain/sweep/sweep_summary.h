#pragma once
// What a sweep run did, and where its store goes (torch-free: the CLI's sweeps and a Python sweep
// of the user's own model print the same summary into the same kind of store).
#include <cstdint>
#include <string>
#include <vector>

#include "brain/sweep/shard.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/sweep/sweep_store.h"

namespace scaleinv {

struct SweepRunSummary {
  std::string name, db_path, shard;
  int64_t grid_points = 0;     // the whole grid
  int64_t shard_points = 0;    // this shard's share
  int64_t run = 0;             // trained now
  int64_t skipped = 0;         // already in the store (--resume)
  int64_t diverged = 0;        // of those trained now
  int64_t failed = 0;          // of those: the training raised (a Python sweep; the store's failures table)
  int64_t chunks = 0;          // train_ensemble calls
  int jobs = 1;                // chunks trained at once
  int64_t out_of_memory = 0;   // chunks that ran out of memory beside others and were rerun
  int jobs_at_end = 1;         // workers left at the end (jobs less one per chunk given back)
  double wall_s = 0;
  // A stop signal (brain/util/stop_signal.h) ended the sweep with points left: the chunks in flight were
  // stored, no new one started; --resume goes on from there. 0: none.
  int stopped_by = 0;
};

// The database a sweep writes when --out is not given: [sweep] db, else runs/sweeps/NAME.db;
// for --shard i/N with N > 1, STEM.shard-i-of-N.db beside it.
std::string default_db_path(const SweepSpec& spec, const Shard& shard);

// Begins a run of spec's shard into `store` (begin_sweep with `resume`) and fills sum's name, db,
// shard and counts (grid_points, shard_points, skipped). Returns the shard's points not yet in the
// store (indices into spec.points, in grid order).
std::vector<size_t> begin_run(SweepStore& store, const SweepSpec& spec, const Shard& shard, bool resume,
                              SweepRunSummary& sum);

// The short table printed at the end of `scaleinv sweep`.
std::string render_sweep_summary(const SweepRunSummary& s);

}  // namespace scaleinv
