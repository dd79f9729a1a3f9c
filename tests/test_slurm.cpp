// The pieces of `sweep submit --slurm` that need no cluster (issue 61; brain/util/subprocess.h,
// brain/sweep/slurm.h, brain/sweep/sweep_status.h): running a program without a shell, quoting for the job
// scripts, the partition in sbatch options, and the status of a store. Under a real slurmctld:
// tests/python/test_slurm_sweep.py.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "cli_util.h"
#include "brain/util/errors.h"
#include "brain/util/subprocess.h"
#include "brain/sweep/slurm.h"
#include "brain/sweep/slurm_sweep.h"
#include "brain/sweep/sweep_status.h"

using namespace scaleinv;
using scaleinv::testing::run_cli;
using scaleinv::testing::temp_dir;

namespace {
// Four seeds of a tiny bigram model, one point per ensemble chunk (so --shard 1/2 takes two).
const char* kTinyGrid = R"([sweep]
name = "s"
ensemble = 1
[model]
kind = "bigram"
width = 8
depth = 2
[data]
source = "markov"
vocab = 8
markov_length = 2000
[train]
steps = 2
batch_size = 4
eval_every = 0
[grid]
seed = [0, 1, 2, 3]
)";
}  // namespace

TEST(Subprocess, CapturesBothStreamsAndTheExitCodeWithoutAShell) {
  // The argument reaches the program as written: no shell splits or expands it.
  const ProcessResult r = run_process({"sh", "-c", "printf '%s' \"$0\"; echo oops >&2; exit 3", "a b;$HOME'\""}, 10);
  ASSERT_TRUE(r.started);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "a b;$HOME'\"");
  EXPECT_EQ(r.err, "oops\n");
  EXPECT_EQ(r.first_line(), "oops");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(run_process({"sh", "-c", "echo \"$X\""}, 10, {{"X", "set here"}}).out, "set here\n");
}

TEST(Subprocess, AMissingProgramIsNotStartedAndASlowOneIsKilledAtTheLimit) {
  const ProcessResult missing = run_process({"scaleinv-no-such-program"}, 10);
  EXPECT_FALSE(missing.started);
  EXPECT_FALSE(program_on_path("scaleinv-no-such-program"));
  EXPECT_TRUE(program_on_path("sh"));
  const auto t0 = std::chrono::steady_clock::now();
  const ProcessResult slow = run_process({"sleep", "30"}, 0.3);
  EXPECT_TRUE(slow.timed_out);
  EXPECT_EQ(slow.exit_code, 128 + 9);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(Slurm, ShellQuoteSurvivesBashAndThePartitionIsFoundInEveryForm) {
  for (const std::string s : {"plain", "a b", "it's", "$(rm -rf x)", "\"q\" `b` \\ ;&|"}) {
    const ProcessResult r = run_process({"bash", "-c", "printf '%s' " + shell_quote(s)}, 10);
    EXPECT_EQ(r.out, s);
  }
  EXPECT_EQ(partition_in_args({"--time=1:00", "--partition=gpu"}), "gpu");
  EXPECT_EQ(partition_in_args({"--partition", "cpu"}), "cpu");
  EXPECT_EQ(partition_in_args({"-p", "a100"}), "a100");
  EXPECT_EQ(partition_in_args({"-pshort"}), "short");
  EXPECT_EQ(partition_in_args({"--time=1:00"}), "");
}

TEST(Slurm, NoSchedulerOnPathIsOneLineWithExit2) {
  // PATH without sbatch: refused before anything is written.
  const std::string dir = temp_dir("slurm_none");
  const std::string f = dir + "/s.toml";
  std::ofstream(f) << kTinyGrid;
  auto r = scaleinv::testing::run_cli_env("PATH=/nonexistent", "sweep submit --slurm --config " + f + " --out " + dir + "/s.db");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("no scheduler reachable"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/s.slurm"));
  auto no_flag = run_cli("sweep submit --config " + f);
  EXPECT_EQ(no_flag.code, 2);
  EXPECT_NE(no_flag.err.find("--slurm"), std::string::npos) << no_flag.err;
}

TEST(SweepStatus, AStoreAloneCountsItsPointsAgainstItsGrid) {
  const std::string dir = temp_dir("sweep_status");
  const std::string f = dir + "/s.toml";
  std::ofstream(f) << kTinyGrid;
  // --out names the shard's store as given.
  ASSERT_EQ(run_cli("--threads 1 sweep --quiet --config " + f + " --out " + dir + "/s.db --shard 1/2").code, 0);
  const std::string db = dir + "/s.db";
  const SweepStatus st = sweep_status(db);
  EXPECT_EQ(st.expected, 4);
  EXPECT_EQ(st.done, 2);
  EXPECT_NE(render_status(st).find("missing          2 points"), std::string::npos) << render_status(st);
  auto cli = run_cli("sweep status --db " + db);
  EXPECT_EQ(cli.code, 0) << cli.err;
  EXPECT_NE(cli.out.find("points done      2 of 4"), std::string::npos) << cli.out;
  auto none = run_cli("sweep status --db " + dir + "/nothing.db");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("no such database"), std::string::npos) << none.err;
  EXPECT_EQ(read_store_counts(dir + "/nothing.db").ids.size(), 0u);
}
