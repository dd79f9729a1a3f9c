// Ranking a hyperparameter search and running it rung by rung (see search_rank.h).
#include "brain/sweep/search_rank.h"

#include "brain/util/json_number.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <ranges>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/util/progress.h"
#include "brain/util/sqlite_db.h"

namespace scaleinv {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_seed_key(const std::string& k) { return k == "seed" || k == "train.seed" || k == "data.seed"; }

// The group of a point: its grid axes without the seed.
std::string group_of(const SweepSpec& spec, const SweepPoint& p) {
  auto text = [&](const GridAxis& a) {
    const nlohmann::json& v = p.axes.at(a.key);
    return a.key + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  };
  auto grid = spec.axes | std::views::filter([](const GridAxis& a) { return !is_seed_key(a.key); });
  return fmt::format("{}", fmt::join(grid | std::views::transform(text), ", "));
}

struct Stored {
  double loss = 0;
  bool diverged = false;
};

std::map<std::string, Stored> stored_losses(const std::string& db_path) {
  std::map<std::string, Stored> out;
  if (!std::filesystem::exists(db_path)) return out;
  SqliteDb db(db_path, SqliteDb::Mode::ReadOnly);
  if (!db.has_table("points")) return out;
  for (const auto& r : db.query("SELECT id, final_loss, diverged FROM points")) {
    Stored s;
    s.loss = std::holds_alternative<double>(r[1]) ? std::get<double>(r[1]) : std::nan("");
    s.diverged = std::holds_alternative<int64_t>(r[2]) && std::get<int64_t>(r[2]) != 0;
    out[sql_text(r[0], db_path, "points.id")] = s;
  }
  return out;
}

// Per (group, trial): the mean loss over the seeds of `points` found in `losses`.
std::map<std::pair<std::string, int>, TrialResult> score(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                                                          const std::map<std::string, Stored>& losses, int rung) {
  std::map<std::pair<std::string, int>, TrialResult> out;
  std::map<std::pair<std::string, int>, int> diverged;
  const std::vector<Bracket> br = brackets(*spec.search, spec.full_steps);
  for (const SweepPoint& p : points) {
    const int trial = p.axes.at("search.trial").get<int>();
    const std::string g = group_of(spec, p);
    TrialResult& t = out[{g, trial}];
    t.group = g;
    t.trial = trial;
    t.bracket = bracket_of(br, trial);
    t.rung = rung;
    t.steps = p.coords().steps;
    t.values = sample_trial(*spec.search, trial);
    auto it = losses.find(p.id);
    if (it == losses.end()) continue;
    if (it->second.diverged || !std::isfinite(it->second.loss)) ++diverged[{g, trial}];
    else t.mean_loss += it->second.loss;
    ++t.seeds;
  }
  for (auto& [k, t] : out) {
    if (t.seeds == 0) t.mean_loss = std::nan("");
    else if (diverged[k] > 0) t.mean_loss = kInf;
    else t.mean_loss /= t.seeds;
  }
  return out;
}

// Best first; NaN (not run) last; ties by trial index.
bool better(const TrialResult& a, const TrialResult& b) {
  const bool an = std::isnan(a.mean_loss), bn = std::isnan(b.mean_loss);
  if (an != bn) return bn;
  if (!an && a.mean_loss != b.mean_loss) return a.mean_loss < b.mean_loss;
  return a.trial < b.trial;
}

std::vector<SweepPoint> rung_points(const SweepSpec& spec, int rung, const std::map<std::string, std::vector<int>>& keep) {
  std::set<int> trials;
  for (const auto& [g, ts] : keep) trials.insert(ts.begin(), ts.end());
  std::vector<SweepPoint> all =
      expand_points(spec, rung_assignments(*spec.search, rung, std::vector<int>(trials.begin(), trials.end()), spec.full_steps));
  std::vector<SweepPoint> out;
  for (SweepPoint& p : all) {
    auto it = keep.find(group_of(spec, p));
    if (it != keep.end() &&
        std::find(it->second.begin(), it->second.end(), p.axes.at("search.trial").get<int>()) != it->second.end())
      out.push_back(std::move(p));
  }
  return out;
}

// The next rung's trials per group: the best survivors(n) of the n each bracket ran in the group,
// and the trials of the brackets that start at rung `next` (hyperband; search_space.h).
std::map<std::string, std::vector<int>> keep_best(const SweepSpec& spec,
                                                  const std::map<std::pair<std::string, int>, TrialResult>& scores,
                                                  int next) {
  const std::vector<Bracket> br = brackets(*spec.search, spec.full_steps);
  std::map<std::pair<std::string, int>, std::vector<TrialResult>> by_bracket;
  for (const auto& [key, t] : scores) by_bracket[{key.first, bracket_of(br, t.trial)}].push_back(t);
  std::map<std::string, std::vector<int>> keep;
  for (auto& [gb, ts] : by_bracket) {
    std::sort(ts.begin(), ts.end(), better);
    const int n = survivors(*spec.search, static_cast<int>(ts.size()));
    for (int i = 0; i < n; ++i) keep[gb.first].push_back(ts[static_cast<size_t>(i)].trial);
  }
  for (const Bracket& b : br) {
    if (b.first_rung != next) continue;
    for (auto& [g, ts] : keep)
      for (int t = b.first_trial; t < b.first_trial + b.trials; ++t) ts.push_back(t);
  }
  return keep;
}

std::string set_line(const std::string& key, const nlohmann::json& v) {
  if (key == "lr_log2") return fmt::format("optim.lr={}", std::exp2(v.get<double>()));
  return fmt::format("{}={}", key, v.dump());  // a string value dumps quoted, as TOML wants it
}

}  // namespace

