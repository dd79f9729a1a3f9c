// `scaleinv predict --db FILE [--db FILE ...] (--at AXIS=VALUE[,AXIS=VALUE...] | --holdout)
//                  [--fit-upto V] [--param NAME] [--hparam KEY] [--max-extrapolation D] [--bootstrap N] [--json FILE]`
// The optimal LR (or, with --hparam, another swept hyperparameter's optimum) at a scale not trained, with its 90% interval, from one or more sweep stores
// (brain/report/predict.h says how it is fitted and when it is declined); --holdout fits every group on
// all values but the largest and reports the error and regret there. Prints markdown tables;
// --json writes the same as JSON (atomically). UserError (exit 2) for bad input.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/report/joint_law.h"
#include "brain/report/predict.h"

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

// "N,D" -> {"N", "D"}.
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// --fit-upto: a number (one-axis holdout) or AXIS=VALUE[,...] (a joint law's holdout).
void parse_fit_upto(const std::string& text, bool joint, double& value, std::map<std::string, double>& by_axis) {
  if (text.empty()) return;
  if (text.find('=') != std::string::npos) {
    if (!joint)
      throw UserError("command line", "--fit-upto", "'" + text + "' names an axis: that is a joint law's holdout",
                      "give --joint AXES too, or a plain number (e.g. --fit-upto 512)");
    by_axis = parse_targets({text});
    return;
  }
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0')
    throw UserError("command line", "--fit-upto", "'" + text + "' is not a number", "e.g. --fit-upto 512");
  if (joint)
    throw UserError("command line", "--fit-upto", "a joint law's holdout names its axis", "e.g. --fit-upto N=5.4e8");
}

struct JointArgs {
  std::string axes, retune, reference, reference_name = "reference law";
  bool loso = false;
};

// `predict --joint`: the law in several axes at once (brain/report/joint_law.h).
void run_joint(const std::vector<std::string>& dbs, const JointLawOptions& jo, const JointArgs& ja, const std::string& json) {
  const SweepTable t = read_sweep_rows(dbs);
  JointLawResult r = fit_joint_law(t, jo);
  if (ja.loso) {
    const Coverage c = loso_coverage(t, jo);
    const std::string axis = r.fits.empty() ? std::string("?") : r.fits[0].axes[0];
    r.notes.push_back(c.read == 0
                          ? fmt::format("Leave-one-scale-out over {}: no scale to read (it needs a value of {} with cells "
                                        "enough below it to fit the law).",
                                        t.db, axis)
                          : fmt::format("Leave-one-scale-out over {} (each value of {} above its two smallest read from the "
                                        "cells below it): {} of {} measured optima inside the {:.0f}% interval ({:.0f}%), "
                                        "mean |error| {:.2f} doublings.",
                                        t.db, axis, c.covered, c.read, jo.level * 100, 100.0 * c.covered / c.read,
                                        c.mean_abs_error));
  }
  std::fputs(joint_law_markdown(r).c_str(), stdout);
  std::printf("\n%s: %zu points\n", t.db.c_str(), t.rows.size());
  if (!json.empty()) {
    write_file_atomic(json, joint_law_to_json(r).dump(2) + "\n");
    std::printf("wrote %s\n", json.c_str());
  }
}

}  // namespace

