// Sweeps (issue 8): grid expansion and validation, sharding, the SQLite store, resume after
// kill -9, merging shards, divergence recorded.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "cli_util.h"
#include "brain/util/errors.h"
#include "fixtures.h"
#include "brain/util/sqlite_db.h"
#include "engine/runtime/threads.h"
#include "engine/runtime/torch_compat.h"
#include "brain/sweep/shard.h"
#include "engine/sweep/sweep_runner.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/sweep/sweep_store.h"

using namespace scaleinv;
using scaleinv::testing::sweep_error_of;
using scaleinv::testing::run_cli;
using scaleinv::testing::temp_dir;
using scaleinv::testing::tiny_sweep_path;
using scaleinv::testing::write_file;

namespace {


// A sweep file shipped under examples/ (e.g. "sweeps/tiny_markov.toml"), expanded.
SweepSpec shipped(const std::string& rel) { return load_sweep(std::string(SCALEINV_SOURCE_DIR) + "/examples/" + rel); }

// A small sweep with inline config (no base file).
const char* kInline = R"(
[sweep]
name = "t"
ensemble = 3
[model]
kind = "bigram"
width = 32
depth = 2
[data]
source = "markov"
vocab = 16
[train]
steps = 5
[grid]
param = ["standard", "mup"]
"model.width" = [32, 64]
lr_log2 = [-8, -6]
seed = [0, 1]
)";

SweepSpec inline_spec(const std::string& extra_grid = "", const std::string& text = kInline) {
  return sweep_from_toml_text(text + extra_grid, "t.toml", ".");
}


int64_t count_rows(const std::string& db) {
  SqliteDb d(db);
  return std::get<int64_t>(d.query("SELECT COUNT(*) FROM points")[0][0]);
}

// id -> every column of the row, as text.
std::map<std::string, std::string> rows_by_id(const std::string& db) {
  SqliteDb d(db);
  std::map<std::string, std::string> out;
  for (const auto& r : d.query("SELECT * FROM points")) {
    std::string all;
    for (const auto& v : r) {
      if (auto s = std::get_if<std::string>(&v)) all += *s;
      else if (auto i = std::get_if<int64_t>(&v)) all += std::to_string(*i);
      else if (auto x = std::get_if<double>(&v)) all += fmt::format("{}", *x);
      else all += "NULL";
      all += "|";
    }
    out[std::get<std::string>(r[0])] = all;
  }
  return out;
}

std::set<std::string> grid_ids(const SweepSpec& s) {
  std::set<std::string> ids;
  for (const auto& p : s.points) ids.insert(p.id);
  return ids;
}


// id -> "final_loss curve final_val_loss" of every point in a sweep database (what must not depend
// on how the sweep was run).
std::map<std::string, std::string> point_results(const std::string& db) {
  SqliteDb d(db);
  std::map<std::string, std::string> out;
  for (const auto& r : d.query("SELECT id, final_loss, curve, final_val_loss FROM points"))
    out[std::get<std::string>(r[0])] =
        fmt::format("{} {} {}", std::get<double>(r[1]), std::get<std::string>(r[2]), std::get<double>(r[3]));
  return out;
}

}  // namespace

TEST(SweepSpec, GridIsTheCartesianProductInAFixedOrderWithStableIds) {
  SweepSpec s = inline_spec();
  ASSERT_EQ(s.points.size(), 16u);
  ASSERT_EQ(s.axes.size(), 4u);
  EXPECT_EQ(s.axes[0].key, "param");  // structural axes outermost, LR then seed innermost
  EXPECT_EQ(s.axes[1].key, "model.width");
  EXPECT_EQ(s.axes[2].key, "lr_log2");
  EXPECT_EQ(s.axes[3].key, "seed");
  const SweepPoint& p1 = s.points[1];
  EXPECT_EQ(p1.config.param, "standard");
  EXPECT_EQ(p1.config.model.width, 32);
  EXPECT_EQ(p1.config.optim.lr, std::exp2(-8.0));
  EXPECT_EQ(p1.config.train.seed, 1);
  EXPECT_EQ(p1.config.data.seed, 1);  // seed sets both
  EXPECT_EQ(p1.axes.at("lr_log2"), -8);
  EXPECT_EQ(s.points[15].config.param, "mup");
  EXPECT_EQ(s.points[15].config.model.width, 64);
  EXPECT_EQ(s.points[15].config.optim.lr, std::exp2(-6.0));
  // Same file, same ids and fingerprint; another grid, another fingerprint.
  SweepSpec again = inline_spec();
  for (size_t i = 0; i < s.points.size(); ++i) EXPECT_EQ(s.points[i].id, again.points[i].id);
  EXPECT_EQ(grid_ids(s).size(), 16u);
  EXPECT_EQ(s.fingerprint, again.fingerprint);
  std::string other = kInline;
  other.replace(other.find("[-8, -6]"), 8, "[-8, -5]");
  EXPECT_NE(inline_spec("", other).fingerprint, s.fingerprint);
}

