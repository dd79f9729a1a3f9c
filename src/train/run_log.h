#pragma once
// Per-step metrics of a run: metrics.jsonl (one JSON object per logged step) and metrics.sqlite
// (WAL; table `metrics`, and `run` with the summary). On resume both are cut back to the
// checkpoint's step so the files read as if the run had never stopped.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/sqlite_db.h"

namespace scaleinv {

struct StepMetrics {
  int64_t step = 0;           // steps completed
  double loss = 0;
  double lr = 0;              // base LR times the schedule factor
  std::optional<double> val_loss;
  double elapsed_s = 0;
  double items_per_s = 0;     // tokens/s (language) or samples/s
};

class RunLog {
 public:
  // dir empty: keep nothing on disk (in-memory runs: tests, sweeps).
  explicit RunLog(const std::string& dir);
  void start(int64_t resume_step, const nlohmann::json& config);  // truncates past resume_step
  void log(const StepMetrics& m);
  void finish(const nlohmann::json& summary);  // run.json (atomic) and the sqlite `run` table
  bool enabled() const { return !dir_.empty(); }

 private:
  std::string dir_;
  std::unique_ptr<SqliteDb> db_;
  std::string jsonl_path_;
};

}  // namespace scaleinv
