#include "brain/sweep/sweep_point.h"

#include <fmt/format.h>

#include "brain/train/ensemble_key.h"

namespace scaleinv {

PointCoords SweepPoint::coords() const {
  if (user) return user->coords;
  return {config.param, config.model.width, config.model.depth, config.optim.lr, config.train.seed, config.train.steps};
}

nlohmann::json SweepPoint::stored_config() const { return user ? user->config : train_config_to_json(config); }

std::string SweepPoint::ensemble_key() const {
  if (!user) return scaleinv::ensemble_key(config);
  const PointCoords& c = user->coords;  // what a user point's config differs in, short of lr and seed
  return fmt::format("user param={} width={} depth={} steps={}", c.param, c.width, c.depth, c.steps);
}

}  // namespace scaleinv
