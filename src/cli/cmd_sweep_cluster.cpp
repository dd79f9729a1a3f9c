// `scaleinv sweep submit --config SWEEP.toml --slurm [--out DB] [--array-size N] [--retries R]
//      [--partition P] [--no-probe] [--foreground] [--wait] [-- SBATCH OPTIONS...]`
// `scaleinv sweep status --db DB`
// `scaleinv sweep collect --submission F` and `scaleinv sweep drive --submission F` (run by the
// jobs `submit` writes)
// A sweep or search sent to a Slurm cluster, and what it has done so far (issue 61;
// brain/sweep/slurm_sweep.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/errors.h"
#include "brain/util/stop_signal.h"
#include "brain/sweep/search_rank.h"
#include "brain/sweep/slurm_sweep.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/sweep/sweep_summary.h"

namespace scaleinv {

void add_sweep_cluster_commands(CLI::App* sweep, int& exit_code) {
  struct Opts {
    std::string config, out, partition, submission, binary;
    bool slurm = false, no_probe = false, foreground = false, wait = false, quiet = false;
    int array_size = 0, retries = 1;
    double probe_timeout = 300, poll = 2;
    std::vector<std::string> sbatch;
  };
  auto o = std::make_shared<Opts>();
  auto* submit = sweep->add_subcommand(
      "submit", "Send a sweep or search to a cluster: a job array of shards and a job that merges them (a grid), or a "
                "driver that sends each rung as an array (halving, hyperband)");
  reads(submit->add_option("--config", o->config, "sweep TOML")->required());
  writes(submit->add_option("--out", o->out, "the merged store (default: [sweep] db, or runs/sweeps/NAME.db); its "
                                             "folder must be shared with the compute nodes"));
  submit->add_flag("--slurm", o->slurm, "submit to Slurm (sbatch, squeue and sinfo on PATH; SLURM_CONF as usual)");
  submit->add_option("--array-size", o->array_size, "tasks per job array (default: one per ensemble chunk, at most 64)")
      ->check(CLI::Range(1, 100000));
  submit->add_option("--retries", o->retries, "times a shard left unfinished is submitted again (default 1)")
      ->check(CLI::Range(0, 100));
  submit->add_option("--partition", o->partition, "the Slurm partition (checked with sinfo before anything is submitted)");
  submit->add_flag("--no-probe", o->no_probe, "skip the probe job that checks the nodes see the store's folder");
  submit->add_option("--probe-timeout", o->probe_timeout, "seconds the probe job may wait and run (default 300)")
      ->check(CLI::Range(1.0, 86400.0));
  submit->add_option("--poll", o->poll, "seconds between squeue calls while waiting (default 2)")->check(CLI::Range(0.1, 600.0));
  submit->add_flag("--foreground", o->foreground, "a search: drive its rungs from this shell, not from a driver job");
  submit->add_flag("--wait", o->wait, "a grid: wait for the array and the merge, with a progress bar");
  submit->add_flag("--quiet", o->quiet, "no progress bar");
  submit->add_option("--binary", o->binary, "the scaleinv the tasks run (default: this one)");
  submit->add_option("sbatch", o->sbatch, "sbatch options given to every job, after -- (e.g. -- --time=1:00:00 --account=a)");
  submit->callback([o, &exit_code] {
    if (!o->slurm)
      throw UserError("command line", "--slurm", "missing: say which scheduler to submit to",
                      "add --slurm (the one supported; Python's scaleinv.sweep also takes executor=\"ray\")");
    SlurmSweepOptions so;
    const SweepSpec spec = load_sweep(o->config);
    so.db = o->out.empty() ? default_db_path(spec, Shard{}) : o->out;
    so.binary = o->binary;
    so.array_size = o->array_size;
    so.retries = o->retries;
    so.sbatch_args = o->sbatch;
    if (!o->partition.empty()) so.sbatch_args.insert(so.sbatch_args.begin(), "--partition=" + o->partition);
    so.probe = !o->no_probe;
    so.probe_timeout_s = o->probe_timeout;
    so.poll_s = o->poll;
    install_stop_handlers();  // Ctrl-C while waiting: stop waiting; the jobs go on
    std::fputs(submit_sweep_slurm(o->config, so, o->foreground, o->wait, !o->quiet).c_str(), stdout);
    exit_code = 0;
  });

  auto* status = sweep->add_subcommand("status", "What a sweep's store (and a submission's shard stores and tasks) hold now");
  reads(status->add_option("--db", o->out, "the store (the merged one of a submission)")->required());
  status->callback([o, &exit_code] {
    std::fputs(render_status(sweep_status(o->out)).c_str(), stdout);
    exit_code = 0;
  });

  auto* collect = sweep->add_subcommand("collect", "Merge a submission's shard stores and resubmit unfinished shards "
                                                   "(run by the job `sweep submit` writes)");
  // (--submission is read and written back: not declared as an input, which would refuse the write)
  collect->add_option("--submission", o->submission, "STEM.slurm/submission.json")->required();
  collect->callback([o, &exit_code] { exit_code = collect_sweep_slurm(o->submission); });

  auto* drive = sweep->add_subcommand("drive", "Drive a submitted search rung by rung (run by its driver job; run it "
                                               "again to go on after the driver was killed)");
  drive->add_option("--submission", o->submission, "STEM.slurm/submission.json")->required();
  drive->add_flag("--quiet", o->quiet, "no progress bar");
  drive->callback([o, &exit_code] {
    install_stop_handlers();
    std::fputs(drive_search_slurm(o->submission, !o->quiet).c_str(), stdout);
    exit_code = 0;
  });
}

}  // namespace scaleinv