TEST(SweepSpec, RangesNestedKeysAndTheBaseFile) {
  const std::string dir = temp_dir("spec");
  write_file(dir + "/base.toml", "[model]\nkind = \"bigram\"\nwidth = 48\n[data]\nsource = \"markov\"\nvocab = 16\n");
  const std::string text = R"(
base = "base.toml"
set = ["train.steps=7"]
[hp]
init_scale = 0.5
[grid]
lr_log2 = {from = -6, to = -4, step = 1}
[grid.hp]
output_mult = [1.0, 2.0]
)";
  SweepSpec s = sweep_from_toml_text(text, dir + "/s.toml", dir);
  ASSERT_EQ(s.points.size(), 6u);
  EXPECT_EQ(s.name, "s");
  EXPECT_EQ(s.points[0].config.model.width, 48);  // from the base
  EXPECT_EQ(s.points[0].config.train.steps, 7);   // from set
  EXPECT_EQ(s.points[0].config.hp.init_scale, 0.5);  // inline section
  EXPECT_EQ(s.points[0].config.hp.output_mult, 1.0);
  EXPECT_EQ(s.points[3].config.hp.output_mult, 2.0);
  EXPECT_EQ(s.points[2].config.optim.lr, std::exp2(-4.0));
  // The shipped examples expand and validate.
  for (const char* f : {"tiny_markov.toml", "gpt_kjv_width.toml", "resmlp_fashion_depth.toml"}) {
    SweepSpec e = shipped(std::string("sweeps/") + f);
    EXPECT_GT(e.points.size(), 8u) << f;
  }
  // The demo's sweep files run on their own too, with the sizes docs/demo.md states (64 and 48 runs).
  EXPECT_EQ(shipped("demo/width_sweep.toml").points.size(), 64u);
  EXPECT_EQ(shipped("demo/depth_sweep.toml").points.size(), 48u);
  // docs/results/transfer_depth_resmlp.md's depth search and its tuned depth sweep: 81 trials x 2 seeds in the first rung; 540
  // runs carrying the search's winner (its set lines) to every depth.
  EXPECT_EQ(shipped("sweeps/resmlp_fashion_depth_search.toml").points.size(), 162u);
  const SweepSpec tuned = shipped("sweeps/resmlp_fashion_depth_tuned.toml");
  ASSERT_EQ(tuned.points.size(), 540u);
  for (const auto& p : tuned.points) {
    EXPECT_DOUBLE_EQ(p.config.hp.branch_mult, 0.635403);
    EXPECT_DOUBLE_EQ(p.config.hp.output_mult, 0.428609);
  }
  EXPECT_EQ(shipped("sweeps/resmlp_fashion_depth_tuned_8seeds.toml").points.size(), 1080u);
  // docs/results/transfer_width.md's 1000-step width check: the width-64 search (81 trials x 2 seeds, first rung of 111
  // steps) and the 144 runs carrying its winner to widths 64..512.
  const SweepSpec search = shipped("sweeps/gpt_kjv_search_1000.toml");
  ASSERT_EQ(search.points.size(), 162u);
  EXPECT_EQ(search.points.front().config.train.steps, 111);
  const SweepSpec width = shipped("sweeps/gpt_kjv_width_tuned.toml");
  ASSERT_EQ(width.points.size(), 144u);
  for (const auto& p : width.points) {
    EXPECT_EQ(p.config.train.steps, 1000);
    EXPECT_DOUBLE_EQ(p.config.hp.output_mult, 1.484251);
    EXPECT_DOUBLE_EQ(p.config.hp.embed_mult, 1.165334);
    EXPECT_EQ(p.config.optim.warmup_steps, 33);
  }
  // docs/results/transfer_depth_gpt.md's GPT in depth (search at width 64, depth 2 with the branch multiplier; 270 runs to
  // depths 2..32 with base depth 2), the 1000-step residual-MLP depth pair, and the decay-shape
  // study (108 runs of three shapes, 36 of wsd in a second database).
  EXPECT_EQ(shipped("sweeps/gpt_kjv_depth_search.toml").points.size(), 162u);
  const SweepSpec gdepth = shipped("sweeps/gpt_kjv_depth_tuned.toml");
  ASSERT_EQ(gdepth.points.size(), 270u);
  for (const auto& p : gdepth.points) {
    EXPECT_EQ(p.config.param_base_depth, 2);
    EXPECT_DOUBLE_EQ(p.config.hp.branch_mult, 0.719433);
  }
  EXPECT_EQ(shipped("sweeps/resmlp_fashion_depth_search_1000.toml").points.front().config.train.steps, 111);
  const SweepSpec r1000 = shipped("sweeps/resmlp_fashion_depth_tuned_1000.toml");
  ASSERT_EQ(r1000.points.size(), 540u);
  EXPECT_EQ(r1000.points.front().config.train.steps, 1000);
  EXPECT_DOUBLE_EQ(r1000.points.front().config.hp.branch_mult, 1.612717);
  const SweepSpec std_branch = shipped("sweeps/resmlp_fashion_depth_standard_branch_1000.toml");
  ASSERT_EQ(std_branch.points.size(), 192u);
  EXPECT_DOUBLE_EQ(std_branch.points.front().config.hp.output_mult, 0.321243);
  EXPECT_EQ(shipped("sweeps/gpt_kjv_schedule.toml").points.size(), 108u);
  const SweepSpec wsd = shipped("sweeps/gpt_kjv_schedule_wsd.toml");
  ASSERT_EQ(wsd.points.size(), 36u);
  EXPECT_EQ(wsd.points.front().config.optim.schedule, "wsd");
  EXPECT_DOUBLE_EQ(wsd.points.front().config.optim.decay_fraction, 0.2);
  // The 1000-step depth search grown into hyperband (the halving search's points and fingerprint,
  // so it resumes that store); the alpha = 2/3 row carried to depths 4..64 (90 runs) and re-tuned at
  // 16..64 (90 runs).
  const SweepSpec halving = shipped("sweeps/resmlp_fashion_depth_search_1000.toml");
  const SweepSpec hyperband = shipped("sweeps/resmlp_fashion_depth_hyperband_1000.toml");
  EXPECT_EQ(hyperband.fingerprint, halving.fingerprint);
  ASSERT_EQ(hyperband.points.size(), 162u);
  EXPECT_EQ(hyperband.points.back().id, halving.points.back().id);
  // Their param file is named as docs/results/ runs them, from the repository root.
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(SCALEINV_SOURCE_DIR);
  const SweepSpec alpha = shipped("sweeps/resmlp_fashion_depth_alpha_1000.toml");
  const SweepSpec alpha_retuned = shipped("sweeps/resmlp_fashion_depth_alpha_retuned_1000.toml");
  const SweepSpec gpt_alpha = shipped("sweeps/gpt_kjv_depth_alpha.toml");
  std::filesystem::current_path(cwd);
  ASSERT_EQ(alpha.points.size(), 90u);
  EXPECT_EQ(alpha.points.front().config.param, "examples/params/depth_alpha_2_3.toml");
  EXPECT_EQ(alpha_retuned.points.size(), 90u);
  // The GPT's stronger depth baseline: 168 runs, the base's constants but the branch multiplier.
  const SweepSpec gpt_branch = shipped("sweeps/gpt_kjv_depth_standard_branch.toml");
  ASSERT_EQ(gpt_branch.points.size(), 168u);
  EXPECT_DOUBLE_EQ(gpt_branch.points.front().config.hp.output_mult, 1.670953);
  EXPECT_EQ(shipped("sweeps/gpt_kjv_depth_standard_branch_low.toml").points.size(), 56u);
  {  // The GPU's widths 1024 and 2048 (train.device = "cuda"): on a CPU build, valid but for the device.
    std::ifstream in(std::string(SCALEINV_SOURCE_DIR) + "/examples/sweeps/gpt_kjv_width_tuned_2048.toml");
    std::stringstream text;
    text << in.rdbuf();
    const std::string cuda = text.str();
    const size_t at = cuda.find("device = \"cuda\"");
    ASSERT_NE(at, std::string::npos);
    std::string cpu = cuda;
    cpu.replace(at, 15, "device = \"cpu\"");
    const SweepSpec w2048 = sweep_from_toml_text(cpu, "gpt_kjv_width_tuned_2048.toml", ".");
    ASSERT_EQ(w2048.points.size(), 72u);
    EXPECT_DOUBLE_EQ(w2048.points.front().config.hp.output_mult, 1.484251);
    EXPECT_EQ(w2048.points.front().config.train.steps, 1000);
  }
  ASSERT_EQ(gpt_alpha.points.size(), 90u);
  EXPECT_EQ(gpt_alpha.points.front().config.param_base_depth, 2);
}