nlohmann::json trial_json(const TrialResult& t) {
  return {{"trial", t.trial},
          {"bracket", t.bracket},
          {"values", t.values},
          {"rung", t.rung},
          {"steps", t.steps},
          {"seeds", t.seeds},
          {"mean_loss", json_number(t.mean_loss)},
          {"status", std::isfinite(t.mean_loss) ? "ok" : std::isnan(t.mean_loss) ? "not run" : "diverged"}};
}

std::vector<TrialResult> rank_search(const SweepSpec& spec, const std::string& db_path) {
  if (!spec.search) throw UserError(spec.path, "search", "this sweep file has no [search]", "give a search sweep file");
  const auto losses = stored_losses(db_path);
  // Walk the rungs as run_search does, keeping each trial's result at the highest rung it reached.
  std::map<std::pair<std::string, int>, TrialResult> best;
  std::vector<SweepPoint> pts = spec.points;
  const size_t rungs = rung_steps(*spec.search, spec.full_steps).size();
  for (size_t k = 0; k < rungs && !pts.empty(); ++k) {
    auto scores = score(spec, pts, losses, static_cast<int>(k));
    std::map<std::pair<std::string, int>, int> expected;  // points (seeds) per trial in this rung
    for (const SweepPoint& p : pts) ++expected[{group_of(spec, p), p.axes.at("search.trial").get<int>()}];
    bool complete = true;  // every point of the rung stored: the next rung is what run_search ran
    for (const auto& [key, t] : scores) {
      if (t.seeds > 0 || !best.count(key)) best[key] = t;  // a trial not yet run is listed, last
      if (t.seeds < expected[key]) complete = false;
    }
    if (!complete || k + 1 == rungs) break;
    pts = rung_points(spec, static_cast<int>(k + 1), keep_best(spec, scores, static_cast<int>(k + 1)));
  }
  // Hyperband's brackets that the store has not reached yet: listed as not run, at their first rung.
  std::set<std::string> groups;
  for (const auto& [key, t] : best) groups.insert(key.first);
  const std::vector<Bracket> br = brackets(*spec.search, spec.full_steps);
  const std::vector<int64_t> steps = rung_steps(*spec.search, spec.full_steps);
  for (const std::string& g : groups)
    for (size_t b = 0; b < br.size(); ++b)
      for (int trial = br[b].first_trial; trial < br[b].first_trial + br[b].trials; ++trial) {
        TrialResult& t = best[{g, trial}];
        if (!t.values.is_null()) continue;
        t.group = g;
        t.trial = trial;
        t.bracket = static_cast<int>(b);
        t.rung = br[b].first_rung;
        t.steps = steps.at(static_cast<size_t>(t.rung));
        t.values = sample_trial(*spec.search, trial);
        t.mean_loss = std::nan("");
      }
  std::vector<TrialResult> out;
  for (auto& [k, t] : best) out.push_back(t);
  std::stable_sort(out.begin(), out.end(), [](const TrialResult& a, const TrialResult& b) {
    if (a.group != b.group) return a.group < b.group;
    const bool an = std::isnan(a.mean_loss), bn = std::isnan(b.mean_loss);
    if (an != bn) return bn;               // not run: last,
    if (an) return a.trial < b.trial;      // in trial order
    if (a.rung != b.rung) return a.rung > b.rung;  // reached further: better
    return better(a, b);
  });
  return out;
}

