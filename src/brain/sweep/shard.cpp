// Sharding by ensemble chunks (see shard.h).
#include "brain/sweep/shard.h"

#include <algorithm>
#include <map>

#include "brain/util/errors.h"

namespace scaleinv {

Shard parse_shard(const std::string& text) {
  auto bad = [&](const std::string& problem) -> Shard {
    throw UserError("command line", "--shard", "'" + text + "': " + problem,
                    "write " + input_name("--shard i/N") + " with 0 <= i < N (0-based), e.g. " + input_name("--shard 0/4") +
                        " .. " + input_name("--shard 3/4"));
  };
  const auto slash = text.find('/');
  if (slash == std::string::npos) return bad("expected i/N");
  auto read = [&](const std::string& s, int* out) {
    if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    *out = std::stoi(s);
    return true;
  };
  Shard sh;
  if (!read(text.substr(0, slash), &sh.index) || !read(text.substr(slash + 1), &sh.count))
    return bad("i and N must be non-negative integers");
  if (sh.count < 1) return bad("N must be at least 1");
  if (sh.index >= sh.count) return bad("the index i is out of range (shards are numbered 0 to N-1)");
  return sh;
}

std::vector<std::vector<size_t>> ensemble_chunks(const std::vector<SweepPoint>& points,
                                                 const std::vector<size_t>& which, int ensemble) {
  std::vector<std::vector<size_t>> groups;
  std::map<std::string, size_t> slot;
  for (size_t i : which) {
    const std::string key = points[i].ensemble_key();
    auto [it, fresh] = slot.emplace(key, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  const size_t cap = static_cast<size_t>(std::max(1, ensemble));
  std::vector<std::vector<size_t>> chunks;
  for (const auto& g : groups)
    for (size_t s = 0; s < g.size(); s += cap)
      chunks.emplace_back(g.begin() + static_cast<std::ptrdiff_t>(s),
                          g.begin() + static_cast<std::ptrdiff_t>(std::min(g.size(), s + cap)));
  return chunks;
}

std::vector<size_t> shard_points(const SweepSpec& spec, const Shard& shard) {
  std::vector<size_t> all(spec.points.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (shard.count <= 1) return all;
  std::vector<size_t> mine;
  const auto chunks = ensemble_chunks(spec.points, all, spec.ensemble);
  for (size_t c = 0; c < chunks.size(); ++c)
    if (static_cast<int>(c % static_cast<size_t>(shard.count)) == shard.index)
      mine.insert(mine.end(), chunks[c].begin(), chunks[c].end());
  std::sort(mine.begin(), mine.end());
  return mine;
}

}  // namespace scaleinv