// Every config and sweep file shipped in examples/ loads (every point of a sweep through the config
// loader), so a field renamed or removed in the code cannot leave a stale example behind. From the
// repository root, where the README runs them (some name examples/params/*.toml from there).
TEST(SweepSpec, EveryShippedExampleLoads) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(SCALEINV_SOURCE_DIR) / "examples";
  const fs::path cwd = fs::current_path();
  fs::current_path(SCALEINV_SOURCE_DIR);
  size_t configs = 0, sweeps = 0;
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().extension() == ".toml") {
      EXPECT_NO_THROW(load_train_config(e.path().string())) << e.path();
      ++configs;
    }
  for (const auto& e : fs::directory_iterator(root / "sweeps"))
    if (e.path().extension() == ".toml") {
      EXPECT_NO_THROW(EXPECT_FALSE(load_sweep(e.path().string()).points.empty())) << e.path();
      ++sweeps;
    }
  fs::current_path(cwd);
  EXPECT_GE(configs, 8u);
  EXPECT_GE(sweeps, 40u);
}

// A field that a config writes only under some settings (a mixture's bias_rate and hp.router_mult
// when not at their defaults, wsd's decay_fraction, Muon's fields) is a grid key like any other,
// and each point's config holds its value.
TEST(SweepSpec, FieldsWrittenOnlyUnderSomeSettingsAreGridKeys) {
  const SweepSpec s = sweep_from_toml_text(
      "[model]\nkind = \"moe\"\nwidth = 64\nexperts = 4\n[data]\nsource = \"markov\"\n[optim]\nschedule = \"wsd\"\n"
      "[grid]\n\"hp.router_mult\" = [1.0, 2.0]\n\"model.bias_rate\" = [0.0, 0.01]\n\"optim.decay_fraction\" = [0.2]\n",
      "t.toml", ".");
  ASSERT_EQ(s.points.size(), 4u);
  std::set<std::pair<double, double>> seen;
  for (const SweepPoint& p : s.points) {
    seen.insert({p.config.hp.router_mult, p.config.model.bias_rate});
    EXPECT_DOUBLE_EQ(p.config.optim.decay_fraction, 0.2);
  }
  EXPECT_EQ(seen, (std::set<std::pair<double, double>>{{1, 0}, {1, 0.01}, {2, 0}, {2, 0.01}}));
}

