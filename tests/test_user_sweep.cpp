// A sweep of the user's own model (brain/sweep/user_space.h, brain/sweep/user_sweep.h), with a C++ function
// standing in for the Python training function: the names and their store keys, the points'
// configs and ids, the loop's store (resume, failures, a search's rungs), and bad spaces.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "brain/util/errors.h"
#include "brain/util/sqlite_db.h"
#include "brain/util/toml_json.h"
#include "brain/util/toml_reader.h"
#include "brain/sweep/search_rank.h"
#include "brain/sweep/search_space.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/sweep/user_space.h"
#include "brain/sweep/user_sweep.h"

using namespace scaleinv;

namespace {

const char* kSpace = R"(
[sweep]
name = "mine"
[fixed]
param = "mup"
steps = 20
batch_size = 32
[grid]
width = [16, 32]
lr_log2 = [-8, -6]
init_scale = [0.5, 1.0]
seed = [0, 1]
)";

std::string temp_db(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("scaleinv_user_sweep_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto p = dir / name;
  std::filesystem::remove(p);
  return p.string();
}

// A loss with its minimum at lr_log2 = -7 + log2(init_scale), whatever the width.
RunResult fake_train(const nlohmann::json& hp) {
  RunResult r;
  const double x = std::log2(hp.at("lr").get<double>()) + 7 - std::log2(hp.value("init_scale", 1.0));
  for (int s = 0; s < hp.at("steps").get<int>(); ++s) r.losses.push_back(1 + x * x + 1.0 / (s + 1));
  r.steps_done = static_cast<int64_t>(r.losses.size());
  return r;
}

}  // namespace

TEST(UserSpace, NamesAreStoredUnderTheClisKeysAndTheRestUnderUser) {
  const SweepSpec s = user_sweep_from_toml(kSpace, "space.toml");
  ASSERT_TRUE(s.user_model);
  ASSERT_EQ(s.points.size(), 16u);
  const SweepPoint& p = s.points.front();
  EXPECT_EQ(p.user->config["model"], nlohmann::json({{"kind", "user"}, {"width", 16}}));
  EXPECT_EQ(p.user->config["param"]["name"], "mup");
  EXPECT_EQ(p.user->config["train"]["batch_size"], 32);
  EXPECT_EQ(p.user->config["train"]["steps"], 20);
  EXPECT_DOUBLE_EQ(p.user->config["optim"]["lr"].get<double>(), std::exp2(-8.0));
  EXPECT_EQ(p.user->config["user"]["init_scale"], 0.5);
  // Its coordinates (the store's columns, a rung's budget) are its own, not a zoo config's.
  const PointCoords c = p.coords();
  EXPECT_EQ(c.param, "mup");
  EXPECT_EQ(c.width, 16);
  EXPECT_EQ(c.depth, 0);  // not set: no depth
  EXPECT_DOUBLE_EQ(c.lr, std::exp2(-8.0));
  EXPECT_EQ(c.seed, 0);
  EXPECT_EQ(c.steps, 20);
  EXPECT_EQ(user_store_axes(p.axes), nlohmann::json({{"model.width", 16}, {"lr_log2", -8}, {"init_scale", 0.5}, {"seed", 0}}));
  const nlohmann::json hp = user_hparams(p.user->config);
  EXPECT_EQ(hp, nlohmann::json({{"param", "mup"}, {"width", 16}, {"lr", std::exp2(-8.0)}, {"seed", 0}, {"steps", 20},
                                {"batch_size", 32}, {"init_scale", 0.5}}));
  // The same space as a dict (JSON) is the same sweep: the same ids and fingerprint.
  const nlohmann::json j = {{"sweep", {{"name", "mine"}}},
                            {"fixed", {{"param", "mup"}, {"steps", 20}, {"batch_size", 32}}},
                            {"grid", {{"width", {16, 32}}, {"lr_log2", {-8, -6}}, {"init_scale", {0.5, 1.0}}, {"seed", {0, 1}}}}};
  const SweepSpec d = user_sweep_from_json(j, "python: space");
  EXPECT_EQ(d.fingerprint, s.fingerprint);
  for (size_t i = 0; i < s.points.size(); ++i) EXPECT_EQ(d.points[i].id, s.points[i].id);
}

