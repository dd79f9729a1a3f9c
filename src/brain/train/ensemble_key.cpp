// Which configs can share one batched ensemble (see ensemble_key.h).
#include "brain/train/ensemble_key.h"

#include <nlohmann/json.hpp>

namespace scaleinv {

std::string ensemble_key(const TrainConfig& c) {
  nlohmann::json j = train_config_to_json(c);
  j["optim"]["lr"] = 0;
  j["optim"]["weight_decay"] = 0;
  j["train"]["seed"] = 0;
  j["data"]["seed"] = 0;
  j["train"]["out_dir"] = "";
  j.erase("source");
  return j.dump();
}

}  // namespace scaleinv
