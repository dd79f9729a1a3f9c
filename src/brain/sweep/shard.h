#pragma once
// Sharding a sweep across machines (issue 8; docs/design.md "Data flow of a sweep", step 2: `--shard i/N`, for
// job arrays).
// Shard i of N (0-based: 0/N .. N-1/N, like SLURM_ARRAY_TASK_ID) takes a deterministic 1/N of the
// grid. The unit of assignment is an ensemble chunk: the points sharing ensemble_key (e.g. the LRs
// and seeds of one width and parameterization), in grid order, cut into chunks of at most
// `ensemble` members; chunk c goes to shard c mod N. So each shard batches as well as the whole
// sweep would, and the shards are disjoint and together exactly the grid (tested). Every shard
// must run the same sweep file with the same binary.
#include <cstddef>
#include <string>
#include <vector>

#include "brain/sweep/sweep_spec.h"

namespace scaleinv {

struct Shard {
  int index = 0;
  int count = 1;
  std::string str() const { return std::to_string(index) + "/" + std::to_string(count); }
};

// "i/N" with 0 <= i < N; anything else is a UserError naming --shard.
Shard parse_shard(const std::string& text);

// `which` (indices into points) grouped by ensemble_key in order of first appearance, each group
// cut into chunks of at most `ensemble` members (in grid order).
std::vector<std::vector<size_t>> ensemble_chunks(const std::vector<SweepPoint>& points,
                                                 const std::vector<size_t>& which, int ensemble);

// The points (indices into spec.points, in grid order) that belong to `shard`.
std::vector<size_t> shard_points(const SweepSpec& spec, const Shard& shard);

}  // namespace scaleinv
