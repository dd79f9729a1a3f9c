// Batched ensembles: see ensemble.h. (First cut: the reference path, one train_run per member.)
#include "train/ensemble.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace scaleinv {

std::string ensemble_key(const TrainConfig& c) {
  nlohmann::json j = train_config_to_json(c);
  j["optim"]["lr"] = 0;
  j["optim"]["weight_decay"] = 0;
  j["train"]["seed"] = 0;
  j["data"]["seed"] = 0;
  j["train"]["out_dir"] = "";
  return j.dump();
}

bool ensemble_supported(const TrainConfig&) { return false; }

std::vector<RunSummary> train_ensemble(const std::vector<TrainConfig>& members, const EnsembleOptions& opts) {
  std::vector<RunSummary> out;
  if (members.empty()) return out;
  const std::string key = ensemble_key(members[0]);
  for (const auto& m : members)
    if (ensemble_key(m) != key) throw std::invalid_argument("train_ensemble: members differ in more than lr/wd/seeds");
  RunOptions ro;
  ro.write_files = false;
  ro.data_parallel = false;
  ro.show_progress = opts.show_progress;
  for (const auto& m : members) {
    out.push_back(train_run(m, ro));
    if (opts.on_step) opts.on_step(m.train.steps);
  }
  return out;
}

}  // namespace scaleinv
