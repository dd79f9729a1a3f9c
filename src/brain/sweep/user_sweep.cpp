// Sweeps and searches of the user's own model (see user_sweep.h).
#include "brain/sweep/user_sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "brain/util/progress.h"
#include "brain/util/sqlite_db.h"
#include "brain/util/toml_json.h"
#include "brain/util/toml_reader.h"
#include "brain/sweep/search_rank.h"
#include "brain/sweep/sweep_spec_table.h"
#include "brain/sweep/sweep_summary.h"
#include "brain/sweep/user_space.h"

namespace scaleinv {

namespace {

// One rung (or the whole grid): the shard's points not yet in the store, sent to the executor
// together; each result is written as the executor records it.
SweepRunSummary run_user_points(const SweepSpec& spec, const UserSweepOptions& o, const std::string& bar_label,
                                const PointExecutor& executor) {
  const auto t0 = std::chrono::steady_clock::now();
  SweepRunSummary sum;
  SweepStore store(o.db_path);
  const std::vector<size_t> pending = begin_run(store, spec, o.shard, o.resume, sum);
  int64_t total_steps = 0;
  for (size_t i : pending) total_steps += spec.points[i].coords().steps;
  std::unique_ptr<Progress> bar;
  if (o.show_progress)
    bar = std::make_unique<Progress>(std::max<int64_t>(1, total_steps), bar_label.empty() ? "sweep " + spec.name : bar_label,
                                     "step");
  int64_t running = 0, most_running = 0;
  auto status = [&] {
    return fmt::format("| points {}/{} (skipped {}){} | diverged {}{}", sum.skipped + sum.run, sum.shard_points, sum.skipped,
                       executor.concurrent ? fmt::format(" | running {}", running) : "", sum.diverged,
                       sum.failed ? fmt::format(" | failed {}", sum.failed) : "");
  };
  int64_t steps_done = 0;
  if (bar) bar->update(0, status());
  // Each point is committed as it finishes (a kill -9 loses only the points in flight); the WAL is
  // checkpointed into the database file at most once a second and at the end, since a point of a
  // small model can take less time than a checkpoint's fsync (measured: 4 ms of 6 ms overhead a point).
  auto last_checkpoint = std::chrono::steady_clock::now();
  struct CheckpointAtEnd {
    SweepStore& s;
    ~CheckpointAtEnd() {
      try {
        s.checkpoint();
      } catch (...) {
      }
    }
  } at_end{store};

  std::vector<PendingPoint> batch;
  batch.reserve(pending.size());
  for (size_t i : pending) batch.push_back({batch.size(), &spec.points[i], user_hparams(spec.points[i].user->config)});
  enum class State { Pending, Started, Recorded };
  std::vector<State> state(batch.size(), State::Pending);
  const std::thread::id caller = std::this_thread::get_id();
  bool open = true;  // the rung is running: events after it ended are refused
  auto check = [&](size_t index, const char* what) {
    if (!open) throw std::logic_error(fmt::format("sweep executor: {}({}) after the rung ended", what, index));
    if (std::this_thread::get_id() != caller)
      throw std::logic_error(fmt::format("sweep executor: {}({}) from another thread (call it on the one that ran the batch)",
                                         what, index));
    if (index >= batch.size())
      throw std::logic_error(fmt::format("sweep executor: {}({}) is past the batch of {}", what, index, batch.size()));
    if (state[index] == State::Recorded)
      throw std::logic_error(fmt::format("sweep executor: {}({}) of a point already recorded", what, index));
  };
  PointEvents events;
  events.started = [&](size_t index) {
    check(index, "started");
    if (state[index] == State::Started) return;
    state[index] = State::Started;
    ++running;
    if (bar && executor.concurrent) bar->update(static_cast<long>(steps_done), status());
  };
  // The one place a trained point is recorded, whichever executor trained it.
  events.record = [&](size_t index, RunResult r) {
    check(index, "record");
    if (state[index] == State::Started) --running;
    const SweepPoint& p = *batch[index].point;
    if (!r.error.empty()) {  // a run that raised ranks as diverged (user_sweep.h); -1: no NaN step
      r.diverged = true;
      r.diverged_step = -1;
    }
    const auto now = std::chrono::steady_clock::now();
    const bool checkpoint = now - last_checkpoint >= std::chrono::seconds(1);
    if (checkpoint) last_checkpoint = now;
    store.write_points(spec, o.shard, {&p}, {r}, checkpoint);
    state[index] = State::Recorded;
    // The most at a time, as the bar shows it: counted once this point is off the running, since an
    // executor may start the next points before it records the ones that finished (python/scaleinv/_ray.py).
    most_running = std::max(most_running, running);
    ++sum.run;
    ++sum.chunks;
    sum.diverged += r.diverged ? 1 : 0;
    sum.failed += r.error.empty() ? 0 : 1;
    steps_done += p.coords().steps;
    if (bar) bar->update(static_cast<long>(steps_done), status());
  };
  struct CloseAtEnd {
    bool& open;
    ~CloseAtEnd() { open = false; }
  } close_at_end{open};
  if (!batch.empty()) executor.run(batch, events);
  open = false;
  const auto left = batch.size() - static_cast<size_t>(std::count(state.begin(), state.end(), State::Recorded));
  if (left > 0)
    throw std::logic_error(fmt::format("sweep executor: returned with {} of {} points not recorded", left, batch.size()));
  sum.jobs = executor.concurrent ? static_cast<int>(std::max<int64_t>(1, most_running)) : 1;
  if (bar) bar->finish(status());
  sum.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

nlohmann::json summary_json(const SweepRunSummary& s) {
  return {{"db", s.db_path}, {"points", s.shard_points}, {"run", s.run},       {"skipped", s.skipped},
          {"diverged", s.diverged}, {"failed", s.failed},   {"wall_s", s.wall_s}};
}

// An integer past int64 anywhere in a JSON space (a Python int such as 2**63 arrives as an
// unsigned): refused naming its dotted path, before the TOML conversion wraps it to -2^63.
void refuse_unsigned_overflow(const nlohmann::json& j, const std::string& path, const std::string& where) {
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw UserError(where, path.empty() ? "space" : path,
                    fmt::format("{} is past a 64-bit integer (from -2^63 to 2^63-1)", j.dump()),
                    "give a smaller integer");
  if (j.is_object())
    for (const auto& [k, v] : j.items()) refuse_unsigned_overflow(v, path.empty() ? k : path + "." + k, where);
  if (j.is_array())
    for (const auto& v : j) refuse_unsigned_overflow(v, path, where);
}

// The sweep of a user model's space, given as a TOML table (a file's, or a dict's values). A space
// without [sweep] target is a user model's (that is what these entry points are for), and a dict's
// without a name is "sweep". It is read from the table itself; the store keeps the table as
// toml++ writes it (byte for byte what the earlier path, which formatted the table and parsed the
// text again, stored and drew).
SweepSpec user_sweep_of_table(toml::table root, bool dict, const std::string& where) {
  if (!root.contains("sweep")) root.insert("sweep", toml::table{});
  if (toml::table* sw = root["sweep"].as_table(); sw && !sw->contains("target")) sw->insert("target", "python");
  if (toml::table* sw = root["sweep"].as_table(); dict && sw && !sw->contains("name")) sw->insert("name", std::string("sweep"));
  SweepSpec spec = sweep_from_toml_table(root, to_toml_text(root), where, ".");
  if (!spec.user_model)
    throw UserError(where, "sweep.target", "is \"zoo\": a sweep of scaleinv's own models",
                    "run it with `scaleinv sweep` (the CLI), or write target = \"python\"");
  return spec;
}

}  // namespace

SweepSpec user_sweep_from_toml(const std::string& text, const std::string& where) {
  return user_sweep_of_table(parse_toml(text, where), false, where);
}

SweepSpec user_sweep_from_json(const nlohmann::json& space, const std::string& where) {
  if (!space.is_object())
    throw UserError(where, "space", fmt::format("is a JSON {}, not a table", space.type_name()),
                    "give a dict or a TOML file's path");
  refuse_unsigned_overflow(space, "", where);
  toml::table root;
  try {
    root = json_to_toml_table(space);
  } catch (const std::invalid_argument& e) {
    throw UserError(where, "space", e.what(), "give numbers, strings, booleans, lists and dicts");
  }
  return user_sweep_of_table(std::move(root), true, where);
}

SweepSpec stored_user_sweep(const std::string& db_path) {
  std::optional<std::string> text;
  {
    SqliteDb db(db_path, SqliteDb::Mode::ReadOnly);
    db.check_integrity();
    if (db.has_table("meta")) {
      const auto rows = db.query("SELECT value FROM meta WHERE key = 'sweep_toml'");
      if (!rows.empty()) text = sql_text(rows[0][0], db_path, "meta.sweep_toml");
    }
  }
  if (!text) throw UserError(db_path, "--db", "not a sweep database (no meta.sweep_toml)", "give a database written by a sweep");
  const toml::table root = parse_toml(*text, db_path);
  if (root["sweep"]["target"].value_or(std::string("zoo")) != "python")
    throw UserError(db_path, "--config", "missing: the database holds a sweep of scaleinv's own models",
                    "give the sweep file it was run with: --config FILE");
  return user_sweep_from_toml(*text, db_path);
}

PointExecutor sequential_executor(TrainPoint train) {
  PointExecutor e;
  e.run = [train = std::move(train)](const std::vector<PendingPoint>& batch, const PointEvents& events) {
    for (const PendingPoint& p : batch) {
      if (events.started) events.started(p.index);
      events.record(p.index, train(*p.point, p.hparams));
    }
  };
  return e;
}

nlohmann::json run_user_sweep(const SweepSpec& spec, const UserSweepOptions& opts, const TrainPoint& train) {
  return run_user_sweep(spec, opts, sequential_executor(train));
}

nlohmann::json run_user_sweep(const SweepSpec& spec, const UserSweepOptions& opts, const PointExecutor& executor) {
  nlohmann::json out;
  if (!spec.search) {
    const SweepRunSummary s = run_user_points(spec, opts, "", executor);
    out = summary_json(s);
    out["text"] = render_sweep_summary(s);
    return out;
  }
  const SearchRunSummary s = run_search_rungs(spec, opts.db_path, opts.shard, opts.resume,
                                              [&](const SweepSpec& rung, bool resume, const std::string& label) {
                                                UserSweepOptions o = opts;
                                                o.resume = resume;
                                                return run_user_points(rung, o, label, executor);
                                              });
  SweepRunSummary total;
  total.db_path = opts.db_path;
  for (const SweepRunSummary& r : s.rungs) {
    total.shard_points += r.shard_points;
    total.run += r.run;
    total.skipped += r.skipped;
    total.diverged += r.diverged;
    total.failed += r.failed;
  }
  total.wall_s = s.wall_s;
  out = summary_json(total);
  out["text"] = render_search_summary(spec, s);
  out["ranking"] = nlohmann::json::array();
  for (const TrialResult& t : s.ranking) {
    nlohmann::json j = trial_json(t);
    j["group"] = t.group;
    out["ranking"].push_back(std::move(j));
  }
  return out;
}

}  // namespace scaleinv
