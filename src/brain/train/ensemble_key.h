#pragma once
// Which configs can share one batched ensemble (torch-free: sharding a sweep needs it, and the
// sweep store and sharding are part of the torch-free brain).
#include <string>

#include "brain/train/config.h"

namespace scaleinv {

// The configuration with the per-member fields (lr, weight_decay, seeds) blanked, as a string:
// configs with the same key can share one ensemble.
std::string ensemble_key(const TrainConfig& c);

}  // namespace scaleinv
