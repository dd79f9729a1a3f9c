#pragma once
// Where a training run's time goes (issue 6): libtorch's autograd profiler (legacy) around
// train_run, aggregated per operator by self time (time inside the op minus the ops it called).
#include <cstdint>
#include <string>

#include "engine/data/data.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "brain/train/config.h"

namespace scaleinv {

// Runs `warmup` steps unprofiled (thread pools, allocator), then two fresh runs under the profiler,
// of 1 step and of steps + 1, and returns a table of the `top` operators by self time per step
// (name, calls per step, self ms per step, share) from their difference over `steps`: the set-up
// both runs share (init, the weights' upload, data) and the first step cancel. Self time is CPU
// time on a CPU; on CUDA (cfg.train.device) device time, read from the CUDA events the profiler
// records on the stream around every op.
std::string profile_train(TrainConfig cfg, int64_t warmup, int64_t steps, int top = 25);

}  // namespace scaleinv