void add_predict_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::vector<std::string> dbs, at;
    bool holdout = false;
    std::string param, hparam, json, fit_upto;
    double max_extrapolation = 3, near_optimal = 0;
    int bootstrap = 200;
    JointArgs joint;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("predict",
                                 "Predict the optimal LR at a larger scale from sweep stores, with a 90% interval "
                                 "(power law per axis; --holdout checks it on the largest scale measured)");
  reads(cmd->add_option("--db", o->dbs, "sweep database (scaleinv sweep --out); repeat to read several as one")->required());
  cmd->add_option("--at", o->at, "target scale, AXIS=VALUE[,AXIS=VALUE] (width, depth, batch, steps or a grid key)");
  cmd->add_flag("--holdout", o->holdout, "fit on all values but the largest of each axis and check the prediction there");
  cmd->add_option("--fit-upto", o->fit_upto,
                  "with --holdout: fit on the values up to this one, check each larger one (with --joint: AXIS=VALUE, "
                  "e.g. N=5.4e8: the cells at or below it fitted, the others held out)");
  cmd->add_option("--joint", o->joint.axes,
                  "AXES: fit one law in several axes at once, log2 h* = a + sum b_i log2 x_i (e.g. N,D); the "
                  "one-axis law is its special case");
  cmd->add_option("--retune", o->joint.retune, "with --joint: KEYS re-tuned at every cell besides the LR (e.g. train.batch_size)");
  cmd->add_option("--reference-law", o->joint.reference,
                  "with --joint: a published law to compare, c=C,AXIS=EXPONENT,... (h = C prod x^e, e.g. Step Law's "
                  "c=1.79,N=-0.713,D=0.307)");
  cmd->add_option("--reference-name", o->joint.reference_name, "with --joint: the reference law's name in the tables");
  cmd->add_flag("--loso", o->joint.loso, "with --joint: also measure the interval's coverage, leaving one scale out at a time");
  reads(cmd->add_option("--param", o->param, "only this parameterization (default: every one in the store)"));
  cmd->add_option("--hparam", o->hparam,
                  "predict this swept hyperparameter's optimum (a grid key such as hp.branch_mult; the LR re-tuned at "
                  "each of its values) instead of the LR's; all: the LR and every swept hyperparameter");
  cmd->add_option("--max-extrapolation", o->max_extrapolation,
                  "doublings past the fitted values at most (default 3; never more than the fitted span)");
  cmd->add_option("--near-optimal", o->near_optimal,
                  "PCT: each optimum is the centre of the LRs within PCT% of the best loss (default 0: the parabola vertex; "
                  "with --joint every run within PCT% is fitted, default 0.25; 0: each cell's best run)");
  cmd->add_option("--bootstrap", o->bootstrap, "bootstrap resamples over seeds (default 200)");
  writes(cmd->add_option("--json", o->json, "also write the predictions as JSON to FILE"));
  cmd->callback([o, cmd, &exit_code] {
    check_bootstrap(o->bootstrap, "command line", "--bootstrap", "--bootstrap 200");
    PredictOptions popts;
    popts.at = parse_targets(o->at);
    popts.holdout = o->holdout;
    std::map<std::string, double> upto;
    parse_fit_upto(o->fit_upto, !o->joint.axes.empty(), popts.fit_upto, upto);
    if (!o->joint.axes.empty()) {
      JointLawOptions jo;
      jo.axes = split_list(o->joint.axes);
      jo.hparam = o->hparam.empty() ? "lr" : o->hparam;
      jo.retune = split_list(o->joint.retune);
      jo.at = popts.at;
      if (o->holdout && upto.empty())
        throw UserError("command line", "--fit-upto", "a joint law's holdout needs the cells to fit", "e.g. --holdout --fit-upto N=5.4e8");
      jo.holdout_upto = upto;
      if (!o->joint.reference.empty()) jo.reference = parse_targets({o->joint.reference});
      jo.reference_name = o->joint.reference_name;
      jo.loso = o->joint.loso;
      jo.param = o->param;
      // Every near-optimal run (0.25%, Step Law's tolerance) by default: over the stores held out in
      // docs/predict.md it beat each cell's argmin (mean |error| 0.34 against 0.39 doublings).
      jo.near_optimal_pct = cmd->count("--near-optimal") ? o->near_optimal : kJointNearOptimalPct;
      jo.max_extrapolation = o->max_extrapolation;
      jo.bootstrap = o->bootstrap;
      run_joint(o->dbs, jo, o->joint, o->json);
      exit_code = 0;
      return;
    }
    for (const char* flag : {"--retune", "--reference-law", "--loso"})
      if (cmd->count(flag))
        throw UserError("command line", flag, "applies to a joint law only", "give --joint AXES too, or leave it out");
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
