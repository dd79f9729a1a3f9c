// A sweep or search sent to a Slurm cluster (see slurm_sweep.h).
#include "brain/sweep/slurm_sweep.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/util/progress.h"
#include "brain/util/stop_signal.h"
#include "brain/util/subprocess.h"
#include "brain/util/writer_lock.h"
#include "brain/sweep/shard.h"
#include "brain/sweep/slurm.h"
#include "brain/sweep/sweep_store.h"

namespace scaleinv {

namespace fs = std::filesystem;

namespace {

constexpr int kMaxDefaultTasks = 64;
constexpr int kGrid = -1;  // the rung of a grid's shards
constexpr auto kSqueueGrace = std::chrono::minutes(5);  // how long a waiting driver bears a failing squeue

struct Job {
  std::string role;  // "array", "collect", "driver", "probe"
  std::string id;
  std::string tasks;  // an array's indices ("0-7", "3,5")
  int attempt = 1;
  int rung = kGrid;
};

struct Submission {
  std::string path;  // submission.json
  std::string kind, name, config, db, binary;
  int array_size = 0, retries = 1;
  int tasks = 0;  // a grid's N
  std::vector<std::string> sbatch_args;
  double poll_s = 2;
  std::vector<Job> jobs;

  fs::path dir() const { return fs::path(path).parent_path(); }
  std::string shard_store(int rung, int i, int n) const {
    const std::string stem = fs::path(db).stem().string();
    return (dir() / "shards" /
            (rung == kGrid ? fmt::format("{}.shard-{}-of-{}.db", stem, i, n)
                           : fmt::format("{}.rung-{}.shard-{}-of-{}.db", stem, rung, i, n)))
        .string();
  }
};

nlohmann::json to_json(const Submission& s) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const Job& j : s.jobs)
    jobs.push_back({{"role", j.role}, {"id", j.id}, {"tasks", j.tasks}, {"attempt", j.attempt}, {"rung", j.rung}});
  return {{"kind", s.kind},     {"name", s.name},         {"config", s.config},   {"db", s.db},
          {"binary", s.binary}, {"array_size", s.array_size}, {"retries", s.retries}, {"tasks", s.tasks},
          {"sbatch_args", s.sbatch_args}, {"poll_s", s.poll_s}, {"jobs", jobs}};
}

void save(const Submission& s) { write_file_atomic(s.path, to_json(s).dump(2) + "\n"); }

Submission load(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw UserError(path, "--submission", "cannot be read",
                    "give the submission.json that `scaleinv sweep submit` wrote beside the store (STEM.slurm/)");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("db") || !j.contains("jobs"))
    throw UserError(path, "--submission", "is not a submission written by scaleinv sweep submit",
                    "give the submission.json in the store's STEM.slurm/ folder");
  Submission s;
  s.path = path;
  s.kind = j.value("kind", "grid");
  s.name = j.value("name", "");
  s.config = j.at("config").get<std::string>();
  s.db = j.at("db").get<std::string>();
  s.binary = j.at("binary").get<std::string>();
  s.array_size = j.value("array_size", 0);
  s.retries = j.value("retries", 1);
  s.tasks = j.value("tasks", 0);
  s.sbatch_args = j.value("sbatch_args", std::vector<std::string>{});
  s.poll_s = j.value("poll_s", 2.0);
  for (const auto& x : j.at("jobs"))
    s.jobs.push_back({x.value("role", ""), x.value("id", ""), x.value("tasks", ""), x.value("attempt", 1),
                      x.value("rung", kGrid)});
  return s;
}

// Tasks for `spec`'s points: one per ensemble chunk, at most `array_size` (0: at most 64).
int task_count(const SweepSpec& spec, int array_size) {
  std::vector<size_t> all(spec.points.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const int chunks = static_cast<int>(ensemble_chunks(spec.points, all, spec.ensemble).size());
  return std::max(1, std::min(chunks, array_size > 0 ? array_size : kMaxDefaultTasks));
}

std::set<std::string> shard_ids(const SweepSpec& spec, int i, int n) {
  std::set<std::string> out;
  for (size_t k : shard_points(spec, Shard{i, n})) out.insert(spec.points[k].id);
  return out;
}

// Shards of `spec` (n of them; rung `rung`) with a point in neither their own store nor DB.
std::vector<int> unfinished_shards(const Submission& sub, const SweepSpec& spec, int rung, int n) {
  const StoreCounts db = read_store_counts(sub.db);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    const StoreCounts own = read_store_counts(sub.shard_store(rung, i, n));
    for (const std::string& id : shard_ids(spec, i, n))
      if (!db.ids.count(id) && !own.ids.count(id)) {
        out.push_back(i);
        break;
      }
  }
  return out;
}

