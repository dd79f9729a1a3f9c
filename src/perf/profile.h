#pragma once
// Where a training run's time goes (issue 6): libtorch's autograd profiler (legacy) around
// train_run, aggregated per operator by self time (time inside the op minus the ops it called).
#include <cstdint>
#include <string>

#include "data/data.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "train/config.h"

namespace scaleinv {

// Runs `warmup` steps unprofiled (thread pools, allocator), then a fresh run of `steps` steps
// under the profiler, and returns a table of the `top` operators by self time (name, calls,
// self ms per step, share): CPU time on a CPU; on CUDA (cfg.train.device) device time, read from
// the CUDA events the profiler records on the stream around every op. Set-up ops of the profiled
// run (init, data) appear under their names.
std::string profile_train(TrainConfig cfg, int64_t warmup, int64_t steps, int top = 25);

}  // namespace scaleinv
