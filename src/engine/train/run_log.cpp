#include "engine/train/run_log.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "brain/util/atomic_file.h"

namespace scaleinv {

RunLog::RunLog(const std::string& dir) : dir_(dir) {
  if (dir_.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::path d = fs::absolute(dir_, ec); !d.empty() && !fs::exists(d, ec); d = d.parent_path()) {
    created_dirs_.push_back(d.string());
    if (d == d.parent_path()) break;
  }
  for (const char* f : {"metrics.jsonl", "metrics.sqlite", "metrics.sqlite-wal", "metrics.sqlite-shm", "config.json"})
    if (!fs::exists(dir_ + "/" + f, ec)) created_files_.push_back(dir_ + "/" + f);
  jsonl_path_ = dir_ + "/metrics.jsonl";
  ensure_parent_dir(jsonl_path_, "train.out_dir");
  db_ = std::make_unique<SqliteDb>(dir_ + "/metrics.sqlite");
  db_->exec(
      "CREATE TABLE IF NOT EXISTS metrics (step INTEGER PRIMARY KEY, loss REAL, lr REAL, val_loss REAL,"
      " elapsed_s REAL, items_per_s REAL);"
      "CREATE TABLE IF NOT EXISTS run (key TEXT PRIMARY KEY, value TEXT);");
}

RunLog::~RunLog() {
  if (!enabled() || kept_) return;
  db_.reset();  // closed (its WAL checkpointed away) before its files go
  std::error_code ec;  // best effort: a file someone else removed or a directory they filled stays as it is
  for (const std::string& f : created_files_) std::filesystem::remove(f, ec);
  for (const std::string& d : created_dirs_) std::filesystem::remove(d, ec);  // only while empty
}

void RunLog::start(int64_t resume_step, const nlohmann::json& config) {
  if (!enabled()) return;
  // Keep the lines of steps <= resume_step, drop the rest (work after the checkpoint is redone).
  std::string kept;
  if (std::ifstream in(jsonl_path_); in) {
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("step", int64_t{0}) <= resume_step) kept += line + "\n";
    }
  }
  write_file_atomic(jsonl_path_, kept);
  db_->run("DELETE FROM metrics WHERE step > ?", {resume_step});
  db_->run("INSERT OR REPLACE INTO run(key, value) VALUES ('config', ?)", {config.dump()});
  write_file_atomic(dir_ + "/config.json", config.dump(2) + "\n");
}

void RunLog::log(const StepMetrics& m) {
  if (!enabled()) return;
  keep();
  nlohmann::json j = {{"step", m.step}, {"loss", m.loss}, {"lr", m.lr}, {"elapsed_s", m.elapsed_s},
                      {"items_per_s", m.items_per_s}};
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  std::ofstream(jsonl_path_, std::ios::app) << j.dump() << "\n";
  db_->run("INSERT OR REPLACE INTO metrics(step, loss, lr, val_loss, elapsed_s, items_per_s) VALUES (?,?,?,?,?,?)",
           {m.step, m.loss, m.lr, m.val_loss ? SqlValue(*m.val_loss) : SqlValue(nullptr), m.elapsed_s,
            m.items_per_s});
}

void RunLog::finish(const nlohmann::json& summary) {
  if (!enabled()) return;
  keep();
  write_file_atomic(dir_ + "/run.json", summary.dump(2) + "\n");
  db_->run("INSERT OR REPLACE INTO run(key, value) VALUES ('summary', ?)", {summary.dump()});
}

}  // namespace scaleinv