std::string index_list(const std::vector<int>& v) {
  std::string out;
  for (int i : v) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

std::string self_binary() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("scaleinv") : p.string();
}

// The three scripts, each passing the paths it needs quoted (slurm.h's shell_quote).
void write_scripts(const Submission& s) {
  const std::string bin = shell_quote(s.binary), cfg = shell_quote(s.config), db = shell_quote(s.db);
  const std::string sub = shell_quote(s.path), shards = shell_quote((s.dir() / "shards").string());
  const std::string stem = shell_quote(fs::path(s.db).stem().string());
  std::string name = s.name;  // in a comment line: no character may end it
  for (char& c : name)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  write_file_atomic((s.dir() / "shard.sh").string(),
                    "#!/bin/bash\n"
                    "# Written by `scaleinv sweep submit --slurm` for sweep " + name + ": one task of a job array\n"
                    "# trains shard $SLURM_ARRAY_TASK_ID of N into a store of its own with --resume, so a task\n"
                    "# that is killed or requeued goes on where it stopped. Arguments: grid|RUNG N.\n"
                    "set -euo pipefail\n"
                    "i=\"${SLURM_ARRAY_TASK_ID:?run it as a task of a Slurm job array}\"\n"
                    "rung=\"$1\"; n=\"$2\"; stem=" + stem + "; shards=" + shards + "\n"
                    "if [ \"$rung\" = grid ]; then\n"
                    "  out=\"$shards/$stem.shard-$i-of-$n.db\"; extra=()\n"
                    "else\n"
                    "  out=\"$shards/$stem.rung-$rung.shard-$i-of-$n.db\"; extra=(--rung \"$rung\" --rung-db " + db + ")\n"
                    "fi\n"
                    "exec " + bin + " --threads \"${SLURM_CPUS_PER_TASK:-1}\" sweep --config " + cfg +
                    " \"${extra[@]}\" --shard \"$i/$n\" --out \"$out\" --resume --quiet\n");
  write_file_atomic((s.dir() / "collect.sh").string(),
                    "#!/bin/bash\n"
                    "# Written by `scaleinv sweep submit --slurm`: after every task of the array has ended, merge\n"
                    "# the shard stores into the store and submit unfinished shards again (retries).\n"
                    "exec " + bin + " sweep collect --submission " + sub + "\n");
  write_file_atomic((s.dir() / "drive.sh").string(),
                    "#!/bin/bash\n"
                    "# Written by `scaleinv sweep submit --slurm`: the search's driver, rung by rung.\n"
                    "exec " + bin + " sweep drive --submission " + sub + "\n");
}

// Common sbatch options of our jobs, before the user's (which may override the name or time).
std::vector<std::string> job_args(const Submission& s, const std::string& name, const std::string& log) {
  std::vector<std::string> a = {"--job-name=" + name, "--output=" + (s.dir() / "logs" / log).string(),
                                "--open-mode=append", "--chdir=" + s.dir().string()};
  a.insert(a.end(), s.sbatch_args.begin(), s.sbatch_args.end());
  return a;
}

// An array of shard tasks: `role` "array" for a grid's, "rung" for a search's.
std::string submit_array(const SlurmClient& client, Submission& s, int rung, int n, const std::vector<int>& idx,
                         int attempt, const std::string& role = "array") {
  std::vector<std::string> a = job_args(s, "scaleinv-" + s.name, "%x-%A_%a.out");
  a.push_back("--array=" + index_list(idx));
  a.push_back("--requeue");
  a.push_back("--ntasks=1");
  const std::string id = client.submit((s.dir() / "shard.sh").string(), a,
                                       {rung == kGrid ? "grid" : std::to_string(rung), std::to_string(n)});
  s.jobs.push_back({role, id, index_list(idx), attempt, rung});
  save(s);
  return id;
}

