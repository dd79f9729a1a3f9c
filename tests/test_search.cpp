// Hyperparameter search in sweep files (issue 16; brain/sweep/search_space.h, engine/sweep/search_runner.h):
// the quasi-random trials, the rung plan, the mistakes a search file can hold, and a successive-
// halving search run end to end through the CLI, resumed, and ranked from its database.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "brain/util/errors.h"
#include "fixtures.h"
#include "brain/util/sqlite_db.h"
#include "engine/sweep/search_runner.h"
#include "brain/sweep/search_space.h"
#include "brain/sweep/shard.h"
#include "brain/sweep/sweep_spec.h"

using namespace scaleinv;
using scaleinv::testing::sweep_error_of;
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


std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  if (at == std::string::npos) throw std::runtime_error("no " + from);
  return s.replace(at, from.size(), to);
}

// The k trials with the lowest mean loss, from trial -> (loss summed over seeds, seeds).
std::set<int> best_of(const std::map<int, std::pair<double, int>>& m, size_t k) {
  std::vector<std::pair<double, int>> v;
  for (const auto& [t, e] : m) v.push_back({e.first / e.second, t});
  std::sort(v.begin(), v.end());
  std::set<int> out;
  for (size_t i = 0; i < k && i < v.size(); ++i) out.insert(v[i].second);
  return out;
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
  // Low discrepancy (issue 38: a band on the mean could not tell Halton from uniform random draws,
  // whose mean has sd ~0.14 here). Dimension 0 takes base 2: 64 consecutive van der Corput points in
  // base 2 (trials 0..63 are indices 1..64) put exactly one point in each of the 64 cells of width
  // 1/64, and the seed's rotation (mod 1) keeps that on the circle, so no circular gap between
  // neighbours reaches 2/64. 64 uniform random draws leave a largest gap of about
  // (ln 64 + 0.58)/64 = 0.074 on average, and one under 2/64 with a vanishing probability.
  const SearchDim& d0 = s.dims[0];
  ASSERT_TRUE(d0.choices.empty());
  std::vector<double> u;
  for (int t = 0; t < n; ++t) {
    const double v = sample_trial(s, t)[d0.key].get<double>();
    u.push_back(d0.log ? std::log2(v / d0.lo) / std::log2(d0.hi / d0.lo) : (v - d0.lo) / (d0.hi - d0.lo));
  }
  std::sort(u.begin(), u.end());
  double gap = 1 - u.back() + u.front();  // the wrap-around gap
  for (size_t i = 1; i < u.size(); ++i) gap = std::max(gap, u[i] - u[i - 1]);
  EXPECT_LT(gap, 2.0 / n) << "the largest gap between the draws of " << d0.key;
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

// Hyperband's brackets: Li et al. 2018 (ref. [hyperband]) Table 1's example, R = 81, eta = 3:
// n = 81, 34, 15, 8, 5 trials starting at budgets 1, 3, 9, 27, 81.
TEST(SearchSpace, HyperbandBracketsAreLiEtAlsTable) {
  SearchSpec s;
  s.method = "hyperband";
  s.trials = 81;
  s.eta = 3;
  s.min_steps = 1;
  EXPECT_EQ(rung_steps(s, 81), (std::vector<int64_t>{1, 3, 9, 27, 81}));
  const std::vector<Bracket> b = brackets(s, 81);
  ASSERT_EQ(b.size(), 5u);
  const int n[] = {81, 34, 15, 8, 5};
  int first = 0;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(b[static_cast<size_t>(i)].trials, n[i]) << i;
    EXPECT_EQ(b[static_cast<size_t>(i)].first_rung, i);
    EXPECT_EQ(b[static_cast<size_t>(i)].first_trial, first);
    EXPECT_EQ(bracket_of(b, first), i);
    EXPECT_EQ(bracket_of(b, first + n[i] - 1), i);
    first += n[i];
  }
  EXPECT_EQ(total_trials(b), 143);
  // Halving is hyperband's first bracket alone.
  s.method = "halving";
  ASSERT_EQ(brackets(s, 81).size(), 1u);
  EXPECT_EQ(brackets(s, 81)[0].trials, 81);
  // The sweep file's first rung holds only the first bracket's trials: 6 trials x 2 seeds.
  SweepSpec spec = sweep_from_toml_text(replace(kSearch, "method = \"halving\"", "method = \"hyperband\""), "s.toml", ".");
  EXPECT_EQ(spec.points.size(), 12u);
  const std::vector<Bracket> hb = brackets(*spec.search, spec.full_steps);
  ASSERT_EQ(hb.size(), 3u);  // rungs 10, 20, 40: 6, ceil(6*3/(2*2)) = 5, ceil(6*3/4) = 5
  EXPECT_EQ(hb[1].trials, 5);
  EXPECT_EQ(hb[2].trials, 5);
  // The same trials as halving draws, with the same point ids and fingerprint: a halving store
  // extends to hyperband (SearchCli.HyperbandRunsEveryBracketAndRanksAtTheFullBudget).
  SweepSpec halving = sweep_from_toml_text(kSearch, "s.toml", ".");
  for (size_t i = 0; i < spec.points.size(); ++i) EXPECT_EQ(spec.points[i].id, halving.points[i].id);
  EXPECT_EQ(spec.fingerprint, halving.fingerprint);
  EXPECT_NE(spec.fingerprint,
            sweep_from_toml_text(replace(kSearch, "trials = 6", "trials = 5"), "s.toml", ".").fingerprint);
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
    const std::string e = sweep_error_of(replace(kSearch, c.from, c.to));
    EXPECT_NE(e.find("bad.toml"), std::string::npos) << c.to << ": " << e;
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.to << ": " << e;
  }
  // Random search takes no rung settings.
  const std::string e = sweep_error_of(replace(kSearch, "method = \"halving\"", "method = \"random\""));
  EXPECT_NE(e.find("search.eta"), std::string::npos) << e;
  // The fix lists the methods, quoted as TOML strings.
  const std::string m = sweep_error_of(replace(kSearch, "method = \"halving\"", "method = \"grid\""));
  EXPECT_NE(m.find("(fix: use one of \"random\", \"halving\", \"hyperband\")"), std::string::npos) << m;
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
  // Another search's file (other trials drawn) does not rank this database: its points would all
  // read as "not run" and the winner be made up. Refused, naming the fingerprint.
  const std::string other = dir + "/other.toml";
  std::ofstream(other) << replace(kSearch, "seed = 7", "seed = 8");
  auto mismatch = run_cli("sweep rank --config " + other + " --db " + db);
  EXPECT_EQ(mismatch.code, 2) << mismatch.out;
  EXPECT_NE(mismatch.err.find("meta.fingerprint"), std::string::npos) << mismatch.err;
  auto tr = run_cli("transfer-report --db " + db + " --out " + dir + "/rep");
  EXPECT_EQ(tr.code, 2);
  EXPECT_NE(tr.err.find("sweep rank"), std::string::npos) << tr.err;
  // Halving cannot shard.
  auto sh = run_cli("sweep --quiet --config " + f + " --out " + dir + "/x.db --shard 0/2");
  EXPECT_EQ(sh.code, 2);
  EXPECT_NE(sh.err.find("--shard"), std::string::npos) << sh.err;
  // But one rung can, planned from the store of the rungs before it (what a task of `sweep submit
  // --slurm` runs, issue 61): rung 1's two shards, merged, are the search's own rung 1, the same
  // points with the same losses.
  for (int i = 0; i < 2; ++i) {
    auto part = run_cli(fmt::format("--threads 1 sweep --quiet --config {} --rung 1 --rung-db {} --shard {}/2 --out "
                                    "{}/r1.shard-{}.db",
                                    f, db, i, dir, i));
    ASSERT_EQ(part.code, 0) << part.err;
  }
  ASSERT_EQ(run_cli("sweep merge " + dir + "/r1.db " + dir + "/r1.shard-0.db " + dir + "/r1.shard-1.db").code, 0);
  auto rung_losses = [](const std::string& path, const std::string& where) {
    SqliteDb x(path, SqliteDb::Mode::ReadOnly);
    std::map<std::string, double> out;
    for (const auto& row : x.query("SELECT id, final_loss FROM points" + where))
      out[std::get<std::string>(row[0])] = std::get<double>(row[1]);
    return out;
  };
  const auto replayed = rung_losses(dir + "/r1.db", "");
  EXPECT_EQ(replayed.size(), 6u);
  EXPECT_EQ(replayed, rung_losses(db, " WHERE json_extract(axes, '$.\"search.rung\"') = 1"));
  auto no_db = run_cli("sweep --quiet --config " + f + " --out " + dir + "/y.db --rung 1");
  EXPECT_EQ(no_db.code, 2);
  EXPECT_NE(no_db.err.find("--rung-db"), std::string::npos) << no_db.err;
  auto past = run_cli("sweep --quiet --config " + f + " --out " + dir + "/y.db --rung 3 --rung-db " + db);
  EXPECT_EQ(past.code, 2);
  EXPECT_NE(past.err.find("rungs 0..2"), std::string::npos) << past.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/y.db"));
}