TEST(SweepSpec, MistakesNameTheFileAndTheField) {
  const std::string cfg = "[model]\nkind = \"bigram\"\n[data]\nsource = \"markov\"\n";
  EXPECT_NE(sweep_error_of(cfg + "[grid]\nmodel.widht = [32]\n").find("bad.toml: field 'grid.model.widht': unknown grid key"),
            std::string::npos);
  EXPECT_NE(sweep_error_of(cfg + "[grid]\nfoo = [1]\n").find("'grid.foo'"), std::string::npos);
  EXPECT_NE(sweep_error_of(cfg + "[grid]\n").find("the grid is empty"), std::string::npos);
  EXPECT_NE(sweep_error_of(cfg).find("'grid': missing"), std::string::npos);
  EXPECT_NE(sweep_error_of(cfg + "[grid]\nlr_log2 = []\n").find("'grid.lr_log2': the axis has no values"), std::string::npos);
  EXPECT_NE(sweep_error_of(cfg + "[grid]\n\"model.width\" = [\"wide\"]\n").find("'grid.model.width': every value must be an integer"),
            std::string::npos);
  EXPECT_NE(sweep_error_of(cfg + "[grid]\nlr_log2 = -3\n").find("expected an array"), std::string::npos);
  EXPECT_NE(sweep_error_of(cfg + "[grid]\nparam = [\"nosuch\"]\n").find("unknown preset"), std::string::npos);
  EXPECT_NE(sweep_error_of(cfg + "[grid]\n\"model.width\" = [0]\n").find("width=0"), std::string::npos);
  EXPECT_NE(sweep_error_of(cfg + "[grid]\nlr_log2 = [-3]\n\"optim.lr\" = [0.1]\n").find("keep only one"), std::string::npos);
  EXPECT_NE(sweep_error_of(cfg + "[grid]\nseed = [1, 1]\n").find("appears twice"), std::string::npos);
  EXPECT_NE(sweep_error_of(cfg + "[sweep]\nwindow = 2.0\n[grid]\nseed = [1]\n").find("'sweep.window'"), std::string::npos);
  EXPECT_NE(sweep_error_of("bogus = 1\n" + cfg + "[grid]\nseed = [1]\n").find("'bogus': unknown field"), std::string::npos);
  EXPECT_NE(sweep_error_of("base = \"nope.toml\"\n[grid]\nseed = [1]\n").find("'base'"), std::string::npos);
}