TEST(UserSpace, BadSpacesAreOneLineNamingTheField) {
  const std::map<std::string, std::string> cases = {
      {"[fixed]\nparam = \"mup\"\n[grid]\nwidth = [16]\nlr_log2 = [-6]\n", "steps"},
      {"[fixed]\nparam = \"mup\"\nsteps = 3\n[grid]\nwidth = [16.5]\nlr_log2 = [-6]\n", "grid.width"},
      {"[fixed]\nparam = \"mup\"\nsteps = 3\nlr = 0.1\n[grid]\nwidth = [16]\nlr_log2 = [-6]\n", "lr_log2"},
      {"[fixed]\nparam = \"mup\"\nsteps = 3\nlr = -1\n[grid]\nwidth = [16]\n", "fixed.lr"},
      {"[sweep]\ntarget = \"zoo\"\n[grid]\nlr_log2 = [-6]\n", "sweep.target"},
      {"[fixed]\nparam = \"mup\"\nsteps = 3\n[grid]\nwidth = [16]\nlr_log2 = [-6]\n[model]\nwidth = 3\n", "model"},
      {"[fixed]\nparam = \"mup\"\nsteps = 3\nwidth = [16]\n[grid]\nlr_log2 = [-6]\n", "fixed.width"},
      {"[fixed]\nparam = \"mup\"\nsteps = 9\nwidth = 16\n[grid]\nlr = [0.01]\n[search]\ntrials = 2\n"
       "[search.space]\nlr_log2 = {from = -9, to = -4}\n", "search.space.lr_log2"},
      {"[fixed]\nparam = \"mup\"\nsteps = 9\nwidth = 16\n[search]\ntrials = 2\n[search.space]\nlr = {from = 1, to = 1e39}\n",
       "float32"},
  };
  for (const auto& [text, field] : cases) {
    try {
      user_sweep_from_toml(text, "space.toml");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(field), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  EXPECT_THROW(json_to_toml_table(nlohmann::json::parse(R"({"grid": {"x": [null]}})")), std::invalid_argument);
  EXPECT_EQ(json_to_toml_table(nlohmann::json::parse(R"({"a": {"b": 2}})"))["a"]["b"].value_exact<int64_t>(), 2);
}

// Integers past what the core holds (issue 63 class 5): a float for an integer name past int64
// (cast to -9223372036854775808, or run silently as a seed), a JSON integer past int64 (2^63, which
// the TOML conversion wrapped), a width past the config's int; the zoo's grid the same. Each one
// line naming the field, without the wrapped value.
TEST(UserSpace, IntegersPastInt64AreRefusedNamingTheField) {
  const std::string rest = "[grid]\nwidth = [16]\nlr_log2 = [-6]\n";
  const std::vector<std::pair<std::string, std::string>> toml = {
      {"[fixed]\nparam = \"mup\"\nsteps = 1e30\n" + rest, "fixed.steps"},
      {"[fixed]\nparam = \"mup\"\nsteps = 3\nseed = 1e19\n" + rest, "fixed.seed"},
      {"[fixed]\nparam = \"mup\"\nsteps = 3\n[grid]\nwidth = [3000000000]\nlr_log2 = [-6]\n", "grid.width"},
      {"[fixed]\nparam = \"mup\"\nsteps = 3\ndepth = 1e12\n" + rest, "fixed.depth"},
      {"[fixed]\nparam = \"mup\"\nsteps = 12\nwidth = 16\n[search]\ntrials = 2\n[search.space]\n"
       "lr_log2 = {from = -9, to = -4}\nbatch_size = {from = 1, to = 1e30}\n", "search.space.batch_size"},
  };
  const std::vector<std::pair<std::string, std::string>> json = {
      {R"({"fixed": {"param": "mup", "steps": 9223372036854775808, "width": 16, "lr_log2": -6}})", "fixed.steps"},
      {R"({"fixed": {"param": "mup", "steps": 3, "width": 16, "lr_log2": -6}, "grid": {"seed": [0, 18446744073709551615]}})",
       "grid.seed"},
  };
  auto refused = [](const std::function<void()>& f, const std::string& field) {
    try {
      f();
      ADD_FAILURE() << "accepted, field " << field;
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("field '" + field + "'"), std::string::npos) << what;
      EXPECT_EQ(what.find("-9223372036854775808"), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  for (const auto& [text, field] : toml) refused([&] { user_sweep_from_toml(text, "space.toml"); }, field);
  for (const auto& [text, field] : json) refused([&] { user_sweep_from_json(nlohmann::json::parse(text), "python: space"); }, field);
  // The zoo's sweep files: a float past int64 for an integer key or a seed.
  const std::string zoo = "[train]\nsteps = 5\n[grid]\nlr_log2 = [-6]\n";
  refused([&] { sweep_from_toml_text(zoo + "\"train.batch_size\" = [1e30]\n", "z.toml", "."); }, "grid.train.batch_size");
  refused([&] { sweep_from_toml_text(zoo + "seed = [1e19]\n", "z.toml", "."); }, "grid.seed");
  refused([&] { sweep_from_toml_text(zoo + "\"train.steps\" = {from = 1, to = 1e30, step = 1e29}\n", "z.toml", "."); },
          "grid.train.steps");
  // A range of more values than int64 counts (was "the axis has no values").
  for (const std::string range : {"{from = 1, to = 1e300}", "{from = -1e308, to = 1e308}", "{from = 0, to = 1, step = 1e-300}"}) {
    try {
      user_sweep_from_toml("[fixed]\nparam = \"mup\"\nsteps = 3\nwidth = 16\n[grid]\nlr_log2 = [-6]\ninit = " + range + "\n", "space.toml");
      ADD_FAILURE() << "accepted " << range;
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("field 'grid.init'"), std::string::npos) << what;
      EXPECT_NE(what.find("use a larger step"), std::string::npos) << what;
    }
  }
  // What fits is kept as an integer: 2^62 as a float, and int64's largest from JSON.
  nlohmann::json v = 4611686018427387904.0;
  EXPECT_TRUE(to_int64(v));
  EXPECT_EQ(v.get<int64_t>(), int64_t{1} << 62);
  v = nlohmann::json::parse("9223372036854775807");
  EXPECT_TRUE(to_int64(v));
  v = nlohmann::json::parse("9223372036854775808");
  EXPECT_FALSE(to_int64(v));
  v = 9223372036854775808.0;
  EXPECT_FALSE(to_int64(v));
}

TEST(UserSweep, TheLoopStoresResumesAndRecordsWhatRaised) {
  const SweepSpec s = user_sweep_from_toml(kSpace, "space.toml");
  UserSweepOptions o;
  o.db_path = temp_db("grid.db");
  o.show_progress = false;
  int calls = 0;
  const TrainPoint train = [&](const SweepPoint&, const nlohmann::json& hp) {
    ++calls;
    RunResult r = fake_train(hp);
    if (hp.at("width") == 32 && hp.at("init_scale") == 1.0 && hp.at("seed") == 1) r.error = "ValueError: no";
    return r;
  };
  const nlohmann::json first = run_user_sweep(s, o, train);
  EXPECT_EQ(first["run"], 16);
  EXPECT_EQ(first["failed"], 2);
  EXPECT_EQ(first["diverged"], 2);
  EXPECT_NE(first["text"].get<std::string>().find("failed           2"), std::string::npos) << first["text"];
  EXPECT_THROW(run_user_sweep(s, o, train), UserError);  // holds points: resume or another db
  o.resume = true;
  const nlohmann::json again = run_user_sweep(s, o, train);
  EXPECT_EQ(again["run"], 0);
  EXPECT_EQ(again["skipped"], 16);
  EXPECT_EQ(calls, 16);
  SqliteDb db(o.db_path, SqliteDb::Mode::ReadOnly);
  EXPECT_EQ(std::get<int64_t>(db.query("SELECT COUNT(*) FROM failures")[0][0]), 2);
  EXPECT_EQ(std::get<int64_t>(db.query("SELECT COUNT(*) FROM points WHERE final_loss IS NULL")[0][0]), 2);
  // final_loss is the [sweep] window's mean (0.1 of 20 steps: the last 2); at lr_log2 -8 and
  // init_scale 1 the fake loss is 1 + 1 + 1/(s+1).
  const auto row = db.query(
      "SELECT final_loss FROM points WHERE lr_log2 = -8 AND width = 16 AND seed = 0 AND json_extract(axes, '$.init_scale') = 1.0");
  ASSERT_EQ(row.size(), 1u);
  EXPECT_NEAR(std::get<double>(row[0][0]), 1 + 1 + (1.0 / 19 + 1.0 / 20) / 2, 1e-12);
}

TEST(UserSweep, ASearchRunsItsRungsAndRanksFromTheStore) {
  const char* text = R"(
[fixed]
param = "mup"
steps = 27
width = 16
[search]
method = "halving"
trials = 9
eta = 3
min_steps = 3
[search.space]
lr_log2 = {from = -10, to = -4}
)";
  const SweepSpec s = user_sweep_from_toml(text, "search.toml");
  UserSweepOptions o;
  o.db_path = temp_db("search.db");
  o.show_progress = false;
  std::map<int64_t, int> per_rung;
  const nlohmann::json r = run_user_sweep(s, o, [&](const SweepPoint&, const nlohmann::json& hp) {
    ++per_rung[hp.at("steps").get<int64_t>()];
    return fake_train(hp);
  });
  EXPECT_EQ(per_rung, (std::map<int64_t, int>{{3, 9}, {9, 3}, {27, 1}}));
  const nlohmann::json& best = r["ranking"][0];
  EXPECT_EQ(best["rung"], 2);
  EXPECT_EQ(best["status"], "ok");
  // The best of the 9 Halton draws is the one nearest -7 (the fake loss's minimum).
  double nearest = 1e9;
  for (int t = 0; t < 9; ++t) nearest = std::min(nearest, std::fabs(sample_trial(*s.search, t)["lr_log2"].get<double>() + 7));
  EXPECT_DOUBLE_EQ(std::fabs(best["values"]["lr_log2"].get<double>() + 7), nearest);
  // The CLI's path to the same ranking: the space the store holds.
  const SweepSpec stored = stored_user_sweep(o.db_path);
  EXPECT_EQ(stored.fingerprint, s.fingerprint);
  EXPECT_EQ(rank_search(stored, o.db_path).front().trial, best["trial"].get<int>());
}

// A parameter or token count past the config's int (issue 60: "a width of 2.15e9 fails with the
// space sets no width") is an axis of its own: kept as a number in the point's axes, exactly, and
// the width's refusal says so.
TEST(UserSpace, ACountPastTheIntIsItsOwnAxisNotAWidth) {
  const SweepSpec s = user_sweep_from_toml(
      "[fixed]\nparam = \"mup\"\nsteps = 3\nwidth = 16\n[grid]\nN = [2150000000, 4300000000]\nD = [1e11]\nlr_log2 = [-6]\n", "space.toml");
  ASSERT_EQ(s.points.size(), 2u);
  EXPECT_EQ(s.points[0].axes["N"].get<double>(), 2150000000.0);
  EXPECT_EQ(s.points[1].axes["N"].get<double>(), 4300000000.0);
  EXPECT_EQ(s.points[0].axes["D"].get<double>(), 1e11);
  try {
    user_sweep_from_toml("[fixed]\nparam = \"mup\"\nsteps = 3\n[grid]\nwidth = [2150000000]\nlr_log2 = [-6]\n",
                         "space.toml");
    ADD_FAILURE() << "a width of 2.15e9 was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("a parameter or token count is an axis of its own"), std::string::npos) << e.what();
  }
}

// The batch executor (user_sweep.h PointExecutor): an executor that reports its points out of
// order, all started first, stores the same rows as the sequential one (each in its own
// transaction, the core the only writer); a search's rungs each go to it as one batch; a bad report
// (twice, out of the batch, or a point never recorded) is refused; what it throws ends the sweep with
// the points recorded before it stored, and resume goes on from there.
TEST(UserSweep, ABatchExecutorRecordsInAnyOrderLikeTheSequentialOne) {
  const SweepSpec s = user_sweep_from_toml(kSpace, "space.toml");
  UserSweepOptions o;
  o.show_progress = false;
  auto failing = [](const nlohmann::json& hp) {
    RunResult r = fake_train(hp);
    if (hp.at("width") == 32 && hp.at("seed") == 1 && hp.at("init_scale") == 0.5) r.error = "WorkerCrashedError: died";
    return r;
  };
  const std::string seq_db = temp_db("sequential.db");
  o.db_path = seq_db;
  const nlohmann::json seq = run_user_sweep(s, o, [&](const SweepPoint&, const nlohmann::json& hp) { return failing(hp); });
  std::vector<size_t> batch_sizes;
  PointExecutor reversed;
  reversed.concurrent = true;
  reversed.run = [&](const std::vector<PendingPoint>& batch, const PointEvents& ev) {
    batch_sizes.push_back(batch.size());
    for (const PendingPoint& p : batch) ev.started(p.index);
    for (auto it = batch.rbegin(); it != batch.rend(); ++it) ev.record(it->index, failing(it->hparams));
  };
  o.db_path = temp_db("reversed.db");
  const nlohmann::json rev = run_user_sweep(s, o, reversed);
  EXPECT_EQ(batch_sizes, std::vector<size_t>{16});
  for (const char* k : {"points", "run", "skipped", "diverged", "failed"}) EXPECT_EQ(rev[k], seq[k]) << k;
  const std::string cols =
      "id, sweep, param, width, depth, lr, lr_log2, seed, axes, config, final_loss, final_val_loss, min_loss, diverged, "
      "diverged_step, steps_done, items_per_s, unigram_entropy, curve, shard";
  auto table = [&](const std::string& db, const std::string& sql) {
    SqliteDb d(db, SqliteDb::Mode::ReadOnly);
    return d.query(sql);
  };
  EXPECT_EQ(table(o.db_path, "SELECT COUNT(*) FROM points")[0][0], SqlValue(int64_t{16}));
  const std::string by_id = "SELECT " + cols + " FROM points ORDER BY id";
  EXPECT_EQ(table(seq_db, by_id), table(o.db_path, by_id));
  EXPECT_EQ(table(seq_db, "SELECT id, message FROM failures ORDER BY id"),
            table(o.db_path, "SELECT id, message FROM failures ORDER BY id"));
  // The reversed executor wrote the last grid point first (the store's rows in arrival order).
  EXPECT_EQ(table(o.db_path, "SELECT id FROM points ORDER BY rowid LIMIT 1")[0][0], SqlValue(s.points.back().id));

  // A halving search: one batch per rung, each waited for before the next is planned.
  const SweepSpec search = user_sweep_from_toml(
      "[fixed]\nparam = \"mup\"\nsteps = 27\nwidth = 16\n[search]\nmethod = \"halving\"\ntrials = 9\neta = 3\nmin_steps = 3\n"
      "[search.space]\nlr_log2 = {from = -10, to = -4}\n", "search.toml");
  batch_sizes.clear();
  o.db_path = temp_db("search-batch.db");
  const nlohmann::json sb = run_user_sweep(search, o, reversed);
  EXPECT_EQ(batch_sizes, (std::vector<size_t>{9, 3, 1}));
  o.db_path = temp_db("search-seq.db");
  const nlohmann::json ss =
      run_user_sweep(search, o, [&](const SweepPoint&, const nlohmann::json& hp) { return fake_train(hp); });
  EXPECT_EQ(sb["ranking"], ss["ranking"]);

  // Bad reports.
  auto refused = [&](const std::function<void(const std::vector<PendingPoint>&, const PointEvents&)>& run,
                     const std::string& what) {
    PointExecutor e;
    e.run = run;
    o.db_path = temp_db("bad" + std::to_string(batch_sizes.size()) + ".db");  // one store each
    batch_sizes.push_back(0);
    try {
      run_user_sweep(s, o, e);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const std::logic_error& err) {
      EXPECT_NE(std::string(err.what()).find(what), std::string::npos) << err.what();
    }
  };
  refused(
      [&](const auto& b, const PointEvents& ev) {
        ev.record(0, fake_train(b[0].hparams));
        ev.record(0, fake_train(b[0].hparams));
      },
      "already recorded");
  refused([&](const auto& b, const PointEvents& ev) { ev.record(b.size(), RunResult{}); }, "past the batch of 16");
  refused([&](const auto& b, const PointEvents& ev) { ev.record(3, fake_train(b[3].hparams)); },
          "15 of 16 points not recorded");
  refused([&](const auto& b, const PointEvents& ev) {
    std::exception_ptr thrown;
    std::thread t([&] {
      try {
        ev.record(0, fake_train(b[0].hparams));
      } catch (...) {
        thrown = std::current_exception();
      }
    });
    t.join();
    if (thrown) std::rethrow_exception(thrown);
  }, "another thread");

  // An executor that throws after 5 points: those are stored, resume trains the other 11.
  PointExecutor dies;
  dies.run = [&](const std::vector<PendingPoint>& batch, const PointEvents& ev) {
    for (size_t k = 0; k < 5; ++k) ev.record(batch[k].index, fake_train(batch[k].hparams));
    throw std::runtime_error("the driver was interrupted");
  };
  o.db_path = temp_db("interrupted.db");
  EXPECT_THROW(run_user_sweep(s, o, dies), std::runtime_error);
  EXPECT_EQ(table(o.db_path, "SELECT COUNT(*) FROM points")[0][0], SqlValue(int64_t{5}));
  o.resume = true;
  const nlohmann::json rest = run_user_sweep(s, o, reversed);
  EXPECT_EQ(rest["skipped"], 5);
  EXPECT_EQ(rest["run"], 11);
}

// ---- The space read once (issue 62): a dict crosses as values and is read from its table, never
// formatted as TOML only to be parsed again. These pin it to the text path it replaced (a dict was
// formatted and the text parsed) and to the stores Python sweeps wrote before.
namespace {

nlohmann::json toml_to_json(const toml::node& n) {
  if (const toml::table* t = n.as_table()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto&& [k, v] : *t) out[std::string(k.str())] = toml_to_json(v);
    return out;
  }
  if (const toml::array* a = n.as_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const toml::node& v : *a) out.push_back(toml_to_json(v));
    return out;
  }
  return *toml_scalar_json(n);
}

// The same sweep, field by field: the text the store keeps, the fingerprint, every point.
void expect_same_sweep(const SweepSpec& a, const SweepSpec& b, const std::string& what) {
  EXPECT_EQ(a.toml_text, b.toml_text) << what;
  EXPECT_EQ(a.fingerprint, b.fingerprint) << what;
  ASSERT_EQ(a.points.size(), b.points.size()) << what;
  for (size_t i = 0; i < a.points.size(); ++i) {
    EXPECT_EQ(a.points[i].id, b.points[i].id) << what;
    EXPECT_EQ(a.points[i].stored_config().dump(), b.points[i].stored_config().dump()) << what;
    EXPECT_EQ(a.points[i].axes.dump(), b.points[i].axes.dump()) << what;
  }
}

}  // namespace