// A grid with axes besides the seed is one search per group (the grid point without its seed):
// each group is named by its axes in the grid's order, "k=v, k=v", in the JSON and the table.
TEST(SearchCli, EachGridGroupIsSearchedAndNamedByItsAxes) {
  const std::string dir = temp_dir("search_groups");
  const std::string f = dir + "/s.toml";
  std::ofstream(f) << replace(kSearch, "seed = [0, 1]\n", "param = [\"mup\"]\n\"model.width\" = [16, 32]\nseed = [0, 1]\n");
  auto r = run_cli("--threads 1 sweep --quiet --config " + f + " --out " + dir + "/s.db");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(dir + "/s-search.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  std::set<std::string> groups;
  for (const auto& [k, v] : j["groups"].items()) groups.insert(k);
  EXPECT_EQ(groups, (std::set<std::string>{"param=mup, model.width=16", "param=mup, model.width=32"}));
  EXPECT_NE(r.out.find("\nparam=mup, model.width=16: trials by the rung reached"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nparam=mup, model.width=32: trials by the rung reached"), std::string::npos) << r.out;
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
  // A single shard's store ranks only what it ran: each trial with the seeds shard 0 holds of it
  // (shard_points), the mean over those; a trial with none says "not run" (NaN), after every
  // trial that ran.
  std::map<int, int> held;  // trial -> its points (seeds) in shard 0
  const std::vector<size_t> mine = shard_points(spec, Shard{0, 2});
  ASSERT_LT(mine.size(), spec.points.size());
  for (size_t i : mine) ++held[spec.points[i].axes.at("search.trial").get<int>()];
  const auto part = rank_search(spec, dir + "/r0.db");
  ASSERT_EQ(part.size(), 6u);
  bool seen_nan = false;
  for (const TrialResult& t : part) {
    SCOPED_TRACE("trial " + std::to_string(t.trial));
    const int n = held.count(t.trial) ? held[t.trial] : 0;
    EXPECT_EQ(t.seeds, n);
    EXPECT_EQ(std::isnan(t.mean_loss), n == 0);
    if (n > 0) {
      EXPECT_FALSE(seen_nan) << "a trial that ran is listed after one that did not";
    }
    seen_nan = seen_nan || std::isnan(t.mean_loss);
  }
}

// Hyperband end to end, grown from a finished halving search's store: the brackets run
// rung-synchronously; each bracket keeps its own best half; a bracket's trials join at their first
// rung; the winner is the best at the full budget.
TEST(SearchCli, HyperbandRunsEveryBracketAndRanksAtTheFullBudget) {
  const std::string dir = temp_dir("search_hyperband");
  const std::string f = dir + "/h.toml";
  std::ofstream(f) << replace(kSearch, "method = \"halving\"", "method = \"hyperband\"");
  std::ofstream(dir + "/halving.toml") << kSearch;
  const std::string db = dir + "/h.db";
  // A finished halving search first: hyperband's first bracket is that search, so hyperband
  // resumes its store and trains only what the halving search did not.
  ASSERT_EQ(run_cli("--threads 1 sweep --quiet --config " + dir + "/halving.toml --out " + db).code, 0);
  {  // Read as hyperband, that store ranks all 16 trials: the 10 of the brackets not run yet last.
    const std::vector<TrialResult> part = rank_search(load_sweep(f), db);
    ASSERT_EQ(part.size(), 16u);
    for (size_t i = 0; i < part.size(); ++i) EXPECT_EQ(std::isnan(part[i].mean_loss), i >= 6) << i;
    EXPECT_EQ(part.back().bracket, 2);
    EXPECT_EQ(part.back().steps, 40);
    auto rank = run_cli("sweep rank --config " + f + " --db " + db);
    ASSERT_EQ(rank.code, 0) << rank.err;
    EXPECT_NE(rank.out.find("incomplete: 10 of 16"), std::string::npos) << rank.out;
  }
  auto r = run_cli("--threads 1 sweep --quiet --config " + f + " --out " + db + " --resume");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("hyperband, 16 trials"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("10 steps: 12 points (0 run now, 12 already in the db"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("20 steps: 16 points (10 run now, 6 already in the db"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("40 steps: 16 points (14 run now, 2 already in the db"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("6 from 10 steps, 5 from 20 steps, 5 from 40 steps"), std::string::npos) << r.out;
  SweepSpec spec = load_sweep(f);
  const std::vector<Bracket> br = brackets(*spec.search, spec.full_steps);
  // rung -> bracket -> trial -> (loss sum, seeds)
  std::map<int64_t, std::map<int, std::map<int, std::pair<double, int>>>> at;
  SqliteDb d(db, SqliteDb::Mode::ReadOnly);
  for (const auto& row : d.query("SELECT axes, final_loss, diverged FROM points")) {
    const nlohmann::json axes = nlohmann::json::parse(std::get<std::string>(row[0]));
    const int trial = axes["search.trial"].get<int>();
    auto& e = at[axes["search.rung"].get<int64_t>()][bracket_of(br, trial)][trial];
    e.first += std::get<int64_t>(row[2]) != 0 ? INFINITY : std::get<double>(row[1]);
    e.second += 1;
  }
  auto trials_of = [](const std::map<int, std::pair<double, int>>& m) {
    std::set<int> out;
    for (const auto& [t, e] : m) {
      EXPECT_EQ(e.second, 2) << t;  // both seeds
      out.insert(t);
    }
    return out;
  };
  auto range = [](int from, int n) {
    std::set<int> out;
    for (int t = from; t < from + n; ++t) out.insert(t);
    return out;
  };
  ASSERT_EQ(at.size(), 3u);
  // Rung 1 (10 steps): bracket 1's six trials only.
  ASSERT_EQ(at[0].size(), 1u);
  EXPECT_EQ(trials_of(at[0][0]), range(0, 6));
  // Rung 2 (20 steps): bracket 1's best 3, bracket 2's five new trials.
  ASSERT_EQ(at[1].size(), 2u);
  EXPECT_EQ(trials_of(at[1][0]), best_of(at[0][0], 3));
  EXPECT_EQ(trials_of(at[1][1]), range(6, 5));
  // Rung 3 (40 steps): bracket 1's best 1 of 3, bracket 2's best 2 of 5, bracket 3's five.
  ASSERT_EQ(at[2].size(), 3u);
  EXPECT_EQ(trials_of(at[2][0]), best_of(at[1][0], 1));
  EXPECT_EQ(trials_of(at[2][1]), best_of(at[1][1], 2));
  EXPECT_EQ(trials_of(at[2][2]), range(11, 5));
  // The winner is the best of the eight trials trained at 40 steps, whichever bracket it came from.
  std::map<int, std::pair<double, int>> full;
  for (const auto& [b, m] : at[2]) full.insert(m.begin(), m.end());
  const int winner = *best_of(full, 1).begin();
  std::ifstream in(dir + "/h-search.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["groups"][""]["best"]["trial"].get<int>(), winner);
  EXPECT_EQ(j["groups"][""]["ranking"].size(), 16u);
  EXPECT_EQ(j["brackets"].size(), 3u);
  // Resumed: nothing trained again, the same winner; `sweep rank` names the bracket.
  auto again = run_cli("--threads 1 sweep --quiet --config " + f + " --out " + db + " --resume");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("0 run now, 16 already in the db"), std::string::npos) << again.out;
  std::ifstream in2(dir + "/h-search.json");
  EXPECT_EQ(nlohmann::json::parse(in2)["groups"][""]["best"]["trial"].get<int>(), winner);
  auto rank = run_cli("sweep rank --config " + f + " --db " + db);
  ASSERT_EQ(rank.code, 0) << rank.err;
  EXPECT_NE(rank.out.find(fmt::format("{:>5}  {:>7}     3     40", winner, bracket_of(br, winner) + 1)), std::string::npos)
      << rank.out;
  EXPECT_EQ(rank.out.find("incomplete"), std::string::npos) << rank.out;
}