std::string submit_collect(const SlurmClient& client, Submission& s, const std::string& after, int attempt) {
  std::vector<std::string> a = job_args(s, "scaleinv-" + s.name + "-collect", "%x-%j.out");
  a.push_back("--dependency=afterany:" + after);
  a.push_back("--ntasks=1");
  const std::string id = client.submit((s.dir() / "collect.sh").string(), a);
  s.jobs.push_back({"collect", id, "", attempt, kGrid});
  save(s);
  return id;
}

// A job on a compute node reads a file written here into the store's folder: the nodes see it.
void probe_store(const SlurmClient& client, const Submission& s, double timeout_s) {
  std::random_device rd;
  const std::string token = fmt::format("probe-{:08x}{:08x}", rd(), rd());
  const fs::path mark = s.dir() / token, seen = s.dir() / (token + ".seen"), script = s.dir() / "probe.sh";
  write_file_atomic(mark.string(), "written by scaleinv sweep submit on the submitting machine\n");
  write_file_atomic(script.string(), "#!/bin/bash\n# scaleinv sweep submit: do the nodes see the store's folder?\n"
                                     "test -r " + shell_quote(mark.string()) + " && test -x " +
                                         shell_quote(s.binary) + " && test -r " + shell_quote(s.config) +
                                         " && hostname > " + shell_quote(seen.string()) + "\n");
  std::vector<std::string> a = {"--job-name=scaleinv-" + s.name + "-probe", "--output=/dev/null", "--ntasks=1"};
  a.insert(a.end(), s.sbatch_args.begin(), s.sbatch_args.end());
  const std::string id = client.submit(script.string(), a);
  const auto t0 = std::chrono::steady_clock::now();
  while (!client.live_tasks(id).empty()) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      client.cancel({id});
      fs::remove(mark);
      throw UserError("command line", "--probe-timeout",
                      fmt::format("the probe job {} did not run within {:.0f} s (the queue is busy)", id, timeout_s),
                      "give a longer --probe-timeout, or --no-probe when the store's folder is known to be shared");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  const bool ok = fs::exists(seen);
  fs::remove(mark);
  fs::remove(seen);
  if (!ok)
    throw UserError(s.db, "--out",
                    fmt::format("the compute nodes cannot see the store's folder {} (probe job {} could not read a "
                                "file written there, or the binary {} or the sweep file)",
                                s.dir().parent_path().string(), id, s.binary),
                    "put --out (and the sweep file and binary) on a filesystem the nodes share");
}

// Progress of waiting: points of `expected` found in DB or `stores`, the tasks running/pending.
struct WaitCount {
  int64_t done = 0, failed = 0, running = 0, pending = 0;
};

WaitCount count_now(const Submission& s, const std::set<std::string>& expected, const std::vector<std::string>& stores,
                    const std::map<int, std::string>& live) {
  std::set<std::string> done, failed;
  auto add = [&](const StoreCounts& c) {
    for (const std::string& id : c.ids)
      if (expected.count(id)) done.insert(id);
    for (const std::string& id : c.failed)
      if (expected.count(id)) failed.insert(id);
  };
  // (While tasks write their stores, one may be caught half-created: it counts next time.)
  auto add_path = [&](const std::string& p) {
    try {
      add(read_store_counts(p));
    } catch (const std::exception&) {
    }
  };
  add_path(s.db);
  for (const std::string& p : stores) add_path(p);
  WaitCount w;
  w.done = static_cast<int64_t>(done.size());
  w.failed = static_cast<int64_t>(failed.size());
  for (const auto& [i, st] : live) (st == "RUNNING" || st == "COMPLETING" ? w.running : w.pending)++;
  return w;
}

