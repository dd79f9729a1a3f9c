#pragma once
// A sweep or search sent to a Slurm cluster (issue 61: `scaleinv sweep submit --slurm`,
// `sweep collect`, `sweep drive`, `sweep status`). Torch-free: it writes batch scripts, talks to
// the scheduler through its client programs (slurm.h) and merges stores; the training is done by
// the tasks, each an ordinary `scaleinv sweep` of one shard.
//
// Beside the store DB it keeps a folder, STEM.slurm/ (submission_dir):
//   submission.json   what was submitted: the sweep file, the store, the binary, the sbatch
//                     options, every job with its role and attempt (written atomically)
//   shard.sh          one array task: `scaleinv sweep --shard $SLURM_ARRAY_TASK_ID/N --resume`
//                     (a search's rung K: `--rung K --rung-db DB`) into shards/, a store per task
//   collect.sh        the grid's final job (afterany on the array): `scaleinv sweep collect`
//   drive.sh          a search's driver job: `scaleinv sweep drive`
//   shards/           the tasks' stores; logs/ their output (%x-%A_%a.out)
//
// A grid: one job array (a task per shard; a shard is whole ensemble chunks, shard.h) and a
// collect job that runs after every task has ended, however it ended. The collect job merges
// every shard store into DB (points kept once), and when a shard is unfinished (its task was
// cancelled, failed, or its node died) submits those tasks again with a new collect job, at most
// `retries` times; each task resumes its own store, so no finished point is lost or trained
// again. A task requeued by Slurm (scontrol requeue, a node failure with --requeue) resumes the
// same way. Then DB holds exactly what a one-machine sweep of the file would: the same point ids,
// and the same losses where the runs are deterministic.
//
// A search with rungs (halving, hyperband): a driver (a small job, or this process with
// --foreground) takes a lock beside the store (one driver per store) and, rung by rung, submits
// the rung's trials as a job array, waits for every task, resubmits unfinished shards (`retries`),
// merges the rung's stores into DB (the driver is DB's only writer) and plans the next rung from
// DB exactly as a one-machine search does (search_rank.h), so the ranking and the winner are the
// same. A driver that is killed resumes with `sweep drive` (or `sweep submit` again): finished
// rungs and shards are read back, not run again.
//
// Refusals (UserError, exit 2, naming the option and the fix): no scheduler reachable, a
// partition the cluster lacks, a store folder the compute nodes cannot see (a probe job checks it
// before the array fans out), a submission of this store still running, a sweep of the user's
// own model (Python's executor="slurm" runs those), a store of another grid.
#include <string>
#include <vector>

#include "brain/sweep/search_rank.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/sweep/sweep_status.h"

namespace scaleinv {

struct SlurmSweepOptions {
  std::string db;                         // the merged store (made absolute)
  std::string binary;                     // the scaleinv the tasks run (default: this executable)
  int array_size = 0;                     // tasks per array; 0: one per ensemble chunk, at most 64
  int retries = 1;                        // times an unfinished shard is submitted again
  std::vector<std::string> sbatch_args;   // given to every sbatch as they are (partition, time...)
  bool probe = true;                      // check from a job that the nodes see the store's folder
  double probe_timeout_s = 300;           // the most the probe may wait in the queue and run
  double poll_s = 2;                      // how often a waiting driver asks squeue
};

// STEM.slurm/ beside the store.
std::string submission_dir(const std::string& db_path);

// Submits the sweep file `config_path` (see the top of this file). A search is driven here when
// `foreground`; `wait` waits for a grid's array and collect jobs with a progress bar. Returns the
// summary to print.
std::string submit_sweep_slurm(const std::string& config_path, const SlurmSweepOptions& o, bool foreground, bool wait,
                               bool show_progress);

// The grid's collect job: merges, resubmits unfinished shards while retries last, prints the
// status. Returns the exit code: 0 when DB is complete or shards were resubmitted, 1 when shards
// stay unfinished after every retry.
int collect_sweep_slurm(const std::string& submission_json);

// A search's driver (see the top of this file). Returns the search's summary table (the one a
// one-machine search prints); std::runtime_error when a rung's shards stay unfinished after every
// retry (the driver run again goes on from there).
std::string drive_search_slurm(const std::string& submission_json, bool show_progress);

// What `sweep status --db` prints: with a submission beside the store, every shard store and
// every live task; otherwise the store alone (store_status).
SweepStatus sweep_status(const std::string& db_path);

}  // namespace scaleinv
