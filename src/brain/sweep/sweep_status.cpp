// What a sweep's stores hold right now (see sweep_status.h).
#include "brain/sweep/sweep_status.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "brain/util/errors.h"
#include "brain/util/sqlite_db.h"

namespace scaleinv {

StoreCounts read_store_counts(const std::string& path) {
  StoreCounts c;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return c;
  c.exists = true;
  if (std::filesystem::file_size(path, ec) == 0 || ec) return c;  // a store its writer is creating
  SqliteDb db(path, SqliteDb::Mode::ReadOnly);
  if (!db.has_table("points")) return c;
  for (const auto& r : db.query("SELECT id, diverged FROM points")) {
    const std::string id = sql_text(r[0], path, "points.id");
    c.ids.insert(id);
    if (std::holds_alternative<int64_t>(r[1]) && std::get<int64_t>(r[1]) != 0) c.diverged.insert(id);
  }
  if (db.has_table("failures"))
    for (const auto& r : db.query("SELECT id FROM failures")) c.failed.insert(sql_text(r[0], path, "failures.id"));
  return c;
}

SweepStatus store_status(const std::string& db_path) {
  if (!std::filesystem::exists(db_path))
    throw UserError(db_path, "--db", "no such database",
                    "give the store a sweep writes (--out, or [sweep] db), or the one `sweep submit` printed");
  SweepStatus s;
  s.db = db_path;
  SqliteDb db(db_path, SqliteDb::Mode::ReadOnly);
  if (!db.has_table("meta") || !db.has_table("points"))
    throw UserError(db_path, "--db", "is not a sweep database (no meta and points tables)",
                    "give the store a sweep writes");
  for (const auto& r : db.query("SELECT key, value FROM meta")) {
    const std::string k = sql_text(r[0], db_path, "meta.key");
    if (k == "name") s.name = sql_text(r[1], db_path, "meta.value");
    if (k == "grid") {
      const auto g = nlohmann::json::parse(sql_text(r[1], db_path, "meta.value"), nullptr, false);
      if (g.is_object() && g.contains("points") && g["points"].is_number_integer()) s.expected = g["points"].get<int64_t>();
    }
  }
  const StoreCounts c = read_store_counts(db_path);
  s.done = static_cast<int64_t>(c.ids.size());
  s.diverged = static_cast<int64_t>(c.diverged.size());
  s.failed = static_cast<int64_t>(c.failed.size());
  return s;
}

std::string render_status(const SweepStatus& s) {
  std::string out = "sweep status\n";
  auto row = [&](const std::string& k, const std::string& v) { out += fmt::format("  {:<16} {}\n", k, v); };
  if (!s.name.empty()) row("sweep", s.name);
  row("store", s.db);
  row("points done", s.expected >= 0 ? fmt::format("{} of {}", s.done, s.expected) : fmt::format("{}", s.done));
  row("diverged", fmt::format("{}", s.diverged));
  row("failed", fmt::format("{}", s.failed));
  if (s.running || s.pending) row("tasks", fmt::format("{} running, {} pending", s.running, s.pending));
  if (!s.rows.empty()) {
    out += fmt::format("\n  {:<22} {:>8} {:>8} {:>9} {:>7}  {}\n", "store", "done", "of", "diverged", "failed", "state");
    for (const StatusRow& r : s.rows)
      out += fmt::format("  {:<22} {:>8} {:>8} {:>9} {:>7}  {}\n", r.what, r.done,
                         r.expected >= 0 ? fmt::format("{}", r.expected) : "?", r.diverged, r.failed, r.state);
  }
  if (s.expected >= 0 && s.done < s.expected)
    row("missing", fmt::format("{} point{}", s.expected - s.done, s.expected - s.done == 1 ? "" : "s"));
  for (const std::string& n : s.notes) out += "  note: " + n + "\n";
  return out;
}

}  // namespace scaleinv
