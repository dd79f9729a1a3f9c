#pragma once
// Where a training run's time goes (issue 6): libtorch's autograd profiler (legacy, CPU) around
// train_run, aggregated per operator by self time (time inside the op minus the ops it called).
#include <cstdint>
#include <string>

#include "data/data.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "train/config.h"

namespace scaleinv {

// Runs `warmup` steps unprofiled (thread pools, allocator), then a fresh run of `steps` steps
// under the profiler, and returns a table of the `top` operators by self CPU time (name, calls,
// self ms per step, share). Set-up ops of the profiled run (init, data) appear under their names.
std::string profile_train(TrainConfig cfg, int64_t warmup, int64_t steps, int top = 25);

}  // namespace scaleinv