// Waits until none of the submission's jobs of `roles` (re-read from disk: a collect job may add
// some) is live, with a bar over `expected`. False when a stop signal ended the wait.
bool wait_for_jobs(const SlurmClient& client, const std::string& sub_path, const std::set<std::string>& roles,
                   const std::set<std::string>& expected, const std::function<std::vector<std::string>()>& stores,
                   const std::string& label, bool show_progress) {
  std::unique_ptr<Progress> bar;
  if (show_progress) bar = std::make_unique<Progress>(std::max<long>(1, static_cast<long>(expected.size())), label, "point");
  auto status = [](const WaitCount& w) {
    return fmt::format("| running {} | pending {} | failed {}", w.running, w.pending, w.failed);
  };
  WaitCount w;
  std::optional<std::chrono::steady_clock::time_point> failing_since;  // squeue failing (a controller restarting)
  for (;;) {
    const Submission before = load(sub_path);
    std::map<int, std::string> live;
    int key = 0;
    try {
      for (const Job& j : before.jobs)
        if (roles.count(j.role))
          for (const auto& [i, st] : client.live_tasks(j.id)) live[key++] = st;
      failing_since.reset();
    } catch (const std::runtime_error&) {  // waited out for kSqueueGrace, then it ends the wait
      const auto now = std::chrono::steady_clock::now();
      if (!failing_since) failing_since = now;
      if (now - *failing_since > kSqueueGrace) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(before.poll_s * 1000)));
      continue;
    }
    const Submission after = load(sub_path);
    w = count_now(after, expected, stores(), live);
    if (live.empty() && after.jobs.size() == before.jobs.size()) break;
    if (bar) bar->update(static_cast<long>(w.done), status(w));
    if (stop_requested()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(before.poll_s * 1000)));
  }
  if (bar) bar->finish(status(w));
  return true;
}

std::vector<std::string> existing_stores(const Submission& s, int rung, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i)
    if (fs::exists(s.shard_store(rung, i, n))) out.push_back(s.shard_store(rung, i, n));
  return out;
}

std::vector<std::string> all_stores(const Submission& s, int rung, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(s.shard_store(rung, i, n));
  return out;
}

bool any_live(const SlurmClient& client, const Submission& s) {
  for (const Job& j : s.jobs)
    if (!client.live_tasks(j.id).empty()) return true;
  return false;
}

Submission prepare(const std::string& config_path, const SweepSpec& spec, const SlurmSweepOptions& o,
                   const SlurmClient& client) {
  Submission s;
  s.db = fs::absolute(o.db).lexically_normal().string();
  s.path = (fs::path(submission_dir(s.db)) / "submission.json").string();
  if (fs::exists(s.path)) {  // a submission of this store before: go on with it, unless it still runs
    const Submission prev = load(s.path);
    if (any_live(client, prev))
      throw UserError(s.db, "--out",
                      fmt::format("a submission of this store is still running (jobs of {})", s.path),
                      "wait for it (scaleinv sweep status --db " + s.db +
                          "), or stop it with scancel first: one driver per store");
    // Keep the shards' N (a grid's tasks, a search's array size), so their stores resume; a new
    // --array-size is not used.
    s.tasks = prev.tasks;
    s.array_size = prev.array_size;
    s.jobs = prev.jobs;
  }
  if (fs::exists(s.db) && sweep_db_fingerprint(s.db) != spec.fingerprint)
    throw UserError(s.db, "--out", "holds another sweep or grid (its fingerprint differs from the file's)",
                    "give --out a new store, or the file that wrote this one");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(s.dir() / "shards", ec))  // a submission of another file
    if (e.path().extension() == ".db" && fs::file_size(e.path(), ec) > 0 &&
        sweep_db_fingerprint(e.path().string()) != spec.fingerprint)
      throw UserError(s.db, "--out",
                      fmt::format("its submission folder holds shards of another sweep or grid ({})",
                                  e.path().filename().string()),
                      "give --out a new store, or submit the file that wrote those shards");
  s.kind = spec.search && rung_steps(*spec.search, spec.full_steps).size() > 1 ? "search" : "grid";
  s.name = spec.name;
  s.config = fs::absolute(config_path).lexically_normal().string();
  s.binary = o.binary.empty() ? self_binary() : fs::absolute(o.binary).string();
  if (s.jobs.empty()) s.array_size = o.array_size;
  s.retries = o.retries;
  s.sbatch_args = o.sbatch_args;
  s.poll_s = o.poll_s;
  fs::create_directories(s.dir() / "shards");
  fs::create_directories(s.dir() / "logs");
  write_scripts(s);
  save(s);
  return s;
}

std::string grid_summary(const Submission& s, const std::string& array, const std::string& collect,
                         const std::vector<int>& idx) {
  std::string out = "sweep submitted to Slurm\n";
  auto row = [&](const std::string& k, const std::string& v) { out += fmt::format("  {:<16} {}\n", k, v); };
  row("sweep", s.name);
  row("store", s.db);
  row("array job", fmt::format("{} ({} of {} shards: {})", array, idx.size(), s.tasks, index_list(idx)));
  row("collect job", collect + " (after every task: merges the shards, resubmits unfinished ones)");
  row("scripts, logs", s.dir().string());
  row("watch", "scaleinv sweep status --db " + s.db);
  return out;
}