TEST(Shard, ParseRejectsMalformedAndOutOfRange) {
  EXPECT_EQ(parse_shard("1/3").index, 1);
  EXPECT_EQ(parse_shard("1/3").count, 3);
  for (const char* bad : {"3/2", "2/2", "0/0", "x/2", "1", "-1/2", "1/", "/2", "1/2/3", ""})
    EXPECT_THROW(parse_shard(bad), UserError) << bad;
}

TEST(Shard, ShardsAreDisjointCoverTheGridAndKeepEnsembleChunksWhole) {
  SweepSpec s = inline_spec();  // ensemble = 3: groups of 4 (2 LRs x 2 seeds) -> chunks of 3 + 1
  std::vector<size_t> all(s.points.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const auto chunks = ensemble_chunks(s.points, all, s.ensemble);
  EXPECT_EQ(chunks.size(), 8u);
  for (int n = 1; n <= 5; ++n) {
    std::vector<int> owner(s.points.size(), -1);
    for (int i = 0; i < n; ++i)
      for (size_t p : shard_points(s, {i, n})) {
        EXPECT_EQ(owner[p], -1) << "point " << p << " in two shards of " << n;
        owner[p] = i;
      }
    for (size_t p = 0; p < owner.size(); ++p) EXPECT_NE(owner[p], -1) << "point " << p << " in no shard of " << n;
    for (const auto& c : chunks)
      for (size_t p : c) EXPECT_EQ(owner[p], owner[c.front()]) << "a chunk split across shards";
  }
}

TEST(SweepStore, WindowMean) {
  EXPECT_DOUBLE_EQ(window_mean({4, 3, 2, 1}, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(window_mean({4, 3, 2, 1}, 0.01), 1.0);  // at least one step
  EXPECT_DOUBLE_EQ(window_mean({4, 3, 2, 1}, 1.0), 2.5);
  EXPECT_TRUE(std::isnan(window_mean({}, 0.1)));
}

TEST(SweepCli, RunsIntoTheStoreResumesAndRefusesToOverwrite) {
  const std::string dir = temp_dir("sweep_run");
  const std::string db = dir + "/inline.db";
  const std::string f = write_file(dir + "/inline.toml", kInline);
  SweepSpec spec = load_sweep(f);
  auto r = run_cli("sweep --quiet --config " + f + " --out " + db);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("sweep summary"), std::string::npos);
  EXPECT_EQ(count_rows(db), static_cast<int64_t>(spec.points.size()));
  {
    SqliteDb d(db);
    std::set<std::string> ids;
    for (const auto& row : d.query("SELECT id, final_loss, diverged, steps_done, curve, param, width, lr_log2 FROM points")) {
      ids.insert(std::get<std::string>(row[0]));
      if (std::get<int64_t>(row[2]) != 0) continue;  // diverged: recorded at its step
      EXPECT_GT(std::get<double>(row[1]), 0.0);
      EXPECT_EQ(std::get<int64_t>(row[3]), 5);
      EXPECT_EQ(nlohmann::json::parse(std::get<std::string>(row[4])).size(), 5u);
    }
    EXPECT_EQ(ids, grid_ids(spec));
    auto fp = d.query("SELECT value FROM meta WHERE key = 'fingerprint'");
    ASSERT_EQ(fp.size(), 1u);
    EXPECT_EQ(std::get<std::string>(fp[0][0]), spec.fingerprint);
  }
  // Without --resume a database with points is refused; with it nothing is redone.
  auto again = run_cli("sweep --quiet --config " + f + " --out " + db);
  EXPECT_EQ(again.code, 2);
  EXPECT_NE(again.err.find("--resume"), std::string::npos) << again.err;
  const auto before = rows_by_id(db);
  auto resumed = run_cli("sweep --quiet --config " + f + " --out " + db + " --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find(fmt::format("{} (already in the db)", spec.points.size())), std::string::npos) << resumed.out;
  EXPECT_EQ(rows_by_id(db), before);
  // A changed grid cannot resume into this db.
  std::string text = kInline;
  text.replace(text.find("[-8, -6]"), 8, "[-8, -5]");
  const std::string changed = write_file(dir + "/changed.toml", text);
  auto bad = run_cli("sweep --quiet --config " + changed + " --out " + db + " --resume");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("another grid"), std::string::npos) << bad.err;
  // Malformed shards and missing files: one line, exit 2.
  for (const char* shard : {"3/2", "0/0", "x/2"}) {
    auto e = run_cli("sweep --quiet --config " + f + " --out " + dir + "/x.db --shard " + shard);
    EXPECT_EQ(e.code, 2) << shard;
    EXPECT_NE(e.err.find("--shard"), std::string::npos) << e.err;
  }
  EXPECT_EQ(run_cli("sweep --quiet --config " + dir + "/missing.toml").code, 2);
  auto mode = run_cli("sweep --quiet --config " + f + " --out " + dir + "/y.db --batch sometimes");
  EXPECT_EQ(mode.code, 2);
  EXPECT_NE(mode.err.find("--batch"), std::string::npos) << mode.err;
}

TEST(SweepCli, KilledSweepResumesWithoutLosingOrRedoingAPoint) {
  const std::string dir = temp_dir("sweep_kill");
  const std::string db = dir + "/killed.db";
  SweepSpec spec = load_sweep(tiny_sweep_path());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execl(SCALEINV_BIN, SCALEINV_BIN, "--threads", "1", "sweep", "--quiet", "--config", tiny_sweep_path().c_str(), "--out",
          db.c_str(), "--shard", "0/1", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Kill -9 as soon as the db holds a finished chunk.
  int64_t rows = 0;
  bool exited = false;
  for (int i = 0; i < 6000 && rows == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      exited = true;
      break;
    }
    if (!std::filesystem::exists(db)) continue;
    try {
      rows = count_rows(db);
    } catch (const std::exception&) {
      rows = 0;  // tables not created yet
    }
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  ASSERT_FALSE(exited) << "the sweep finished before the kill";
  const auto before = rows_by_id(db);
  ASSERT_GE(before.size(), 1u);
  ASSERT_LT(before.size(), spec.points.size()) << "the sweep finished before the kill";
  auto r = run_cli("--threads 1 sweep --quiet --config " + tiny_sweep_path() + " --out " + db + " --resume");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto after = rows_by_id(db);
  std::set<std::string> ids;
  for (const auto& [id, row] : after) ids.insert(id);
  EXPECT_EQ(ids, grid_ids(spec));  // every point exactly once (id is the primary key)
  EXPECT_EQ(count_rows(db), static_cast<int64_t>(spec.points.size()));
  for (const auto& [id, row] : before) EXPECT_EQ(after.at(id), row) << "row " << id << " changed by the resume";
  EXPECT_NE(r.out.find(fmt::format("{} (already in the db)", before.size())), std::string::npos) << r.out;
}

TEST(SweepCli, ShardsMergeIntoTheWholeGrid) {
  const std::string dir = temp_dir("sweep_shard");
  const std::string f = write_file(dir + "/inline.toml", kInline);
  SweepSpec spec = load_sweep(f);
  for (int i = 0; i < 3; ++i) {
    auto r = run_cli(fmt::format("sweep --quiet --config {} --out {}/s{}.db --shard {}/3", f, dir, i, i));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(count_rows(fmt::format("{}/s{}.db", dir, i)), static_cast<int64_t>(shard_points(spec, {i, 3}).size()));
  }
  // Merging a shard twice keeps each point once.
  auto m = run_cli(fmt::format("sweep merge {0}/all.db {0}/s0.db {0}/s1.db {0}/s2.db {0}/s0.db", dir));
  ASSERT_EQ(m.code, 0) << m.err;
  std::set<std::string> ids;
  for (const auto& [id, row] : rows_by_id(dir + "/all.db")) ids.insert(id);
  EXPECT_EQ(ids, grid_ids(spec));
  // Another grid's db is refused.
  std::string text = kInline;
  text.replace(text.find("[-8, -6]"), 8, "[-8, -5]");
  const std::string other = write_file(dir + "/other.toml", text);
  ASSERT_EQ(run_cli("sweep --quiet --config " + other + " --out " + dir + "/other.db --shard 0/4").code, 0);
  auto bad = run_cli(fmt::format("sweep merge {0}/mix.db {0}/s0.db {0}/other.db", dir));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("fingerprint"), std::string::npos) << bad.err;
  EXPECT_EQ(run_cli(fmt::format("sweep merge {0}/x.db {0}/none.db", dir)).code, 2);
}

TEST(SweepRunner, ParallelJobsGiveTheSameRowsAsOneJob) {
  // Chunks on 2 worker threads (each run built under the init lock, engine/models/model.h) store the
  // same losses and curves, bit for bit, as one chunk after another.
  // Both pools start at 2 threads, as a CLI run on 2 cores leaves them: a point's numerics must
  // not depend on them (on AMD EPYC, OpenBLAS at 1 and 2 threads differs in the last bits).
  configure_threads(2);
  const std::string dir = temp_dir("sweep_jobs");
  const SweepSpec spec = inline_spec();
  std::map<std::string, std::string> rows[2];
  for (int jobs : {1, 2}) {
    SweepRunOptions ro;
    ro.db_path = fmt::format("{}/j{}.db", dir, jobs);
    ro.show_progress = false;
    ro.batching = Batching::Off;
    ro.jobs = jobs;
    const SweepRunSummary s = run_sweep(spec, ro);
    EXPECT_EQ(s.jobs, jobs);
    EXPECT_EQ(s.run, static_cast<int64_t>(spec.points.size()));
    rows[jobs - 1] = point_results(ro.db_path);
  }
  ASSERT_EQ(rows[0].size(), spec.points.size());
  EXPECT_EQ(rows[0], rows[1]);
  // Auto: on a CPU one job where chunks batch, else one per core of the thread plan (2 here); on a
  // GPU 4, each on a stream of its own, batched or not (a chunk out of memory beside the others is
  // rerun with fewer: the next test).
  SweepRunOptions ro;
  ASSERT_EQ(thread_plan().cores, 2);
  EXPECT_EQ(sweep_jobs(spec, ro), 2);
  ro.batching = Batching::On;
  EXPECT_EQ(sweep_jobs(spec, ro), 1);
  SweepSpec on_gpu = spec;
  for (auto& p : on_gpu.points) p.config.train.device = "cuda";
  EXPECT_EQ(sweep_jobs(on_gpu, ro), 4);
  ro.batching = Batching::Off;
  EXPECT_EQ(sweep_jobs(on_gpu, ro), 4);
  ro.jobs = 3;  // --jobs overrides
  EXPECT_EQ(sweep_jobs(on_gpu, ro), 3);
}

// A chunk that runs out of memory (on a GPU: several chunks' batched ensembles in one device's
// memory) while other workers hold chunks goes back on the queue and its worker stops: the sweep
// goes on with one job fewer and stores every point, the same bits as one job. One that runs out
// with its worker alone from the chunk's start is the sweep's error, and a rerun with --resume
// finishes the grid. The allocation failures are the test's (before_chunk_for_tests throws
// c10::OutOfMemoryError, what CUDA's allocator throws), on the CPU's one-thread points.
TEST(SweepRunner, AChunkOutOfMemoryBesideOthersIsRerunWithFewerJobs) {
  configure_threads(2);
  const std::string dir = temp_dir("sweep_oom");
  const SweepSpec spec = inline_spec();
  auto oom = [] { throw c10::OutOfMemoryError(c10::SourceLocation{__func__, __FILE__, __LINE__}, "simulated: out of memory"); };
  SweepRunOptions ro;
  ro.show_progress = false;
  ro.batching = Batching::Off;
  ro.jobs = 1;
  ro.db_path = dir + "/one.db";
  run_sweep(spec, ro);

  // 3 workers; the first attempts at chunks 0 and 1 run out of memory (beside the other workers).
  std::mutex mu;
  std::map<size_t, int> attempts;
  std::vector<bool> alone_when_failed;
  ro.jobs = 3;
  ro.db_path = dir + "/three.db";
  ro.before_chunk_for_tests = [&](size_t chunk, bool alone) {
    std::lock_guard<std::mutex> lock(mu);
    if (chunk <= 1 && attempts[chunk]++ == 0) {
      alone_when_failed.push_back(alone);
      oom();
    }
  };
  const SweepRunSummary s = run_sweep(spec, ro);
  EXPECT_EQ(s.jobs, 3);
  EXPECT_EQ(s.out_of_memory, 2);
  EXPECT_EQ(s.jobs_at_end, 1);
  EXPECT_EQ(s.run, static_cast<int64_t>(spec.points.size()));
  EXPECT_EQ(attempts[0], 2);
  EXPECT_EQ(attempts[1], 2);
  EXPECT_EQ(alone_when_failed, std::vector<bool>({false, false}));
  EXPECT_EQ(point_results(dir + "/three.db"), point_results(dir + "/one.db"));
  const std::string table = render_sweep_summary(s);
  EXPECT_NE(table.find("out of memory    2 chunks rerun after running out beside others; 1 at a time at the end"), std::string::npos)
      << table;

  // Every chunk runs out of memory: the last worker retries its chunk alone once, then the error
  // ends the sweep, an allocation failure (the CLI's one line, exit 2).
  ro.jobs = 2;
  ro.db_path = dir + "/all.db";
  int calls = 0;
  ro.before_chunk_for_tests = [&](size_t, bool) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++calls;
    }
    oom();
  };
  try {
    run_sweep(spec, ro);
    ADD_FAILURE() << "a sweep whose every chunk runs out of memory finished";
  } catch (const std::exception& e) {
    EXPECT_TRUE(compat::is_out_of_memory(e)) << e.what();
  }
  // The first worker's chunk goes back; the second worker either ran out beside it and retries
  // alone (3 calls) or, started after, takes the chunk given back alone (2 calls).
  EXPECT_TRUE(calls == 2 || calls == 3) << calls;
  ro.before_chunk_for_tests = nullptr;
  ro.resume = true;
  const SweepRunSummary r = run_sweep(spec, ro);
  EXPECT_EQ(r.run, static_cast<int64_t>(spec.points.size()));
  EXPECT_EQ(r.out_of_memory, 0);
  EXPECT_EQ(render_sweep_summary(r).find("out of memory"), std::string::npos);
  EXPECT_EQ(point_results(dir + "/all.db"), point_results(dir + "/one.db"));
}

TEST(SweepCli, DivergedPointsAreRecordedAndTheSweepGoesOn) {
  const std::string dir = temp_dir("sweep_div");
  const std::string f = write_file(dir + "/div.toml", R"(
[sweep]
name = "div"
[model]
kind = "bigram"
width = 32
depth = 2
[optim]
kind = "sgd"
[data]
source = "markov"
vocab = 16
[train]
steps = 30
eval_every = 0
[grid]
lr_log2 = [-4, 40]
)");
  auto r = run_cli("sweep --quiet --config " + f + " --out " + dir + "/div.db");
  ASSERT_EQ(r.code, 0) << r.err;
  SqliteDb d(dir + "/div.db");
  auto rows = d.query("SELECT lr_log2, diverged, diverged_step, final_loss FROM points ORDER BY lr_log2");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(std::get<int64_t>(rows[0][1]), 0);
  EXPECT_EQ(std::get<int64_t>(rows[1][1]), 1);
  EXPECT_GE(std::get<int64_t>(rows[1][2]), 0);
  EXPECT_TRUE(std::holds_alternative<std::nullptr_t>(rows[1][3]));
  EXPECT_NE(r.out.find("diverged         1"), std::string::npos) << r.out;
}
