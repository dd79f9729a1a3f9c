// make_data and the helpers every source shares.
#include "engine/data/data.h"

#include <cmath>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "engine/data/data_detail.h"

namespace scaleinv {

namespace data_detail {

std::pair<int64_t, int64_t> rank_rows(int64_t batch_size, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world)
    throw UserError("config", "train.world_size", fmt::format("rank {} of world {} is not a valid rank", rank, world),
                    "use world >= 1 and 0 <= rank < world");
  if (batch_size < 1)
    throw UserError("config", "train.batch_size", fmt::format("value {} is below 1", batch_size),
                    "use a positive global batch size");
  if (batch_size % world != 0)
    throw UserError("config", "train.batch_size",
                    fmt::format("global batch {} is not divisible by the {} data-parallel ranks", batch_size, world),
                    fmt::format("use a multiple of {}", world));
  const int64_t per = batch_size / world;
  return {rank * per, (rank + 1) * per};
}

double entropy_nats(const std::vector<int64_t>& counts) {
  double total = 0;
  for (int64_t c : counts) total += static_cast<double>(c);
  if (total <= 0) return 0.0;
  double h = 0;
  for (int64_t c : counts) {
    if (c <= 0) continue;
    const double p = static_cast<double>(c) / total;
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace data_detail

std::unique_ptr<DataSource> make_data(const DataConfig& cfg) {
  if (cfg.source == "kjv") return data_detail::make_kjv(cfg);
  if (cfg.source == "text") return data_detail::make_text(cfg);
  if (cfg.source == "fashion_mnist") return data_detail::make_fashion_mnist(cfg);
  if (cfg.source == "markov") return data_detail::make_markov(cfg);
  throw UserError("config", "data.source", "unknown data source '" + cfg.source + "'",
                  "use one of kjv, text, fashion_mnist, markov");
}

void prepare_data(const DataConfig& cfg) {
  if (cfg.source == "kjv") ensure_kjv_text(cfg.path.empty() ? kjv_cache_path() : cfg.path);
}

}  // namespace scaleinv