// The report of a complete grid, as the one-machine commands write it: transfer-report's page
// (STEM-report/) for a sweep, `sweep rank`'s table for a random search; a sweep transfer-report
// cannot read (one width, say) gets a line saying why.
void write_report(const Submission& s, const SweepSpec& spec) {
  const std::string out = (s.dir().parent_path() / (fs::path(s.db).stem().string() + "-report")).string();
  const std::vector<std::string> argv =
      spec.search ? std::vector<std::string>{s.binary, "sweep", "rank", "--config", s.config, "--db", s.db}
                  : std::vector<std::string>{s.binary, "transfer-report", "--db", s.db, "--out", out};
  const ProcessResult r = run_process(argv, 0);
  std::fputs(r.out.c_str(), stdout);
  if (!r.ok()) std::printf("no report: %s\n", r.first_line().c_str());
}

}  // namespace

std::string submission_dir(const std::string& db_path) {
  const fs::path p(db_path);
  return (p.parent_path() / (p.stem().string() + ".slurm")).string();
}

std::string submit_sweep_slurm(const std::string& config_path, const SlurmSweepOptions& o, bool foreground, bool wait,
                               bool show_progress) {
  const SweepSpec spec = load_sweep(config_path);
  if (spec.user_model)
    throw UserError(config_path, "sweep.target", "is \"python\": a sweep of your own model",
                    "submit it from Python: scaleinv.sweep(make_model, train, space=..., db=..., executor=\"slurm\")");
  const SlurmClient client;
  client.check_reachable();
  client.check_partition(partition_in_args(o.sbatch_args));
  const std::string dir = submission_dir(fs::absolute(o.db).lexically_normal().string());
  const bool fresh = !fs::exists(dir);
  Submission s = prepare(config_path, spec, o, client);
  try {
    if (o.probe) probe_store(client, s, o.probe_timeout_s);
  } catch (...) {  // refused before any job of the sweep was submitted: nothing half-written stays
    if (fresh) remove_tree(dir);
    throw;
  }
  if (s.kind == "search") {
    if (foreground) return drive_search_slurm(s.path, show_progress);
    std::vector<std::string> a = job_args(s, "scaleinv-" + s.name + "-driver", "%x-%j.out");
    a.push_back("--ntasks=1");
    const std::string id = client.submit((s.dir() / "drive.sh").string(), a);
    s.jobs.push_back({"driver", id, "", 1, kGrid});
    save(s);
    return fmt::format("search submitted to Slurm\n  {:<16} {}\n  {:<16} {}\n  {:<16} {} (submits each rung as a job "
                       "array and waits for it)\n  {:<16} {}\n  {:<16} scaleinv sweep status --db {}\n",
                       "sweep", s.name, "store", s.db, "driver job", id, "scripts, logs", s.dir().string(), "watch",
                       s.db);
  }
  if (s.tasks == 0) s.tasks = task_count(spec, o.array_size);
  const std::vector<int> idx = unfinished_shards(s, spec, kGrid, s.tasks);
  if (idx.empty()) {  // every point is in a store already: merge what is not in DB yet
    const std::vector<std::string> have = existing_stores(s, kGrid, s.tasks);
    if (!have.empty()) merge_sweep_dbs(s.db, have);
    return render_status(sweep_status(s.db));
  }
  const int attempt = 1 + static_cast<int>(std::count_if(s.jobs.begin(), s.jobs.end(),
                                                           [](const Job& j) { return j.role == "array"; }));
  const std::string array = submit_array(client, s, kGrid, s.tasks, idx, attempt);
  const std::string collect = submit_collect(client, s, array, attempt);
  std::string out = grid_summary(s, array, collect, idx);
  if (wait) {
    std::set<std::string> expected;
    for (const SweepPoint& p : spec.points) expected.insert(p.id);
    const Submission& cs = s;
    const bool done = wait_for_jobs(client, s.path, {"array", "collect"}, expected,
                                    [&] { return all_stores(cs, kGrid, cs.tasks); }, "sweep " + s.name, show_progress);
    out += "\n" + render_status(sweep_status(s.db));
    if (!done) out += "  note: stopped waiting; the jobs go on (scaleinv sweep status --db " + s.db + ")\n";
  }
  return out;
}

