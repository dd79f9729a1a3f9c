#pragma once
// The supervisor behind `scaleinv launch --nproc N [--master-port P] [--grace S] -- train ...`.
// Starts N copies of this binary on this machine as data-parallel ranks, like torchrun: each gets
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and MASTER_PORT in its environment (and
// --threads cores/N unless --threads was given). Rank 0 keeps the terminal; the other ranks'
// lines are prefixed "[rank r] ". If a rank fails, the others get --grace seconds to end on their
// own (they notice the lost rank and say so), then SIGTERM, then SIGKILL. launch exits with the
// code of the first rank that ended on its own error before launch stopped any (a rank's mistake,
// 2, stays 2 though the others then lose that rank, whichever ends first); else with 4
// (RankLost::kExitCode) when a rank was lost: killed by a signal launch did not send, or ended
// with 4 itself; else with the first failing rank's code; 128 + signal when launch itself was
// stopped. The code does not depend on whether the survivors noticed the loss before the grace
// period ended.
#include <string>
#include <vector>

#include <torch/arg.h>

namespace scaleinv {

// Named, chained setters as libtorch's options (TORCH_ARG), e.g.
//   LaunchOptions().nproc(2).port(29500).grace_s(5).threads(4).command({"train", "--config", "f.toml"})
struct LaunchOptions {
  TORCH_ARG(int, nproc) = 1;                     // ranks (processes) on this machine
  TORCH_ARG(int, port) = 0;                      // rendezvous port on 127.0.0.1; 0: a free one (UserError if none)
  TORCH_ARG(double, grace_s) = 5;                // seconds the others get to stop on their own after one fails
  TORCH_ARG(int, threads) = 1;                   // --threads passed to every rank
  TORCH_ARG(std::vector<std::string>, command);  // the scaleinv command every rank runs (e.g. train --config F)
};

// Runs `this binary --threads T COMMAND...` as o.nproc() ranks and supervises them as described
// above; returns launch's exit code. Throws std::runtime_error when a pipe or fork fails.
int launch_local_ranks(const LaunchOptions& o);

}  // namespace scaleinv
