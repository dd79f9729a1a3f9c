// The sweep results store (see sweep_store.h).
#include "brain/util/json_number.h"
#include "brain/sweep/sweep_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/sweep/user_space.h"
#include "brain/train/window_mean.h"

namespace scaleinv {

namespace {

const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS points (
  id TEXT PRIMARY KEY, sweep TEXT NOT NULL,
  param TEXT, width INTEGER, depth INTEGER, lr REAL, lr_log2 REAL, seed INTEGER,
  axes TEXT NOT NULL, config TEXT NOT NULL,
  final_loss REAL, final_val_loss REAL, min_loss REAL,
  diverged INTEGER NOT NULL, diverged_step INTEGER NOT NULL, steps_done INTEGER NOT NULL,
  wall_s REAL, items_per_s REAL, unigram_entropy REAL,
  curve TEXT NOT NULL, shard TEXT, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS points_by_axes ON points(param, width, depth, lr_log2, seed);
CREATE TABLE IF NOT EXISTS failures (id TEXT PRIMARY KEY, message TEXT NOT NULL, created_at TEXT NOT NULL);
)";

const char* kColumns =
    "id, sweep, param, width, depth, lr, lr_log2, seed, axes, config, final_loss, final_val_loss, min_loss, "
    "diverged, diverged_step, steps_done, wall_s, items_per_s, unigram_entropy, curve, shard, created_at";

SqlValue num(double v) { return std::isfinite(v) ? SqlValue(v) : SqlValue(nullptr); }

// At most 200 [step, loss] pairs, evenly spaced, first and last kept.
nlohmann::json curve_json(const std::vector<double>& losses) {
  nlohmann::json out = nlohmann::json::array();
  const size_t n = losses.size(), keep = 200;
  auto add = [&](size_t i) { out.push_back({static_cast<int64_t>(i + 1), json_number(losses[i])}); };
  if (n <= keep) {
    for (size_t i = 0; i < n; ++i) add(i);
  } else {
    for (size_t k = 0; k < keep; ++k) add(static_cast<size_t>(std::llround(static_cast<double>(k) * (n - 1) / (keep - 1))));
  }
  return out;
}

std::unique_ptr<SqliteDb> open_store(const std::string& path) {
  refuse_protected_input(path);  // a store over one of the command's inputs (its sweep file)
  ensure_parent_dir(path, "--out");
  try {
    auto db = std::make_unique<SqliteDb>(path);
    db->check_integrity();  // a damaged page is refused here, not discovered (or missed) mid-sweep
    db->exec(kSchema);
    return db;
  } catch (const std::runtime_error& e) {
    if (dynamic_cast<const UserError*>(&e)) throw;
    throw UserError(path, "", std::string("not a usable sweep database: ") + e.what(),
                    fmt::format("give another {} (a new file) or remove this one", input_name("--out")));
  }
}

std::optional<std::string> read_meta(SqliteDb& db, const std::string& key) {
  auto rows = db.query("SELECT value FROM meta WHERE key = ?", {key});
  if (rows.empty()) return std::nullopt;
  return sql_text(rows[0][0], db.path(), "meta." + key);
}

int64_t count_rows(SqliteDb& db) { return sql_int(db.query("SELECT COUNT(*) FROM points")[0][0], db.path(), "points"); }

}  // namespace

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

SweepStore::SweepStore(const std::string& path) : path_(path), db_(open_store(path)) {}

SweepStore::~SweepStore() = default;  // the writer lock (when held) removes its file and releases

void SweepStore::lock_for_writing() {
  if (const auto holder = lock_.try_acquire(path_ + ".lock", "--out"))
    throw UserError(path_, "--out",
                    fmt::format("another scaleinv sweep{} is running on this database",
                                holder->empty() ? "" : " (" + *holder + ")"),
                    fmt::format("wait for it to finish, or split the grid with {} into separate databases",
                                input_name("--shard i/N")));
}

int64_t SweepStore::count_points() { return count_rows(*db_); }

std::optional<std::string> SweepStore::meta(const std::string& key) { return read_meta(*db_, key); }

std::set<std::string> SweepStore::finished_ids() {
  std::set<std::string> ids;
  for (const auto& r : db_->query("SELECT id FROM points")) ids.insert(sql_text(r[0], path_, "points.id"));
  return ids;
}

void SweepStore::begin_sweep(const SweepSpec& spec, const Shard& shard, bool resume) {
  lock_for_writing();
  const int64_t n = count_points();
  const auto fp = meta("fingerprint");
  const std::string held = meta("name").value_or("?");
  if (!resume && n > 0)
    throw UserError(path_, "--out", fmt::format("already holds {} finished points of sweep '{}'", n, held),
                    fmt::format("add {} to continue that sweep, or give another {}", input_name("--resume"),
                                input_name("--out")));
  if (resume && n > 0 && fp && *fp != spec.fingerprint)
    throw UserError(path_, "--resume",
                    fmt::format("the database holds sweep '{}' with another grid (fingerprint {}, this file {}): "
                                "the grid, base config or window changed",
                                held, *fp, spec.fingerprint),
                    fmt::format("resume with the {} it was started with, or give another {}",
                                input_name("sweep file"), input_name("--out")));
  if (resume && n == 0 && meta("points_written").value_or("0") != "0")
    throw UserError(path_, "--resume",
                    fmt::format("the database recorded {} finished points but holds none (its -wal file was lost, "
                                "or it was replaced)", *meta("points_written")),
                    fmt::format("restore the database with its -wal file, or start over without {} under another {}",
                                input_name("--resume"), input_name("--out")));
  db_->begin();
  auto put = [&](const std::string& k, const std::string& v) {
    db_->run("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", {k, v});
  };
  put("schema", "1");
  put("name", spec.name);
  put("sweep_toml", spec.toml_text);
  put("sweep_path", spec.path);
  put("grid", spec.grid_json().dump());
  put("fingerprint", spec.fingerprint);
  put("window", fmt::format("{}", spec.window));
  put("ensemble", std::to_string(spec.ensemble));
  put("shard", shard.str());
  db_->commit();
}

void SweepStore::write_points(const SweepSpec& spec, const Shard& shard, const std::vector<const SweepPoint*>& points,
                              const std::vector<RunResult>& results, bool checkpoint) {
  const std::string now = utc_now();
  const std::string sql = fmt::format("INSERT OR REPLACE INTO points ({}) VALUES ({})", kColumns,
                                      "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?");
  db_->begin();
  try {
    for (size_t i = 0; i < points.size(); ++i) {
      const SweepPoint& p = *points[i];
      const RunResult& s = results[i];
      const PointCoords c = p.coords();
      double min_loss = std::nan("");
      for (double l : s.losses)
        if (std::isfinite(l) && !(l >= min_loss)) min_loss = l;
      const double final_loss = s.diverged ? std::nan("") : window_mean(s.losses, spec.window);
      const nlohmann::json cj = p.stored_config();
      db_->run(sql, {p.id, spec.name, c.param, static_cast<int64_t>(c.width), static_cast<int64_t>(c.depth),
                     c.lr, std::log2(c.lr), static_cast<int64_t>(c.seed),
                     (spec.user_model ? user_store_axes(p.axes) : p.axes).dump(), cj.dump(),
                     num(final_loss), num(s.final_val_loss), num(min_loss), static_cast<int64_t>(s.diverged ? 1 : 0),
                     static_cast<int64_t>(s.diverged ? s.diverged_step : -1), static_cast<int64_t>(s.steps_done),
                     num(s.wall_s), num(s.items_per_s), num(s.unigram_entropy), curve_json(s.losses).dump(),
                     shard.str(), now});
      if (!s.error.empty())
        db_->run("INSERT OR REPLACE INTO failures(id, message, created_at) VALUES (?, ?, ?)", {p.id, s.error, now});
    }
    db_->exec("INSERT OR REPLACE INTO meta(key, value) SELECT 'points_written', COUNT(*) FROM points");
  } catch (...) {
    db_->exec("ROLLBACK");
    throw;
  }
  db_->commit();
  if (checkpoint) db_->checkpoint_wal();  // the finished points now live in the database file itself
}

std::string sweep_db_fingerprint(const std::string& path) {
  std::optional<std::string> f;
  {  // read-only: the file is never written, converted to WAL or given -wal/-shm files
    SqliteDb db(path, SqliteDb::Mode::ReadOnly);
    db.check_integrity();
    if (db.has_table("meta") && db.has_table("points")) f = read_meta(db, "fingerprint");
  }
  if (!f) throw UserError(path, "meta.fingerprint", "not a sweep database", "give a database written by scaleinv sweep");
  return *f;
}

MergeSummary merge_sweep_dbs(const std::string& out, const std::vector<std::string>& inputs) {
  if (inputs.empty())
    throw UserError("command line", "sweep merge", "no input databases", "write scaleinv sweep merge OUT.db IN1.db IN2.db ...");
  std::string fp;
  for (const auto& in : inputs) {
    if (!std::filesystem::exists(in))
      throw UserError(in, "", "no such database", "give the shard databases written by scaleinv sweep --shard");
    refuse_same_file(in, out, "sweep merge");
    const std::string f = sweep_db_fingerprint(in);
    if (fp.empty()) fp = f;
    else if (f != fp)
      throw UserError(in, "meta.fingerprint",
                      fmt::format("belongs to another sweep or grid (fingerprint {}, first input {})", f, fp),
                      "merge only the shards of one sweep file");
  }
  SweepStore dst(out);
  if (auto f = dst.meta("fingerprint"); f && *f != fp && dst.count_points() > 0)
    throw UserError(out, "meta.fingerprint", "already holds another sweep", "give a new OUT.db");
  MergeSummary m;
  const int64_t before = dst.count_points();
  bool meta_copied = false;
  for (const auto& in : inputs) {
    dst.db().run("ATTACH DATABASE ? AS src", {in});
    try {
      dst.db().begin();
      m.rows_read += std::get<int64_t>(dst.db().query("SELECT COUNT(*) FROM src.points")[0][0]);
      dst.db().exec(fmt::format("INSERT OR IGNORE INTO main.points ({0}) SELECT {0} FROM src.points", kColumns));
      if (dst.db().query("SELECT name FROM src.sqlite_master WHERE type = 'table' AND name = 'failures'").size() == 1)
        dst.db().exec("INSERT OR IGNORE INTO main.failures SELECT id, message, created_at FROM src.failures");
      if (!meta_copied) {
        dst.db().exec("INSERT OR REPLACE INTO main.meta(key, value) SELECT key, value FROM src.meta");
        meta_copied = true;
      }
      dst.db().commit();
    } catch (...) {
      try {
        dst.db().exec("ROLLBACK");
      } catch (...) {
      }
      dst.db().exec("DETACH DATABASE src");
      throw;
    }
    dst.db().exec("DETACH DATABASE src");
  }
  dst.db().run("INSERT OR REPLACE INTO meta(key, value) VALUES ('shard', ?)",
               {fmt::format("merged from {} databases", inputs.size())});
  m.total = dst.count_points();
  m.rows_added = m.total - before;
  return m;
}

}  // namespace scaleinv
