#pragma once
// Data-parallel training on torch's own distributed engine, c10d (docs/design.md "Dependencies"):
// rendezvous through a c10d::TCPStore (rank 0 hosts it), collectives through
// c10d::ProcessGroupGloo, and the gradients through c10d::ProcessGroupNCCL where every rank trains
// on a GPU of its own (gradient_backend below). Launched like torchrun: every process reads RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK and LOCAL_WORLD_SIZE from its environment (`scaleinv launch` sets them for
// N local processes; docs/distributed.md shows several machines and Slurm).
//
// The training loop talks to one DataParallel object. With WORLD_SIZE unset or 1 it is a
// stand-in that does nothing, so the loop reads the same with or without ranks:
//   - check_same_run: an all-gather of the table fingerprint and config hash at start-up; a
//     mismatch is a UserError on every rank naming the ranks and the first differing field;
//   - replicate: every rank starts from rank 0's parameters, and from then on backward
//     all-reduces the gradients in ~25 MB buckets as soon as a bucket's gradients are all ready
//     (tensor hooks), overlapping communication with the rest of backward;
//   - average_gradients: waits for the buckets and leaves the global batch's mean gradient in
//     every .grad (SUM over ranks, then / world);
//   - mean: scalars averaged over ranks (the losses of the global batch);
//   - fetch_from_root: rank 0's copy of a file (the checkpoint), sent over the group, so
//     resuming needs no shared disk and works with any world size.
// A lost rank (crashed, killed, hung, unreachable) makes every other rank throw RankLost within
// train.dist_timeout_s: one line naming the lost rank(s), never a hang.
#include <torch/torch.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace scaleinv {

// The process's place in the job, from its environment.
struct DistEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 0;  // ranks on this machine (LOCAL_WORLD_SIZE); 0: not given
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Started as a rank (WORLD_SIZE and RANK both in the environment, as `scaleinv launch` and
  // torchrun set them): such a process joins a group even when WORLD_SIZE is 1, so a one-rank run
  // takes the whole data-parallel path (rendezvous, buckets, NCCL where it qualifies).
  bool launched = false;
};
// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. WORLD_SIZE
// unset means one process. Malformed or inconsistent values are UserErrors naming the variable.
DistEnv dist_env_from_environment();

// Which group all-reduces the gradients, as one rank sees it: "nccl" where the parameters are on
// CUDA, this build has NCCL, no other rank trains on this rank's GPU (`sharing`: the ranks, this
// one included, whose GPU has this rank's GPU's UUID; see ranks_sharing), and `requested`
// (SCALEINV_DIST_BACKEND: "", "auto", "nccl" or "gloo") is not "gloo"; else "gloo", with the reason
// in *why_not_nccl (Gloo's buckets live in host memory, so ranks sharing one GPU work). The ranks
// then agree: NCCL only if every rank chose it. A `requested` outside the four is a UserError
// naming SCALEINV_DIST_BACKEND.
std::string gradient_backend(bool cuda_params, bool nccl_built, int sharing, const std::string& requested,
                             std::string* why_not_nccl);
// How many of `ids` (every rank's GPU identity, compat::cuda_device_uuid) equal ids[rank]: 1 when
// the rank's GPU is its own. Physical identities, not device numbers: ranks that each see one GPU
// as cuda:0 (Slurm's one GPU per task) have their own; ranks that see all the machine's GPUs and
// pick cuda:(LOCAL_RANK % count) share one when there are more ranks than GPUs. An empty identity
// (no CUDA) shares nothing.
int ranks_sharing(const std::vector<std::string>& ids, int rank);

// A rank was lost, or a collective failed or timed out. One line; `train` exits non-zero.
class RankLost : public std::runtime_error {
 public:
  static constexpr int kExitCode = 4;
  RankLost(const std::string& message, std::vector<int> lost) : std::runtime_error(message), lost(std::move(lost)) {}
  std::vector<int> lost;  // the ranks that did not answer (may be empty)
};

// Tuning knobs, read from the environment by the constructor (docs/distributed.md):
// SCALEINV_DIST_BUCKET_MB (default 25), SCALEINV_DIST_OVERLAP (1: launch buckets from backward
// hooks, the default; 0: all-reduce every bucket after backward), SCALEINV_DIST_VERBOSE (set: each
// rank prints its bucket layout and communication counts when training ends).
struct BucketSettings {
  int64_t bucket_bytes = 25ll << 20;
  bool overlap = true;
};

class DataParallel {
 public:
  // Joins the group when env.world > 1 or env.launched (rendezvous within timeout_s), else a
  // no-op stand-in.
  DataParallel(const DistEnv& env, double timeout_s);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return env_.rank; }
  int world() const { return env_.world; }
  int local_rank() const { return env_.local_rank; }
  bool is_root() const { return env_.rank == 0; }
  bool active() const { return env_.world > 1 || env_.launched; }

  // Every rank must train the same run: `identity` (the config with the table) is hashed,
  // the hashes all-gathered, and any rank that differs from rank 0 is named in a UserError
  // thrown on every rank, with the first differing field.
  void check_same_run(const nlohmann::json& identity, const std::string& table_fingerprint);
  // Rank 0's file at `path`: "" when rank 0 has none; on rank 0 `path` itself; elsewhere a local
  // copy received over the group (removed when this object goes).
  std::string fetch_from_root(const std::string& path);
  // Picks the gradients' group (gradient_backend, agreed by every rank; SCALEINV_DIST_BACKEND=nccl
  // that cannot be honoured on some rank is a UserError on every rank), copies rank 0's parameters
  // to every rank and installs the gradient hooks.
  void replicate(const std::vector<torch::Tensor>& params);
  // "gloo" or "nccl" once replicate() has run ("" before, or with one process).
  const std::string& gradient_group() const { return gradient_group_; }
  // After backward: waits for every bucket and writes the mean gradient back into .grad.
  void average_gradients();
  // The mean of x over ranks.
  double mean(double x);
  // The mean over ranks of each element (one collective for all of them: a run's losses since its
  // last read-back); the same bits as mean() of each element.
  std::vector<double> mean(const std::vector<double>& xs);

  // Measured communication (for reports): seconds spent waiting in average_gradients, and how
  // many buckets were launched from backward hooks (overlapped) vs after backward.
  double wait_seconds() const { return wait_s_; }
  int64_t buckets_overlapped() const { return overlapped_; }
  int64_t buckets_after_backward() const { return not_overlapped_; }
  int num_buckets() const;

  struct Impl;  // c10d objects and bucket state (dist.cpp)

 private:
  DistEnv env_;
  std::shared_ptr<Impl> impl_;
  std::vector<std::string> temp_files_;
  std::string gradient_group_;
  double wait_s_ = 0;
  int64_t overlapped_ = 0, not_overlapped_ = 0;
};

}  // namespace scaleinv
