#pragma once
// Running a sweep (issue 8): the shard's points not yet in the store, grouped by ensemble_key and
// chunked to at most spec.ensemble members, each chunk trained by train_ensemble (up to `jobs`
// chunks at once, on worker threads) and written to the store in one transaction as soon as it
// finishes. Diverged points are recorded, never fatal.
//
// Determinism: where points run one by one on the CPU, every point trains with libtorch's and
// OpenBLAS's pools at 1 thread whatever `jobs` is, so a point's losses are the same bit for bit
// with --jobs 1 or N on a given machine (tested). Data caches (the KJV text) are created once
// before any worker starts.
#include <cstdint>
#include <functional>
#include <string>

#include "brain/sweep/shard.h"
#include "brain/sweep/sweep_summary.h"
#include "brain/sweep/sweep_spec.h"
#include "engine/train/ensemble.h"

namespace scaleinv {

struct SweepRunOptions {
  std::string db_path;        // the store (see default_db_path)
  Shard shard;
  bool resume = false;        // skip the points already in the store
  bool show_progress = true;  // a bar over the shard's points on stderr
  Batching batching = Batching::Auto;  // EnsembleOptions::batching
  int jobs = 0;               // chunks trained at once, one core each (on CUDA, one stream each); 0: sweep_jobs decides
  std::string bar_label;      // the progress bar's title ("": "sweep NAME")
  // For tests: called on the worker before each chunk trains, with the chunk's index and whether
  // its worker was alone when it took it; what it throws is the chunk's (an allocation failure
  // stands in for a device out of memory).
  std::function<void(size_t chunk, bool alone)> before_chunk_for_tests;
};

// How many chunks train at once when opts.jobs is 0: on CUDA 4, each on a stream of its own (the
// settle sweep's time halved, measured; see the definition); on a CPU 1 where chunks are batched,
// else one per core (threads.h), each worker on one thread, since one-by-one points on a CPU keep
// the cores busier side by side than one run on all of them (measured). run_sweep runs a CUDA grid
// whose train.tf32 varies one chunk at a time unless --jobs asks for more (then a UserError).
// Out of memory: a chunk that runs out beside other workers' chunks is given back to the queue and
// its worker stops, so the sweep goes on with one job fewer (SweepRunSummary::out_of_memory); a
// chunk that runs out with its worker alone is retried once, then its error ends the sweep (the
// chunks already stored stay, --resume skips them).
int sweep_jobs(const SweepSpec& spec, const SweepRunOptions& opts);

SweepRunSummary run_sweep(const SweepSpec& spec, const SweepRunOptions& opts);

}  // namespace scaleinv