int collect_sweep_slurm(const std::string& submission_json) {
  Submission s = load(submission_json);
  const SweepSpec spec = load_sweep(s.config);
  const std::vector<std::string> have = existing_stores(s, kGrid, s.tasks);
  if (!have.empty()) {
    const MergeSummary m = merge_sweep_dbs(s.db, have);
    std::printf("merged %zu shard stores into %s: %lld added, %lld in total\n", have.size(), s.db.c_str(),
                static_cast<long long>(m.rows_added), static_cast<long long>(m.total));
  }
  const std::vector<int> idx = unfinished_shards(s, spec, kGrid, s.tasks);
  const int attempts = static_cast<int>(
      std::count_if(s.jobs.begin(), s.jobs.end(), [](const Job& j) { return j.role == "array"; }));
  if (!idx.empty() && attempts <= s.retries) {
    const SlurmClient client;
    const std::string array = submit_array(client, s, kGrid, s.tasks, idx, attempts + 1);
    const std::string collect = submit_collect(client, s, array, attempts + 1);
    std::printf("shards %s unfinished: submitted again as array job %s (attempt %d of %d), collect job %s\n",
                index_list(idx).c_str(), array.c_str(), attempts + 1, s.retries + 1, collect.c_str());
    return 0;
  }
  std::fputs(render_status(sweep_status(s.db)).c_str(), stdout);
  if (idx.empty()) write_report(s, spec);
  if (!idx.empty()) {
    std::printf("shards %s stay unfinished after %d attempts: their logs are in %s (fix: scaleinv sweep submit "
                "again resumes them)\n",
                index_list(idx).c_str(), attempts, (s.dir() / "logs").string().c_str());
    return 1;
  }
  return 0;
}

std::string drive_search_slurm(const std::string& submission_json, bool show_progress) {
  Submission s = load(submission_json);
  const SweepSpec spec = load_sweep(s.config);
  WriterLock lock;
  if (const auto holder = lock.try_acquire((s.dir() / "driver.lock").string(), "--db"))
    throw UserError(s.db, "--db", fmt::format("another driver runs this search ({})", *holder),
                    "wait for it, or stop it first: one driver per store");
  const SlurmClient client;
  int rung = 0;
  auto run_rung = [&](const SweepSpec& rs, bool, const std::string& label) {
    const int k = rung++;
    const int n = task_count(rs, s.array_size);
    SweepRunSummary sum;
    sum.name = spec.name;
    sum.db_path = s.db;
    sum.grid_points = sum.shard_points = static_cast<int64_t>(rs.points.size());
    std::set<std::string> expected;
    for (const SweepPoint& p : rs.points) expected.insert(p.id);
    const StoreCounts before = read_store_counts(s.db);
    for (const std::string& id : expected) sum.skipped += before.ids.count(id) ? 1 : 0;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string bar = label.empty() ? "sweep " + spec.name : label;
    // A driver that was killed may have left this rung's array running: wait for it before
    // looking at what is unfinished, so no shard gets two tasks writing its store.
    int attempts = 0;  // this rung's arrays so far (a driver before this one may have sent some)
    bool live = false;
    for (const Job& j : s.jobs)
      if (j.role == "rung" && j.rung == k) {
        ++attempts;
        live = live || !client.live_tasks(j.id).empty();
      }
    if (live && !wait_for_jobs(client, s.path, {"rung"}, expected, [&] { return all_stores(s, k, n); }, bar,
                               show_progress)) {
      sum.stopped_by = stop_requested();
      return sum;
    }
    while (attempts <= s.retries) {
      const std::vector<int> idx = unfinished_shards(s, rs, k, n);
      if (idx.empty()) break;
      submit_array(client, s, k, n, idx, ++attempts, "rung");
      if (!wait_for_jobs(client, s.path, {"rung"}, expected, [&] { return all_stores(s, k, n); }, bar, show_progress)) {
        sum.stopped_by = stop_requested();
        return sum;
      }
    }
    const std::vector<std::string> have = existing_stores(s, k, n);
    if (!have.empty()) sum.run = merge_sweep_dbs(s.db, have).rows_added;
    const StoreCounts after = read_store_counts(s.db);
    for (const std::string& id : expected) {
      sum.diverged += after.diverged.count(id) ? 1 : 0;
      sum.failed += after.failed.count(id) ? 1 : 0;
    }
    sum.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (const std::vector<int> left = unfinished_shards(s, rs, k, n); !left.empty())
      throw std::runtime_error(fmt::format(
          "rung {}: shards {} did not finish after {} attempts; their logs are in {} (scaleinv sweep drive --submission "
          "{} goes on from here)",
          k, index_list(left), s.retries + 1, (s.dir() / "logs").string(), s.path));
    return sum;
  };
  return render_search_summary(spec, run_search_rungs(spec, s.db, Shard{}, true, run_rung));
}