std::vector<SweepPoint> next_rung_points(const SweepSpec& spec, const std::vector<SweepPoint>& rung_pts,
                                         const std::string& db_path, int rung) {
  const auto scores = score(spec, rung_pts, stored_losses(db_path), rung);
  return rung_points(spec, rung + 1, keep_best(spec, scores, rung + 1));
}

SweepSpec search_rung_spec(const SweepSpec& spec, const std::string& db_path, int rung) {
  if (!spec.search) throw UserError(spec.path, "search", "this sweep file has no [search]", "run it without --rung");
  const std::vector<int64_t> steps = rung_steps(*spec.search, spec.full_steps);
  if (rung < 0 || rung >= static_cast<int>(steps.size()))
    throw UserError("command line", "--rung", fmt::format("is {}; this search has rungs 0..{}", rung, steps.size() - 1),
                    "give a rung of the search (0-based)");
  SweepSpec rs = spec;
  for (int k = 0; k < rung && !rs.points.empty(); ++k) rs.points = next_rung_points(spec, rs.points, db_path, k);
  return rs;
}

SearchRunSummary run_search_rungs(const SweepSpec& spec, const std::string& db_path, const Shard& shard, bool resume,
                                  const RungRunner& run_rung) {
  if (!spec.search) throw UserError(spec.path, "search", "this sweep file has no [search]", "use run_sweep");
  const auto t0 = std::chrono::steady_clock::now();
  SearchRunSummary sum;
  sum.rung_steps = rung_steps(*spec.search, spec.full_steps);
  if (sum.rung_steps.size() > 1 && shard.count > 1)
    throw UserError("command line", "--shard",
                    "successive halving needs each rung's results in one database before the next rung",
                    input_name("run it unsharded (--jobs spreads it over the cores)") +
                        ", or use method = \"random\" to shard");
  std::vector<SweepPoint> pts = spec.points;
  for (size_t k = 0; k < sum.rung_steps.size() && !pts.empty(); ++k) {
    SweepSpec rs = spec;
    rs.points = pts;
    const std::string label =
        sum.rung_steps.size() > 1 ? fmt::format("sweep {} rung {}/{}", spec.name, k + 1, sum.rung_steps.size()) : "";
    sum.rungs.push_back(run_rung(rs, resume || k > 0, label));  // later rungs add to the rungs before
    if (k + 1 == sum.rung_steps.size() || sum.rungs.back().stopped_by) break;  // a stop signal: no next rung
    pts = next_rung_points(spec, pts, db_path, static_cast<int>(k));
  }
  sum.ranking = rank_search(spec, db_path);
  // The ranking as JSON beside the store.
  nlohmann::json groups = nlohmann::json::object();
  for (const TrialResult& t : sum.ranking) {
    nlohmann::json& g = groups[t.group];
    if (!g.contains("ranking")) {
      std::vector<std::string> sets;
      for (const auto& [k, v] : t.values.items()) sets.push_back(set_line(k, v));
      g["best"] = {{"trial", t.trial}, {"values", t.values}, {"set", sets}};
      g["ranking"] = nlohmann::json::array();
    }
    g["ranking"].push_back(trial_json(t));
  }
  const std::filesystem::path db(db_path);
  sum.json_path = (db.parent_path() / (db.stem().string() + "-search.json")).string();
  nlohmann::json bjs = nlohmann::json::array();
  for (const Bracket& b : brackets(*spec.search, spec.full_steps))
    bjs.push_back({{"first_rung", b.first_rung}, {"first_trial", b.first_trial}, {"trials", b.trials}});
  write_file_atomic(sum.json_path, nlohmann::json({{"sweep", spec.name},
                                                   {"method", spec.search->method},
                                                   {"trials", spec.search->trials},
                                                   {"brackets", bjs},
                                                   {"rung_steps", sum.rung_steps},
                                                   {"shard", shard.str()},
                                                   {"groups", groups}})
                                           .dump(2) +
                                       "\n");
  sum.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

std::string render_search_summary(const SweepSpec& spec, const SearchRunSummary& s) {
  std::string out = "search summary\n";
  auto row = [&](const std::string& k, const std::string& v) { out += fmt::format("  {:<16} {}\n", k, v); };
  row("sweep", spec.name);
  const std::vector<Bracket> br = brackets(*spec.search, spec.full_steps);
  row("method", fmt::format("{}, {} trials, {} dimension{}", spec.search->method, total_trials(br),
                            spec.search->dims.size(), spec.search->dims.size() == 1 ? "" : "s"));
  if (br.size() > 1) {
    const std::vector<int64_t> steps = rung_steps(*spec.search, spec.full_steps);
    std::string b;
    for (const Bracket& x : br)
      b += fmt::format("{}{} from {} steps", b.empty() ? "" : ", ", x.trials, steps.at(static_cast<size_t>(x.first_rung)));
    row("brackets", b);
  }
  for (size_t k = 0; k < s.rungs.size(); ++k)
    row(fmt::format("rung {}", k + 1),
        fmt::format("{} steps: {} points ({} run now, {} already in the db, {} diverged), {}", s.rung_steps[k],
                    s.rungs[k].grid_points, s.rungs[k].run, s.rungs[k].skipped, s.rungs[k].diverged,
                    format_duration(s.rungs[k].wall_s)));
  // A partial store (killed, a shard, or a halving store read as hyperband): say so, since its
  // best is only the best so far.
  size_t not_run = 0;
  for (const TrialResult& t : s.ranking) not_run += std::isnan(t.mean_loss) ? 1 : 0;
  if (not_run > 0)
    row("status", fmt::format("incomplete: {} of {} trial runs (trial x group) not run yet; the best below is the best "
                              "so far ({} continues it)",
                              not_run, s.ranking.size(), input_name("sweep --resume")));
  if (!s.rungs.empty()) {
    row("wall time", format_duration(s.wall_s));
    row("db", s.rungs.front().db_path);
    row("ranking", s.json_path);
  }
  std::optional<std::string> group;
  int shown = 0;
  for (const TrialResult& t : s.ranking) {
    if (!group || t.group != *group) {
      group = t.group;
      shown = 0;
      out += fmt::format("\n{}: trials by the rung reached, then final loss (mean over seeds)\n",
                         group->empty() ? "all trials" : *group);
      std::string sets;
      for (const auto& [k, v] : t.values.items())  // JSON string escapes are TOML's basic-string escapes
        sets += (sets.empty() ? "" : ", ") + nlohmann::json(set_line(k, v)).dump();
      out += "  best: set = [" + sets + "]\n";
      out += br.size() > 1 ? "  trial  bracket  rung  steps  loss      values\n" : "  trial  rung  steps  loss      values\n";
    }
    if (shown++ >= 5) continue;
    std::string vals;
    for (const auto& [k, v] : t.values.items())
      vals += (vals.empty() ? "" : ", ") + k + "=" + (v.is_number_float() ? fmt::format("{:.4g}", v.get<double>()) : v.dump());
    const std::string loss = std::isnan(t.mean_loss) ? "not run" : std::isinf(t.mean_loss) ? "diverged" : fmt::format("{:.4f}", t.mean_loss);
    const std::string bracket = br.size() > 1 ? fmt::format("  {:>7}", t.bracket + 1) : "";
    out += fmt::format("  {:>5}{}  {:>4}  {:>5}  {:<8}  {}\n", t.trial, bracket, t.rung + 1, t.steps, loss, vals);
  }
  return out;
}

}  // namespace scaleinv
