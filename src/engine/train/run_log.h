#pragma once
// Per-step metrics of a run: metrics.jsonl (one JSON object per logged step) and metrics.sqlite
// (WAL; table `metrics`, and `run` with the summary). On resume both are cut back to the
// checkpoint's step so the files read as if the run had never stopped.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "brain/util/sqlite_db.h"

namespace scaleinv {

struct StepMetrics {
  int64_t step = 0;           // steps completed
  double loss = 0;
  double lr = 0;              // base LR times the schedule factor
  std::optional<double> val_loss;
  double elapsed_s = 0;
  double items_per_s = 0;     // tokens/s (language) or samples/s
};

// A run that fails before anything worth keeping (its first logged step, or a checkpoint: see
// keep) takes back what its log created: the files that were not there before and the
// directories it made, so a mistake found at the first batch (a batch that does not split over
// the ranks, data that does not fit the model, memory) leaves nothing behind.
class RunLog {
 public:
  // dir empty: keep nothing on disk (in-memory runs: tests, sweeps). Creates dir and its parents
  // (UserError naming train.out_dir where it cannot) and opens metrics.sqlite there.
  explicit RunLog(const std::string& dir);
  ~RunLog();  // removes what this log created unless keep() was called
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;
  void start(int64_t resume_step, const nlohmann::json& config);  // truncates past resume_step
  void log(const StepMetrics& m);                                   // calls keep()
  void finish(const nlohmann::json& summary);  // run.json (atomic) and the sqlite `run` table; calls keep()
  void keep() { kept_ = true; }                // the run has something to show: its files stay
  bool enabled() const { return !dir_.empty(); }

 private:
  std::string dir_;
  std::unique_ptr<SqliteDb> db_;
  std::string jsonl_path_;
  bool kept_ = false;
  std::vector<std::string> created_files_;  // the log's files that did not exist before it
  std::vector<std::string> created_dirs_;   // dir and the parents it had to create, innermost first
};

}  // namespace scaleinv
