// Data-parallel training (src/engine/dist): 2 ranks over loopback with Gloo, through the CLI.
// The ranks are real processes: `scaleinv launch`, or this test starting them with RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT itself (as on several machines), so that it can kill one.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "fixtures.h"
#include "brain/util/errors.h"
#include "engine/dist/dist.h"
#include "engine/train/checkpoint.h"

using namespace scaleinv;
using scaleinv::testing::losses_in;
using scaleinv::testing::max_rel_diff;
using scaleinv::testing::run_cli;
using scaleinv::testing::ScopedEnv;
using scaleinv::testing::slurp;
using scaleinv::testing::temp_dir;
using scaleinv::testing::train_args;

namespace {

// tests/fixtures/small_gpt.toml with global batch 8 (4 per rank with 2 ranks), checkpointing every 5.
const std::string kConfig =
    scaleinv::testing::small_gpt_toml({"train.batch_size=8", "train.checkpoint_every=5", "train.dist_timeout_s=3"});

std::string config_file(const std::string& dir) {
  const std::string path = dir + "/gpt.toml";
  std::ofstream(path) << kConfig;
  return path;
}

struct Curve {
  std::vector<double> loss;
  double val = std::nan("");  // run.json's final validation loss
};

Curve curve_in(const std::string& dir) {
  Curve c;
  c.loss = losses_in(dir + "/metrics.jsonl");
  auto summary = nlohmann::json::parse(slurp(dir + "/run.json"), nullptr, false);
  if (!summary.is_discarded() && summary.value("final_val_loss", nlohmann::json()).is_number())
    c.val = summary["final_val_loss"].get<double>();
  return c;
}

// The uninterrupted single-process run every data-parallel run is compared with (run once).
const Curve& reference() {
  static const Curve ref = [] {
    const std::string dir = temp_dir("dist_ref");
    auto r = run_cli(train_args(config_file(dir), dir + "/run"));
    EXPECT_EQ(r.code, 0) << r.err;
    return curve_in(dir + "/run");
  }();
  return ref;
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// One rank started by hand: `scaleinv --threads 1 ARGS` with the rank's environment, output to files.
struct RankProc {
  pid_t pid = -1;
  std::string out, err;
};

RankProc start_rank(int rank, int world, int port, const std::string& args, const std::string& dir) {
  RankProc p;
  p.out = fmt::format("{}/rank{}.out", dir, rank);
  p.err = fmt::format("{}/rank{}.err", dir, rank);
  const std::string cmd = fmt::format("RANK={} WORLD_SIZE={} LOCAL_RANK={} MASTER_ADDR=127.0.0.1 MASTER_PORT={} exec {} "
                                      "--threads 1 {} >{} 2>{}",
                                      rank, world, rank, port, SCALEINV_BIN, args, p.out, p.err);
  p.pid = fork();
  if (p.pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return p;
}

// Waits up to timeout_s for the process; returns its exit code, or -1 if it is still running.
int wait_exit(pid_t pid, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
}

size_t lines_in(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// Starts 2 ranks on a long run, waits for rank 0 to log a few steps, then does `fault` to rank 1
// and checks that rank 0 ends by itself, naming rank 1, within the 3 s timeout plus slack.
void check_lost_rank_ends_rank0(int fault_signal, const std::string& tag) {
  const std::string dir = temp_dir(tag);
  const std::string args = train_args(config_file(dir), dir + "/run", "--set train.steps=1000000");
  const int port = free_port();
  RankProc r0 = start_rank(0, 2, port, args, dir), r1 = start_rank(1, 2, port, args, dir);
  const auto started = std::chrono::steady_clock::now();
  while (lines_in(dir + "/run/metrics.jsonl") < 3 && std::chrono::steady_clock::now() - started < std::chrono::seconds(90))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(lines_in(dir + "/run/metrics.jsonl"), 3u) << slurp(r0.err) << slurp(r1.err);

  kill(r1.pid, fault_signal);
  const auto t0 = std::chrono::steady_clock::now();
  const double timeout_s = 3, slack_s = 7;
  const int code = wait_exit(r0.pid, timeout_s + slack_s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (code == -1) kill_and_reap(r0.pid);
  kill_and_reap(r1.pid);
  const std::string err = slurp(r0.err);
  ASSERT_NE(code, -1) << "rank 0 still running " << timeout_s + slack_s << " s after rank 1 was lost";
  EXPECT_EQ(code, RankLost::kExitCode) << err;
  EXPECT_NE(err.find("lost rank 1"), std::string::npos) << err;
  // One line, no libtorch backtrace.
  EXPECT_EQ(err.find("frame #"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  std::printf("  rank 0 exited %.2f s after rank 1 got signal %d: %s", took, fault_signal, err.c_str());
}

}  // namespace

TEST(DistEnv, OneProcessWithoutWorldSize) {
  unsetenv("WORLD_SIZE");
  unsetenv("RANK");
  DistEnv e = dist_env_from_environment();
  EXPECT_EQ(e.world, 1);
  EXPECT_EQ(e.rank, 0);
  DataParallel dp(e, 60);  // the stand-in: no group, every call a no-op
  EXPECT_FALSE(dp.active());
  EXPECT_TRUE(dp.is_root());
  EXPECT_EQ(dp.mean(2.5), 2.5);
}

TEST(DistEnv, MissingOrBadVariablesNameTheVariable) {
  setenv("WORLD_SIZE", "2", 1);
  unsetenv("RANK");
  try {
    dist_env_from_environment();
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("RANK"), std::string::npos) << e.what();
  }
  setenv("RANK", "2", 1);
  EXPECT_THROW(dist_env_from_environment(), UserError);  // RANK must be below WORLD_SIZE
  setenv("RANK", "1", 1);
  setenv("MASTER_PORT", "http", 1);
  try {
    dist_env_from_environment();
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_PORT"), std::string::npos) << e.what();
  }
  for (const char* v : {"WORLD_SIZE", "RANK", "MASTER_PORT"}) unsetenv(v);
}

TEST(DistBackend, NcclOnlyWhereEveryRankHasAGpuOfItsOwn) {
  std::string why;
  EXPECT_EQ(gradient_backend(true, true, 1, "", &why), "nccl");
  EXPECT_EQ(why, "");
  EXPECT_EQ(gradient_backend(true, true, 1, "auto", &why), "nccl");
  EXPECT_EQ(gradient_backend(true, true, 1, "nccl", &why), "nccl");
  const struct {
    bool cuda, nccl;
    int sharing;
    const char* requested;
    const char* why;
  } gloo[] = {{false, true, 1, "", "the parameters are not on CUDA"},
              {true, false, 1, "", "this libtorch has no NCCL"},
              {true, true, 2, "", "2 ranks share this rank's GPU"},
              {true, true, 4, "nccl", "4 ranks share this rank's GPU"},
              {true, true, 1, "gloo", "SCALEINV_DIST_BACKEND=gloo"}};
  for (const auto& c : gloo) {
    EXPECT_EQ(gradient_backend(c.cuda, c.nccl, c.sharing, c.requested, &why), "gloo") << c.why;
    EXPECT_EQ(why, c.why);
  }
  try {
    gradient_backend(true, true, 1, "mpi", &why);
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("SCALEINV_DIST_BACKEND"), std::string::npos) << e.what();
  }
  // Who shares a GPU goes by the card's identity, not its number: four Slurm tasks that each see
  // their own card as cuda:0 share nothing; four ranks on a machine of two cards (cuda:(LOCAL_RANK
  // % 2)) share in pairs; ranks without CUDA (empty identities) share nothing.
  const std::vector<std::string> own = {"aa", "bb", "cc", "dd"}, pairs = {"aa", "bb", "aa", "bb"};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ranks_sharing(own, r), 1);
    EXPECT_EQ(ranks_sharing(pairs, r), 2);
    EXPECT_EQ(ranks_sharing({"", "", "", ""}, r), 1);
  }
  EXPECT_EQ(ranks_sharing({"aa", "aa", "aa", "bb"}, 3), 1);
  EXPECT_EQ(ranks_sharing({"aa", "aa", "aa", "bb"}, 0), 3);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  EXPECT_EQ(dist_env_from_environment().local_world, 2);
  setenv("LOCAL_WORLD_SIZE", "0", 1);
  EXPECT_THROW(dist_env_from_environment(), UserError);
  for (const char* v : {"WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE"}) unsetenv(v);
}

TEST(DistBackend, AnNcclRequestNoRankCanHonourIsOneLineOnEveryRank) {
  // CPU parameters: no rank can take NCCL, so every rank refuses after agreeing (no hang).
  const std::string dir = temp_dir("dist_nccl_request");
  ScopedEnv nccl("SCALEINV_DIST_BACKEND", "nccl");
  auto r = run_cli("launch --nproc 2 -- " + train_args(config_file(dir), dir + "/run"));
  EXPECT_EQ(r.code, UserError::kExitCode) << r.err;
  for (const char* rank : {"(this rank: the parameters are not on CUDA)", "[rank 1] error:"})
    EXPECT_NE(r.err.find(rank), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SCALEINV_DIST_BACKEND"), std::string::npos) << r.err;
}

TEST(DistTrain, TwoRanksMatchOneProcessWithTheSameGlobalBatch) {
  const Curve& ref = reference();
  ASSERT_EQ(ref.loss.size(), 20u);
  const std::string dir = temp_dir("dist_2ranks");
  // Small buckets (~50 kB: several for this 0.4 MB model), launched from the backward hooks.
  ScopedEnv small("SCALEINV_DIST_BUCKET_MB", "0.05"), verbose("SCALEINV_DIST_VERBOSE", "1");
  auto r = run_cli("launch --nproc 2 -- " + train_args(config_file(dir), dir + "/run"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 ranks, global batch 8 (4 per rank)"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("rank 0: 9 gradient buckets on gloo"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("launched from backward hooks: 180, after backward: 0"), std::string::npos) << r.err;
  const Curve dp = curve_in(dir + "/run");
  ASSERT_EQ(dp.loss.size(), 20u);
  const double d = max_rel_diff(dp.loss, ref.loss);
  EXPECT_LT(d, 1e-5);
  EXPECT_LT(std::fabs(dp.val - ref.val) / ref.val, 1e-5);
  EXPECT_NE(dp.loss.front(), dp.loss.back());  // it trained
  std::printf("  max relative loss difference over 20 steps, 2 ranks vs 1 process: %.2e\n", d);
}

TEST(DistTrain, OneLaunchedRankTakesTheGroupPathAndMatchesOneProcessBitForBit) {
  // `launch --nproc 1` (WORLD_SIZE=1 and RANK=0 set) joins a one-rank group: rendezvous, buckets,
  // all-reduce (on a GPU, NCCL at world size 1). Averaging over one rank divides by 1 and Gloo's
  // all-reduce of one rank returns its input, so the curve is the single process's exactly.
  const Curve& ref = reference();
  const std::string dir = temp_dir("dist_1rank");
  ScopedEnv verbose("SCALEINV_DIST_VERBOSE", "1");
  auto r = run_cli("launch --nproc 1 -- " + train_args(config_file(dir), dir + "/run"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("rank 0: 1 gradient buckets on gloo"), std::string::npos) << r.err;
  const Curve one = curve_in(dir + "/run");
  ASSERT_EQ(one.loss.size(), ref.loss.size());
  EXPECT_EQ(one.loss, ref.loss);
  EXPECT_EQ(one.val, ref.val);
}

// A data-parallel run reads its losses back only at logged, checkpointed and last steps, with one
// all-reduce of the losses since the last read-back (RunOptions::loss_readback). Logging every 6
// steps, checkpointing every 8, 2 ranks:
// - a run that trains through logs the one process's losses (same global batch, 1e-5 as above);
// - a run that an SGD warm-up to LR 100 sends to NaN between two read-backs ends as diverged on
//   every rank at once (launch exits with the diverged code, no rank is lost waiting for another
//   in the next collective), logs the NaN row at its step and keeps only the checkpoints before it.
//   Its step is not compared with one process's: the blow-up multiplies the ranks' 1e-7 rounding
//   difference (0.2% by step 6), and at some warm-ups the two cross into overflow a step apart.
TEST(DistTrain, LossesReadBackBetweenStepsEndEveryRankAtTheSameStep) {
  for (const bool diverging : {false, true}) {
    SCOPED_TRACE(diverging ? "diverging run" : "run that trains through");
    std::vector<std::string> sets = {"train.batch_size=8", "train.steps=24", "train.log_every=6",
                                     "train.checkpoint_every=8", "train.dist_timeout_s=3"};
    if (diverging) sets.insert(sets.end(), {"optim.kind=\"sgd\"", "optim.lr=100", "optim.warmup_steps=50"});
    const std::string dir = temp_dir(diverging ? "dist_readback_nan" : "dist_readback");
    const std::string cfg = dir + "/gpt.toml";
    std::ofstream(cfg) << scaleinv::testing::small_gpt_toml(sets);
    auto rows = [](const std::string& path) {  // every logged row's (step, loss); a NaN loss is JSON null
      std::vector<std::pair<int64_t, double>> out;
      std::istringstream in(slurp(path));
      for (std::string line; std::getline(in, line);) {
        const nlohmann::json j = nlohmann::json::parse(line);
        out.emplace_back(j.at("step").get<int64_t>(), j.at("loss").is_number() ? j.at("loss").get<double>() : NAN);
      }
      return out;
    };
    if (!diverging) {
      auto one = run_cli(train_args(cfg, dir + "/one"));
      ASSERT_EQ(one.code, 0) << one.err;
      auto two = run_cli("launch --nproc 2 -- " + train_args(cfg, dir + "/two"));
      ASSERT_EQ(two.code, 0) << two.err;
      const auto a = rows(dir + "/one/metrics.jsonl"), b = rows(dir + "/two/metrics.jsonl");
      ASSERT_EQ(b.size(), 4u);  // steps 6, 12, 18, 24
      ASSERT_EQ(a.size(), b.size());
      std::vector<double> la, lb;
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(b[i].first, a[i].first);
        la.push_back(a[i].second);
        lb.push_back(b[i].second);
      }
      const double d = max_rel_diff(lb, la);
      EXPECT_LT(d, 1e-5);
      EXPECT_EQ(read_checkpoint_meta(dir + "/two/checkpoint.pt").step, 24);
      std::printf("  trains through: 4 logged rows, 2 ranks vs 1 process within %.2e\n", d);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto two = run_cli("launch --nproc 2 -- " + train_args(cfg, dir + "/two"));
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(two.code, Diverged::kExitCode) << two.err;
    EXPECT_EQ(two.err.find("lost"), std::string::npos) << two.err;
    EXPECT_LT(took, 3.0 + 5.0) << "a rank waited for the others' timeout";  // dist_timeout_s + slack
    const auto summary = nlohmann::json::parse(slurp(dir + "/two/run.json"));
    ASSERT_TRUE(summary.at("diverged").get<bool>());
    const int64_t ds = summary.at("diverged_step").get<int64_t>();
    EXPECT_EQ(summary.at("steps_done").get<int64_t>(), ds);
    const auto r = rows(dir + "/two/metrics.jsonl");
    ASSERT_FALSE(r.empty());
    EXPECT_EQ(r.back().first, ds + 1);  // the NaN row at the diverged step (rows count steps from 1)
    EXPECT_TRUE(std::isnan(r.back().second));
    for (size_t i = 0; i + 1 < r.size(); ++i) EXPECT_TRUE(std::isfinite(r[i].second)) << "row " << r[i].first;
    // The last checkpoint is the last multiple of 8 at or before the diverged step, none after it.
    const int64_t want_ckpt = ds / 8 * 8;
    ASSERT_GT(want_ckpt, 0) << "the warm-up diverged before the first checkpoint: lengthen optim.warmup_steps";
    EXPECT_EQ(read_checkpoint_meta(dir + "/two/checkpoint.pt").step, want_ckpt);
    std::printf("  diverging: both ranks ended at step %lld in %.1f s, last checkpoint at step %lld\n",
                static_cast<long long>(ds), took, static_cast<long long>(want_ckpt));
  }
}

TEST(DistTrain, ResumeAcrossAChangedWorldSize) {
  const Curve& ref = reference();
  const std::string dir = temp_dir("dist_resume");
  const std::string cfg = config_file(dir);
  // 2 ranks for 10 steps, then 1 process to 20.
  auto r = run_cli("launch --nproc 2 -- " + train_args(cfg, dir + "/a", "--stop-after 10"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli(train_args(cfg, dir + "/a", "--resume"));
  ASSERT_EQ(r.code, 0) << r.err;
  const double d21 = max_rel_diff(curve_in(dir + "/a").loss, ref.loss);
  EXPECT_LT(d21, 1e-5);
  // 1 process for 10 steps, then 2 ranks to 20.
  r = run_cli(train_args(cfg, dir + "/b", "--stop-after 10"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli("launch --nproc 2 -- " + train_args(cfg, dir + "/b", "--resume"));
  ASSERT_EQ(r.code, 0) << r.err;
  const double d12 = max_rel_diff(curve_in(dir + "/b").loss, ref.loss);
  EXPECT_LT(d12, 1e-5);
  std::printf("  max relative loss difference vs the uninterrupted run: 2->1 ranks %.2e, 1->2 ranks %.2e\n", d21,
              d12);
}

TEST(DistFault, KilledRankEndsTheOthersWithinTheTimeout) { check_lost_rank_ends_rank0(SIGKILL, "dist_kill"); }

TEST(DistFault, HungRankEndsTheOthersWithinTheTimeout) { check_lost_rank_ends_rank0(SIGSTOP, "dist_stop"); }

TEST(DistFault, MismatchedConfigIsAClearErrorOnEveryRank) {
  const std::string dir = temp_dir("dist_mismatch");
  const std::string cfg = config_file(dir);
  const int port = free_port();
  RankProc r0 = start_rank(0, 2, port, train_args(cfg, dir + "/run", "--set optim.lr=0.01"), dir);
  RankProc r1 = start_rank(1, 2, port, train_args(cfg, dir + "/run", "--set optim.lr=0.02"), dir);
  const int c0 = wait_exit(r0.pid, 60), c1 = wait_exit(r1.pid, 60);
  if (c0 == -1) kill_and_reap(r0.pid);
  if (c1 == -1) kill_and_reap(r1.pid);
  for (const auto& [code, file] : {std::pair{c0, r0.err}, std::pair{c1, r1.err}}) {
    const std::string err = slurp(file);
    EXPECT_EQ(code, UserError::kExitCode) << err;
    EXPECT_NE(err.find("rank 1 trains a different run than rank 0"), std::string::npos) << err;
    EXPECT_NE(err.find("optim.lr = 0.02 vs 0.01 on rank 0"), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  std::printf("  rank 1 said: %s", slurp(r1.err).c_str());
}

TEST(DistLaunch, AFailingRankEndsTheLaunchWithItsCode) {
  const std::string dir = temp_dir("dist_launch_fail");
  // A mistake in the config is found by the launcher before any rank starts: one line.
  auto r = run_cli("launch --nproc 2 -- train --quiet --config " + dir + "/missing.toml");
  EXPECT_EQ(r.code, UserError::kExitCode) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = run_cli("launch --nproc 2 -- sample --checkpoint x");
  EXPECT_EQ(r.code, UserError::kExitCode) << r.err;
  // Only rank 0 writes, so only it finds that out_dir cannot be created (2), and rank 1 then loses
  // it (4): the launch ends with the mistake's code, the one the user has to act on.
  r = run_cli("launch --nproc 2 -- " + train_args(config_file(dir), "/proc/scaleinv_no_such_dir/run"));
  EXPECT_EQ(r.code, UserError::kExitCode) << r.err;
  EXPECT_NE(r.err.find("train.out_dir"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[rank 1] "), std::string::npos) << r.err;  // rank 1's lines are prefixed
}