TEST(UserSpace, ADictDrawsExactlyWhatItsStoredTomlTextDraws) {
  // Values a text round trip could bend if the formatter were not exact: thirds, tenths, tiny and
  // huge floats, a negative half-step range, integers written as floats, nested user names.
  const std::vector<nlohmann::json> spaces = {
      {{"fixed", {{"param", "mup"}, {"steps", 7}, {"weight_decay", 0.1}, {"note", "a \"quoted\" name"}}},
       {"grid", {{"width", {16, 32}}, {"lr_log2", {{"from", -11}, {"to", -9}, {"step", 0.5}}}, {"seed", {0, 1}},
                 {"init_scale", {0.1, 1.0 / 3.0, 2.5e-7, 1e300}}}}},
      {{"sweep", {{"name", "s"}}},
       {"fixed", {{"param", "mup"}, {"steps", 8}, {"width", 16.0}, {"opt", {{"beta2", 0.95}, {"nesterov", true}}}}},
       {"grid", {{"seed", {0, 1}}}},
       {"search", {{"method", "halving"}, {"trials", 6}, {"eta", 2}, {"min_steps", 2}, {"seed", 3},
                   {"space", {{"lr_log2", {{"from", -12.5}, {"to", -6.25}}},
                              {"init_scale", {{"from", 0.1}, {"to", 10}, {"log", true}}},
                              {"dropout", {0.0, 0.1}}}}}}},
  };
  for (const nlohmann::json& j : spaces) {
    const SweepSpec d = user_sweep_from_json(j, "python: space");
    const SweepSpec t = user_sweep_from_toml(d.toml_text, "python: space");
    expect_same_sweep(d, t, j.dump());
  }
}

