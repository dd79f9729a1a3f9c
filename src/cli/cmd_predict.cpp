// `scaleinv predict --db FILE [--db FILE ...] (--at AXIS=VALUE[,AXIS=VALUE...] | --holdout)
//                  [--fit-upto V] [--param NAME] [--hparam KEY] [--max-extrapolation D] [--bootstrap N] [--json FILE]`
// The optimal LR (or, with --hparam, another swept hyperparameter's optimum) at a scale not trained, with its 90% interval, from one or more sweep stores
// (report/predict.h says how it is fitted and when it is declined); --holdout fits every group on
// all values but the largest and reports the error and regret there. Prints markdown tables;
// --json writes the same as JSON (atomically). UserError (exit 2) for bad input.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "core/atomic_file.h"
#include "core/errors.h"
#include "report/predict.h"

namespace scaleinv {

namespace {

// "width=2048,depth=48" (also repeated --at) -> axis -> value.
std::map<std::string, double> parse_targets(const std::vector<std::string>& items) {
  std::map<std::string, double> at;
  for (const std::string& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      const size_t comma = item.find(',', start);
      const std::string kv = item.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size())
        throw UserError("command line", "--at", "'" + kv + "' is not AXIS=VALUE", "e.g. --at width=2048,depth=48");
      const std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
      char* end = nullptr;
      const double v = std::strtod(val.c_str(), &end);
      if (end == val.c_str() || *end != '\0')
        throw UserError("command line", "--at", "'" + val + "' (for " + key + ") is not a number", "e.g. --at width=2048");
      if (at.count(key)) throw UserError("command line", "--at", key + " is given twice", "name each axis once");
      at[key] = v;
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return at;
}

}  // namespace

void add_predict_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::vector<std::string> dbs, at;
    bool holdout = false;
    std::string param, hparam, json;
    double max_extrapolation = 3, fit_upto = 0, near_optimal = 0;
    int bootstrap = 200;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("predict",
                                 "Predict the optimal LR at a larger scale from sweep stores, with a 90% interval "
                                 "(power law per axis; --holdout checks it on the largest scale measured)");
  reads(cmd->add_option("--db", o->dbs, "sweep database (scaleinv sweep --out); repeat to read several as one")->required());
  cmd->add_option("--at", o->at, "target scale, AXIS=VALUE[,AXIS=VALUE] (width, depth, batch, steps or a grid key)");
  cmd->add_flag("--holdout", o->holdout, "fit on all values but the largest of each axis and check the prediction there");
  cmd->add_option("--fit-upto", o->fit_upto, "with --holdout: fit on the values up to this one, check each larger one");
  reads(cmd->add_option("--param", o->param, "only this parameterization (default: every one in the store)"));
  cmd->add_option("--hparam", o->hparam,
                  "predict this swept hyperparameter's optimum (a grid key such as hp.branch_mult; the LR re-tuned at "
                  "each of its values) instead of the LR's; all: the LR and every swept hyperparameter");
  cmd->add_option("--max-extrapolation", o->max_extrapolation,
                  "doublings past the fitted values at most (default 3; never more than the fitted span)");
  cmd->add_option("--near-optimal", o->near_optimal,
                  "PCT: each optimum is the centre of the LRs within PCT% of the best loss (default 0: the parabola vertex)");
  cmd->add_option("--bootstrap", o->bootstrap, "bootstrap resamples over seeds (default 200)");
  writes(cmd->add_option("--json", o->json, "also write the predictions as JSON to FILE"));
  cmd->callback([o, &exit_code] {
    check_bootstrap(o->bootstrap, "command line", "--bootstrap", "--bootstrap 200");
    PredictOptions popts;
    popts.at = parse_targets(o->at);
    popts.holdout = o->holdout;
    popts.fit_upto = o->fit_upto;
    popts.param = o->param;
    popts.hparam = o->hparam;
    popts.max_extrapolation = o->max_extrapolation;
    popts.transfer.bootstrap = o->bootstrap;
    popts.near_optimal_pct = o->near_optimal;
    check_predict_request(popts);  // before the stores are read
    const SweepTable t = read_sweep_rows(o->dbs);
    const std::vector<Prediction> preds = predict(t, popts);
    std::fputs(predict_markdown(preds, popts).c_str(), stdout);
    std::printf("\n%s: %zu points\n", t.db.c_str(), t.rows.size());
    if (!o->json.empty()) {
      write_file_atomic(o->json, predict_to_json(preds, popts).dump(2) + "\n");
      std::printf("wrote %s\n", o->json.c_str());
    }
    exit_code = 0;
  });
}

}  // namespace scaleinv