SweepStatus sweep_status(const std::string& db_path) {
  const std::string sub_path = (fs::path(submission_dir(fs::absolute(db_path).lexically_normal().string())) /
                                "submission.json").string();
  if (!fs::exists(sub_path)) return store_status(db_path);
  const Submission s = load(sub_path);
  SweepStatus st;
  st.name = s.name;
  st.db = s.db;
  const SweepSpec spec = load_sweep(s.config);
  std::map<std::pair<int, int>, std::string> state;  // (rung, index) -> live state
  bool reachable = true;
  try {
    const SlurmClient client(10);
    const char* self = std::getenv("SLURM_JOB_ID");  // the collect job asking: not a task of the sweep
    for (const Job& j : s.jobs)
      for (const auto& [i, stt] : self && j.id == self ? std::map<int, std::string>{} : client.live_tasks(j.id)) {
        if (j.role == "array" || j.role == "rung") state[{j.rung, i}] = stt;
        (stt == "RUNNING" ? st.running : st.pending)++;
      }
  } catch (const std::exception& e) {
    reachable = false;
    st.notes.push_back(std::string("scheduler not reachable, task states unknown: ") + e.what());
  }
  const StoreCounts db = read_store_counts(s.db);
  std::set<std::string> done, diverged, failed;
  auto add_rows = [&](const SweepSpec& rs, int rung, int n) {
    for (int i = 0; i < n; ++i) {
      const StoreCounts own = read_store_counts(s.shard_store(rung, i, n));
      StatusRow r;
      r.what = rung == kGrid ? fmt::format("shard {}/{}", i, n) : fmt::format("rung {} shard {}/{}", rung, i, n);
      const std::set<std::string> ids = shard_ids(rs, i, n);
      r.expected = static_cast<int64_t>(ids.size());
      for (const std::string& id : ids) {
        const bool in = db.ids.count(id) || own.ids.count(id);
        if (!in) continue;
        ++r.done;
        done.insert(id);
        if (db.diverged.count(id) || own.diverged.count(id)) ++r.diverged, diverged.insert(id);
        if (db.failed.count(id) || own.failed.count(id)) ++r.failed, failed.insert(id);
      }
      const auto it = state.find({rung, i});
      r.state = it != state.end() ? (it->second == "RUNNING" ? "running" : "pending: " + it->second)
                : r.done == r.expected ? "done"
                : !reachable ? "unfinished"
                : own.exists ? "unfinished: no task runs it"
                             : "not started: no task runs it";
      st.rows.push_back(r);
    }
  };
  if (s.kind == "grid") {
    add_rows(spec, kGrid, s.tasks);
    st.expected = static_cast<int64_t>(spec.points.size());
  } else {
    const size_t rungs = rung_steps(*spec.search, spec.full_steps).size();
    int64_t expected = 0;
    for (size_t k = 0; k < rungs; ++k) {
      const bool submitted = std::any_of(s.jobs.begin(), s.jobs.end(), [&](const Job& j) { return j.rung == static_cast<int>(k); });
      if (!submitted) break;
      const SweepSpec rs = search_rung_spec(spec, s.db, static_cast<int>(k));
      expected += static_cast<int64_t>(rs.points.size());
      add_rows(rs, static_cast<int>(k), task_count(rs, s.array_size));
    }
    st.expected = expected;
    st.notes.push_back(fmt::format("a search of {} rungs: the points of the rungs submitted so far", rungs));
  }
  st.done = static_cast<int64_t>(done.size());
  st.diverged = static_cast<int64_t>(diverged.size());
  st.failed = static_cast<int64_t>(failed.size());
  StatusRow merged{"merged store", s.kind == "grid" ? st.expected : -1, static_cast<int64_t>(db.ids.size()), static_cast<int64_t>(db.diverged.size()),
                   static_cast<int64_t>(db.failed.size()), db.exists ? "" : "not written yet"};
  st.rows.push_back(merged);
  return st;
}

}  // namespace scaleinv
