// Hyperparameter search in sweep files (issue 16; sweep/search_space.h, sweep/search_runner.h):
// the quasi-random trials, the rung plan, the mistakes a search file can hold, and a successive-
// halving search run end to end through the CLI, resumed, and ranked from its database.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "core/errors.h"
#include "fixtures.h"
#include "core/sqlite_db.h"
#include "sweep/search_runner.h"
#include "sweep/search_space.h"
#include "sweep/sweep_spec.h"

using namespace scaleinv;
using scaleinv::testing::run_cli;
using scaleinv::testing::temp_dir;

namespace {

// A bigram model on a Markov chain: 6 trials of 3 hyperparameters, halving with eta 2 from 10 steps
// to 40 (rungs 10, 20, 40: 6 -> 3 -> 1 trials), crossed with two seeds.
const char* kSearch = R"(
[sweep]
name = "s"
ensemble = 4
[model]
kind = "bigram"
width = 32
depth = 2
[data]
source = "markov"
vocab = 16
markov_length = 20000
[train]
steps = 40
batch_size = 16
eval_every = 0
[grid]
seed = [0, 1]
[search]
method = "halving"
trials = 6
seed = 7
eta = 2
min_steps = 10
[search.space]
lr_log2 = {from = -10, to = -3}
"hp.output_mult" = {from = 0.25, to = 4.0, log = true}
"optim.warmup_steps" = [0, 5]
)";

std::string error_of(const std::string& text) { return scaleinv::testing::sweep_error_of(text); }

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  if (at == std::string::npos) throw std::runtime_error("no " + from);
  return s.replace(at, from.size(), to);
}

}  // namespace

TEST(SearchSpace, TrialsAreQuasiRandomInsideTheSpaceAndRepeatable) {
  SweepSpec spec = sweep_from_toml_text(kSearch, "s.toml", ".");
  ASSERT_TRUE(spec.search.has_value());
  const SearchSpec& s = *spec.search;
  ASSERT_EQ(s.dims.size(), 3u);
  EXPECT_TRUE(s.dims[2].integer);  // optim.warmup_steps is an integer field
  std::set<double> lrs;
  std::set<int64_t> warmups;
  double log_mult_sum = 0;
  const int n = 64;
  for (int t = 0; t < n; ++t) {
    const nlohmann::json v = sample_trial(s, t);
    EXPECT_EQ(v, sample_trial(s, t));  // a pure function of the file
    const double lr = v["lr_log2"].get<double>(), m = v["hp.output_mult"].get<double>();
    EXPECT_GE(lr, -10);
    EXPECT_LE(lr, -3);
    EXPECT_GE(m, 0.25);
    EXPECT_LE(m, 4.0);
    lrs.insert(lr);
    log_mult_sum += std::log2(m);
    warmups.insert(v["optim.warmup_steps"].get<int64_t>());
  }
  EXPECT_EQ(lrs.size(), static_cast<size_t>(n));          // no repeats
  EXPECT_EQ(warmups, (std::set<int64_t>{0, 5}));           // both choices drawn
  // Low discrepancy: the mean of log2(mult) over 64 Halton points is within 1/8 of the range's
  // centre 0 (a Halton sequence's error in base 3 is at most about log(n)/n of the range, 4 wide).
  EXPECT_NEAR(log_mult_sum / n, 0.0, 0.125);
  // A log range far below 1 keeps six significant digits (an epsilon is never rounded to 0).
  SweepSpec eps = sweep_from_toml_text(replace(kSearch, "\"optim.warmup_steps\" = [0, 5]",
                                               "\"optim.eps\" = {from = 1e-10, to = 1e-8, log = true}"),
                                       "s.toml", ".");
  for (int t = 0; t < 16; ++t) {
    const double e = sample_trial(*eps.search, t)["optim.eps"].get<double>();
    EXPECT_GE(e, 1e-10 * (1 - 1e-5));
    EXPECT_LE(e, 1e-8 * (1 + 1e-5));
  }
  // Another seed shifts every coordinate.
  SweepSpec other = sweep_from_toml_text(replace(kSearch, "seed = 7", "seed = 8"), "s.toml", ".");
  EXPECT_NE(sample_trial(*other.search, 0)["lr_log2"], sample_trial(s, 0)["lr_log2"]);
  // The rung plan and the first rung's points: 6 trials x 2 seeds at 10 steps.
  EXPECT_EQ(rung_steps(s, 40), (std::vector<int64_t>{10, 20, 40}));
  EXPECT_EQ(survivors(s, 6), 3);
  EXPECT_EQ(survivors(s, 3), 1);
  EXPECT_EQ(survivors(s, 1), 1);
  ASSERT_EQ(spec.points.size(), 12u);
  for (const SweepPoint& p : spec.points) {
    EXPECT_EQ(p.config.train.steps, 10);
    EXPECT_EQ(p.config.optim.total_steps, 10);  // the schedule spans the rung's run
    EXPECT_EQ(p.axes["search.rung"], 0);
  }
  const nlohmann::json t0 = sample_trial(s, 0);
  EXPECT_DOUBLE_EQ(spec.points[0].config.optim.lr, std::exp2(t0["lr_log2"].get<double>()));
  EXPECT_DOUBLE_EQ(spec.points[0].config.hp.output_mult, t0["hp.output_mult"].get<double>());
}

