#pragma once
// A Slurm cluster as scaleinv talks to it (issue 61): through its own client programs, `sbatch`,
// `squeue`, `sinfo` and `scontrol` (brain/util/subprocess.h), the way a user at a login node would, so
// whatever SLURM_CONF, PATH and account the user has hold for scaleinv too. Torch-free.
//
// Every refusal a user can cause is a UserError naming `--slurm` and the fix: no scheduler on PATH
// or none answering, a partition the cluster does not have, an sbatch that refuses the options.
#include <map>
#include <string>
#include <vector>

namespace scaleinv {

class SlurmClient {
 public:
  // `timeout_s`: the most one client call may take (a controller that does not answer).
  explicit SlurmClient(double timeout_s = 60);

  // UserError when sbatch or squeue is not on PATH, or `sinfo` gets no answer from slurmctld.
  void check_reachable() const;

  // The partitions the cluster has (sinfo), the default first.
  std::vector<std::string> partitions() const;

  // UserError naming the partition and listing the cluster's when it has no such partition.
  void check_partition(const std::string& partition) const;

  // `sbatch --parsable ARGS... SCRIPT SCRIPT_ARGS...`: the job id (an array's id). UserError with
  // sbatch's own first line when it refuses.
  std::string submit(const std::string& script, const std::vector<std::string>& args,
                     const std::vector<std::string>& script_args = {}) const;

  // The tasks of job `job_id` the controller still holds as not finished (pending, running,
  // requeued, completing...): array index (-1 for a job that is no array) -> state. Empty once
  // every task has ended (or the controller forgot the job).
  std::map<int, std::string> live_tasks(const std::string& job_id) const;

  // scancel of each job; errors ignored (a job that already ended).
  void cancel(const std::vector<std::string>& job_ids) const;

 private:
  double timeout_s_;
};

// The partition named in sbatch options (--partition=P, --partition P, -p P, -pP); "" when none.
std::string partition_in_args(const std::vector<std::string>& sbatch_args);

// `text` quoted for a POSIX shell ('...', with ' written as '\'').
std::string shell_quote(const std::string& text);

}  // namespace scaleinv
