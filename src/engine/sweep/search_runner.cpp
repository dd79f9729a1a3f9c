// Running a hyperparameter search of the zoo's models (see search_runner.h).
#include "engine/sweep/search_runner.h"

namespace scaleinv {

SearchRunSummary run_search(const SweepSpec& spec, const SweepRunOptions& opts) {
  return run_search_rungs(spec, opts.db_path, opts.shard, opts.resume,
                          [&](const SweepSpec& rung, bool resume, const std::string& label) {
                            SweepRunOptions o = opts;
                            o.resume = resume;
                            if (!label.empty()) o.bar_label = label;
                            return run_sweep(rung, o);
                          });
}

}  // namespace scaleinv