TEST(SearchSpace, MistakesNameTheFileAndTheField) {
  struct Case {
    std::string from, to, expect;
  };
  const std::vector<Case> cases = {
      {"method = \"halving\"", "method = \"grid\"", "search.method"},
      {"trials = 6", "trials = 0", "search.trials"},
      {"min_steps = 10", "min_steps = 40", "search.min_steps"},
      {"eta = 2", "eta = 1", "search.eta"},
      {"\"hp.output_mult\" = {from = 0.25, to = 4.0, log = true}", "\"hp.output_mult\" = {from = 0, to = 4.0, log = true}",
       "search.space.hp.output_mult.from"},
      {"\"hp.output_mult\" = {from = 0.25, to = 4.0, log = true}", "\"hp.nonsense\" = {from = 1, to = 2}",
       "search.space.hp.nonsense"},
      {"\"optim.warmup_steps\" = [0, 5]", "\"optim.warmup_steps\" = [0]", "search.space.optim.warmup_steps"},
      {"\"optim.warmup_steps\" = [0, 5]", "\"train.seed\" = [0, 5]", "search.space.train.seed"},
      {"\"optim.warmup_steps\" = [0, 5]", "\"train.steps\" = [10, 20]", "search.space.train.steps"},
      {"seed = [0, 1]", "seed = [0, 1]\nlr_log2 = [-8]", "search.space.lr_log2"},  // in grid and space
      {"min_steps = 10", "min_steps = 10\nbogus = 1", "bogus"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(replace(kSearch, c.from, c.to));
    EXPECT_NE(e.find("bad.toml"), std::string::npos) << c.to << ": " << e;
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.to << ": " << e;
  }
  // Random search takes no rung settings.
  const std::string e = error_of(replace(kSearch, "method = \"halving\"", "method = \"random\""));
  EXPECT_NE(e.find("search.eta"), std::string::npos) << e;
}

TEST(SearchCli, HalvingKeepsTheBestTrialsResumesAndRanks) {
  const std::string dir = temp_dir("search_cli");
  const std::string f = dir + "/s.toml";
  std::ofstream(f) << kSearch;
  const std::string db = dir + "/s.db";
  auto r = run_cli("--threads 1 sweep --quiet --config " + f + " --out " + db);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("search summary"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best: set = [\"hp.output_mult="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"optim.lr="), std::string::npos) << r.out;
  // 6 trials x 2 seeds at 10 steps, 3 x 2 at 20, 1 x 2 at 40.
  SqliteDb d(db, SqliteDb::Mode::ReadOnly);
  auto rows = d.query("SELECT steps_done, axes, final_loss, diverged FROM points");
  ASSERT_EQ(rows.size(), 12u + 6u + 2u);
  // Per rung: trial -> mean loss (diverged: +inf); the survivors are the best half of the rung before.
  std::map<int64_t, std::map<int, std::pair<double, int>>> by_rung;
  for (const auto& row : rows) {
    const nlohmann::json axes = nlohmann::json::parse(std::get<std::string>(row[1]));
    const int trial = axes["search.trial"].get<int>();
    const int64_t rung = axes["search.rung"].get<int64_t>();
    const bool div = std::get<int64_t>(row[3]) != 0;
    auto& e = by_rung[rung][trial];
    e.first += div ? INFINITY : std::get<double>(row[2]);
    e.second += 1;
  }
  ASSERT_EQ(by_rung.size(), 3u);
  auto best_of = [](const std::map<int, std::pair<double, int>>& m, size_t k) {
    std::vector<std::pair<double, int>> v;
    for (const auto& [t, e] : m) v.push_back({e.first / e.second, t});
    std::sort(v.begin(), v.end());
    std::set<int> out;
    for (size_t i = 0; i < k; ++i) out.insert(v[i].second);
    return out;
  };
  std::set<int> rung1, rung2;
  for (const auto& [t, e] : by_rung[1]) rung1.insert(t);
  for (const auto& [t, e] : by_rung[2]) rung2.insert(t);
  EXPECT_EQ(rung1, best_of(by_rung[0], 3));
  EXPECT_EQ(rung2, best_of(by_rung[1], 1));
  // The ranking JSON names the winner, with its set lines.
  std::ifstream in(dir + "/s-search.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& g = j["groups"][""];
  EXPECT_EQ(g["best"]["trial"].get<int>(), *rung2.begin());
  EXPECT_EQ(g["ranking"].size(), 6u);
  EXPECT_EQ(g["ranking"][0]["rung"], 2);
  // Resumed: nothing is trained again, the same winner.
  auto again = run_cli("--threads 1 sweep --quiet --config " + f + " --out " + db + " --resume");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("0 run now, 12 already in the db"), std::string::npos) << again.out;
  std::ifstream in2(dir + "/s-search.json");
  EXPECT_EQ(nlohmann::json::parse(in2)["groups"][""]["best"], g["best"]);
  // `sweep rank` reads the same ranking from the database; transfer-report points there.
  auto rank = run_cli("sweep rank --config " + f + " --db " + db);
  ASSERT_EQ(rank.code, 0) << rank.err;
  EXPECT_NE(rank.out.find(fmt::format("{:>5}     3     40", *rung2.begin())), std::string::npos) << rank.out;
  auto tr = run_cli("transfer-report --db " + db + " --out " + dir + "/rep");
  EXPECT_EQ(tr.code, 2);
  EXPECT_NE(tr.err.find("sweep rank"), std::string::npos) << tr.err;
  // Halving cannot shard.
  auto sh = run_cli("sweep --quiet --config " + f + " --out " + dir + "/x.db --shard 0/2");
  EXPECT_EQ(sh.code, 2);
  EXPECT_NE(sh.err.find("--shard"), std::string::npos) << sh.err;
}

// Random search has one rung and shards like a grid: two shards, merged, hold every trial once and
// rank like the unsharded search.
TEST(SearchCli, RandomSearchShardsAndMergesIntoTheWholeRanking) {
  const std::string dir = temp_dir("search_shards");
  const std::string f = dir + "/r.toml";
  std::string text = replace(replace(kSearch, "method = \"halving\"", "method = \"random\""), "eta = 2\nmin_steps = 10\n", "");
  text = replace(text, "steps = 40", "steps = 10");
  std::ofstream(f) << text;
  for (const char* shard : {"0/2", "1/2"})
    ASSERT_EQ(run_cli(fmt::format("--threads 1 sweep --quiet --config {} --out {}/r{}.db --shard {}", f, dir, shard[0], shard)).code, 0);
  ASSERT_EQ(run_cli("sweep merge " + dir + "/all.db " + dir + "/r0.db " + dir + "/r1.db").code, 0);
  ASSERT_EQ(run_cli("--threads 1 sweep --quiet --config " + f + " --out " + dir + "/one.db").code, 0);
  SweepSpec spec = load_sweep(f);
  const auto merged = rank_search(spec, dir + "/all.db");
  const auto whole = rank_search(spec, dir + "/one.db");
  ASSERT_EQ(merged.size(), 6u);
  ASSERT_EQ(whole.size(), 6u);
  for (size_t i = 0; i < merged.size(); ++i) {
    EXPECT_EQ(merged[i].trial, whole[i].trial);
    EXPECT_EQ(merged[i].seeds, 2);
    EXPECT_DOUBLE_EQ(merged[i].mean_loss, whole[i].mean_loss);  // one thread per point: bit for bit
  }
  // A single shard's store ranks only what it ran; the rest says "not run" (NaN), last.
  const auto part = rank_search(spec, dir + "/r0.db");
  EXPECT_TRUE(std::isnan(part.back().mean_loss) || part.back().seeds < 2);
}
