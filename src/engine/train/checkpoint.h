#pragma once
// Checkpoints: one file holding the parameterization table, the run config, the step, every
// parameter (raw, as stored: multipliers live in the table, so loading applies nothing twice),
// the model's untrained state where it has any (a mixture's selection biases), and the
// optimizer state, followed by a CRC-32 trailer that every load checks (a damaged file is
// a UserError, field "checksum", never a silent load). Written to a writer-unique temporary name
// and renamed: a killed run leaves the previous checkpoint intact.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "brain/train/config.h"

namespace scaleinv {

struct CheckpointMeta {
  int64_t step = 0;           // steps completed
  ParamTable table;
  TrainConfig config;
  std::string fingerprint;    // param_fingerprint(table)
  std::vector<double> losses; // training loss of every step done (so a resumed run's summary covers the whole run)
};

void save_checkpoint(const std::string& path, const CheckpointMeta& meta, Model& model, const Optimizer* opt);
// Reads only the metadata (to rebuild the model and optimizer before load_checkpoint).
CheckpointMeta read_checkpoint_meta(const std::string& path);
// Restores parameters (and optimizer state when opt is given). Shape or name mismatches are
// UserErrors naming the checkpoint and the tensor.
void load_checkpoint(const std::string& path, Model& model, Optimizer* opt);

}  // namespace scaleinv
