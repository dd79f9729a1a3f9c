#pragma once
// Running a [search] sweep of the zoo's models (issue 16; search_space.h, search_rank.h): each
// rung an ordinary sweep run (run_sweep: ensembles, jobs, the store, --resume).
//
// Sharding: method "random" has one rung and shards like any sweep (merge the shards, then read
// the ranking with `scaleinv sweep rank`). Successive halving (and hyperband) needs each rung's
// results in one database before the next rung, so it refuses --shard with N > 1 (UserError naming
// --shard).
#include "brain/sweep/search_rank.h"
#include "engine/sweep/sweep_runner.h"
#include "brain/sweep/sweep_spec.h"

namespace scaleinv {

SearchRunSummary run_search(const SweepSpec& spec, const SweepRunOptions& opts);

}  // namespace scaleinv