TEST(UserSpace, ThePythonStoresOfDocsResultsDrawAsTheyWereDrawn) {
  namespace fs = std::filesystem;
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(std::string(SCALEINV_SOURCE_DIR) + "/docs/results/data")) {
    if (entry.path().extension() != ".db") continue;
    // A copy: a reader of a WAL store would leave -wal and -shm files beside the repository's.
    const std::string copy = temp_db("stored-" + entry.path().filename().string());
    fs::copy_file(entry.path(), copy, fs::copy_options::overwrite_existing);
    std::string text, fingerprint;
    std::vector<std::string> stored_ids;
    {
      SqliteDb db(copy, SqliteDb::Mode::ReadOnly);
      for (const auto& r : db.query("SELECT key, value FROM meta WHERE key IN ('sweep_toml', 'fingerprint')"))
        (std::get<std::string>(r[0]) == "fingerprint" ? fingerprint : text) = std::get<std::string>(r[1]);
      for (const auto& r : db.query("SELECT id FROM points")) stored_ids.push_back(std::get<std::string>(r[0]));
    }
    const std::string what = entry.path().filename().string();
    if (parse_toml(text, what)["sweep"]["target"].value_or(std::string()) != "python") continue;
    // The file's path (scaleinv sweep rank --db) and the dict's (scaleinv.sweep): the stored text,
    // the stored fingerprint, and every point of the first rung (the whole grid) among the stored.
    const SweepSpec from_store = stored_user_sweep(copy);
    const SweepSpec from_dict = user_sweep_from_json(toml_to_json(parse_toml(text, what)), "python: space");
    EXPECT_EQ(from_store.fingerprint, fingerprint) << what;
    EXPECT_EQ(from_dict.toml_text, text) << what;
    expect_same_sweep(from_dict, from_store, what);
    for (const SweepPoint& p : from_dict.points)
      EXPECT_NE(std::find(stored_ids.begin(), stored_ids.end(), p.id), stored_ids.end()) << what << " " << p.id;
    ++checked;
  }
  EXPECT_EQ(checked, 3);  // nanogpt_loop_{check,width,search}_cpu.db
}
