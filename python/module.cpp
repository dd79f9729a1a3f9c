// _scaleinv: the Python module's C++ half (issue 15). A thin layer: functions take and return JSON
// text (the same JSON the CLI writes) or, for a user model's sweep, Python values (UserSweep), so no
// torch types cross it and the module works with any installed PyTorch. python/scaleinv/ is the Python half (apply, coordcheck, table, theory,
// predict, report).
// A UserError (a bad input the user can fix) surfaces as scaleinv.UserError, a ValueError whose
// message is the CLI's one line naming the field and the fix.
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <fmt/format.h>

#include "brain/adapt/own_model.h"
#include "brain/util/errors.h"
#include "brain/util/json_number.h"
#include "brain/coordcheck/coord_result.h"
#include "brain/optim/optimizer_kinds.h"
#include "brain/param/table.h"
#include "brain/report/joint_law.h"
#include "brain/report/predict.h"
#include "brain/report/transfer.h"
#include "brain/sweep/import_results.h"
#include "brain/sweep/shard.h"
#include "brain/sweep/slurm.h"
#include "brain/sweep/sweep_summary.h"
#include "brain/sweep/user_sweep.h"
#include "brain/theory/depth_theory.h"
#include "brain/theory/theory_report.h"
#include "brain/theory/width_theory.h"

namespace py = pybind11;
using nlohmann::json;

namespace scaleinv {
namespace {

OptFamily theory_family(const std::string& optimizer) {
  return optimizer_kind(optimizer, "theory", "optimizer").family;
}

// The optimizer kinds' rows (brain/optim/optimizer_kinds.h) as JSON: python/scaleinv/_apply.py reads its
// traits from them instead of comparing names.
std::string optimizer_kinds_json() {
  json rows = json::array();
  for (const OptimizerKind& k : optimizer_kind_rows())
    rows.push_back({{"kind", k.kind}, {"summary", k.summary}, {"family", family_name(k.family)},
                    {"decay", decay_mode_name(k.decay)}, {"eps", eps_mode_name(k.eps)}, {"default_eps", k.default_eps},
                    {"ensemble", k.ensemble}, {"own_model_refusal", k.own_model_refusal}, {"fields", k.fields},
                    {"python_class", k.python_class}});
  return rows.dump();
}

MuonScale parse_scale(const std::string& s) {
  MuonScale ms;
  if (!parse_muon_scale(s, &ms)) throw UserError("theory", "muon_scale", "unknown rule '" + s + "'", "use spectral or rms");
  return ms;
}

// A preset or table file named by a keyword argument: load_param's refusal names `param`, not the
// CLI's --param (brain/util/errors.h InputNames).
ParamTable load_param_py(const std::string& name) {
  const InputNames names("python", {{"--param", "param"}});
  return load_param(name);
}

std::string table_json(const std::string& name) { return param_to_json(load_param_py(name)).dump(); }

py::tuple theory(const std::string& param, const std::string& optimizer, int depth, const std::string& muon_scale,
                 bool rmsnorm) {
  if (depth < 1 || depth > 10000)
    throw UserError("theory", "depth", "L = " + std::to_string(depth), "give from 1 to 10000 hidden layers");
  const ParamTable t = load_param_py(param);
  const OptFamily f = theory_family(optimizer);
  const WidthTheory w = width_theory(t, f, depth, {}, rmsnorm, parse_scale(muon_scale));
  const DepthTheory d = depth_theory(t, f);
  return py::make_tuple(theory_json(w, d).dump(), theory_table(w, d));
}

std::string plan(const std::string& param, const std::string& optimizer, double weight_decay,
                 const std::string& spec_json) {
  const OwnModelSpec spec = own_spec_from_json(json::parse(spec_json));
  return own_plan_to_json(plan_own_model(load_param_py(param), optimizer, weight_decay, spec)).dump();
}

double num(const json& v) {
  return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
}

CoordQuantity quantity(const std::string& name) {
  for (int q = 0; q < kNumCoordQuantities; ++q)
    if (name == coord_quantity_name(static_cast<CoordQuantity>(q))) return static_cast<CoordQuantity>(q);
  throw UserError("coordcheck", "quantity", "unknown quantity '" + name + "'", "use h, dh, h', W', dW, ||W||, ||dW||");
}

// Input: {"param", "optimizer", "muon_scale", "model", "seeds", "steps", "n_probe", "n_out",
// "layers": [{"name", "weight", "role" (or null), "in_block"}], "runs": [{"width", "seed", "loss",
// "diverged", "series": [{"quantity", "layer", "rms" (null: undefined), "shape"}]}], "plot" (dir
// or "")}. Output: (the CLI's coordcheck JSON, its printed table, the plot stems written).
py::tuple judge_coordcheck(const std::string& input_json) {
  const json j = json::parse(input_json);
  OwnCoordInput in;
  // The table the model was trained under: the shifted row apply() used (a' = 0, seed 000 eq. 28),
  // whose weight-side exponents (W', dW, ||W||) are those of the stored tensors; else a name.
  const bool shifted = j.contains("table") && j.at("table").is_object();
  in.table = shifted ? param_from_json(j.at("table")) : load_param_py(j.at("param").get<std::string>());
  in.optimizer = j.value("optimizer", std::string("adamw"));
  in.muon_scale = parse_scale(j.value("muon_scale", std::string("spectral")));
  in.model = j.value("model", std::string("own model"));
  in.seeds = j.at("seeds").get<std::vector<int64_t>>();
  in.steps = j.at("steps").get<int>();
  in.n_probe = j.at("n_probe").get<int64_t>();
  in.n_out = j.at("n_out").get<int64_t>();
  for (const json& l : j.at("layers")) {
    OwnCoordLayer layer;
    layer.name = l.at("name").get<std::string>();
    layer.weight = l.at("weight").get<bool>();
    layer.in_block = l.value("in_block", false);
    layer.tied = l.value("tied", false);
    if (l.contains("role") && !l.at("role").is_null()) {
      Role r;
      const std::string rn = l.at("role").get<std::string>();
      if (!parse_role(rn, &r)) throw UserError("coordcheck", layer.name, "unknown role '" + rn + "'", "use a table role");
      layer.role = r;
    }
    in.layers.push_back(std::move(layer));
  }
  for (const json& r : j.at("runs")) {
    CoordRun run;
    run.width = r.at("width").get<int>();
    run.depth = 1;
    run.seed = r.at("seed").get<int64_t>();
    run.diverged = r.value("diverged", false);
    for (const json& v : r.at("loss")) run.loss.push_back(num(v));
    for (const json& s : r.at("series")) {
      CoordSeries se;
      se.q = quantity(s.at("quantity").get<std::string>());
      se.layer = s.at("layer").get<std::string>();
      for (const json& v : s.at("rms")) se.rms.push_back(num(v));
      if (s.contains("shape")) se.shape = s.at("shape").get<std::vector<int64_t>>();
      run.series.push_back(std::move(se));
    }
    in.runs.push_back(std::move(run));
  }
  CoordCheckResult res = judge_own_coordcheck(in);
  if (shifted)
    res.theory_note += "; judged against " + in.table.name +
                       " shifted to a' = 0 (seed 000 eq. 28), the row apply() trained with";
  std::vector<std::string> stems;
  const std::string plot = j.value("plot", std::string());
  if (!plot.empty()) stems = plot_coordcheck(res, plot);
  return py::make_tuple(coordcheck_to_json(res).dump(), render_coordcheck(res), stems);
}

// How scaleinv.predict and scaleinv.report name the inputs the library spells as predict's and
// transfer-report's flags (brain/util/errors.h's InputNames): each flag is its keyword argument, and a
// fix's example is written as the call takes it.
std::map<std::string, std::string> report_input_names() {
  return {{"--db", "db"},
          {"--at", "at"},
          {"--holdout", "holdout=True"},
          {"--fit-upto", "fit_upto"},
          {"--param", "param"},
          {"--hparam", "hparam"},
          {"--max-extrapolation", "max_extrapolation"},
          {"--near-optimal", "near_optimal"},
          {"--bootstrap", "bootstrap"},
          {"--at width=2048", "at={'width': 2048}"},
          {"--at width=2048 (axis=value, ...)", "at={'width': 2048} (axis: value, ...)"},
          {"--near-optimal 0.25", "near_optimal=0.25"},
          {"--holdout --fit-upto 512", "holdout=True, fit_upto=512"},
          {"--bootstrap 200", "bootstrap=200"}};
}

// (predictions JSON, printed tables) of `scaleinv predict` (brain/report/predict.h).
py::tuple predict_py(const std::vector<std::string>& dbs, const std::map<std::string, double>& at, bool holdout,
                     double fit_upto, const std::string& param, double max_extrapolation, int64_t bootstrap,
                     double near_optimal, const std::string& hparam) {
  const InputNames names("scaleinv.predict", report_input_names());
  check_bootstrap(bootstrap, "command line", "--bootstrap", input_name("--bootstrap 200"));
  PredictOptions o;
  o.at = at;
  o.holdout = holdout;
  o.fit_upto = fit_upto;
  o.param = param;
  o.max_extrapolation = max_extrapolation;
  o.transfer.bootstrap = static_cast<int>(bootstrap);
  o.near_optimal_pct = near_optimal;
  o.hparam = hparam;
  check_predict_request(o);
  const std::vector<Prediction> preds = predict(read_sweep_rows(dbs), o);
  return py::make_tuple(predict_to_json(preds, o).dump(), predict_markdown(preds, o));
}

// (law JSON, printed tables) of `scaleinv predict --joint` (brain/report/joint_law.h).
py::tuple predict_joint_py(const std::vector<std::string>& dbs, const std::vector<std::string>& axes,
                           const std::map<std::string, double>& at, const std::map<std::string, double>& fit_upto,
                           const std::string& param, const std::string& hparam, double near_optimal, double max_extrapolation,
                           int64_t bootstrap, const std::vector<std::string>& retune,
                           const std::map<std::string, double>& reference, const std::string& reference_name, bool loso) {
  auto names = report_input_names();
  names.insert({{"--joint", "joint"}, {"--retune", "retune"}, {"--reference-law", "reference_law"}, {"--loso", "loso"},
                {"--joint N,D", "joint=['N', 'D']"}, {"--at N=...,D=...", "at={'N': ..., 'D': ...}"},
                {"--holdout --fit-upto N=5.4e8", "holdout=True, fit_upto={'N': 5.4e8}"},
                {"--reference-law c=1.79,N=-0.713,D=0.307", "reference_law={'c': 1.79, 'N': -0.713, 'D': 0.307}"}});
  const InputNames in("scaleinv.predict", names);
  check_bootstrap(bootstrap, "command line", "--bootstrap", input_name("--bootstrap 200"));
  JointLawOptions o;
  o.axes = axes;
  o.at = at;
  o.holdout_upto = fit_upto;
  o.param = param;
  o.hparam = hparam.empty() ? "lr" : hparam;
  o.near_optimal_pct = near_optimal;
  o.max_extrapolation = max_extrapolation;
  o.bootstrap = static_cast<int>(bootstrap);
  o.retune = retune;
  o.reference = reference;
  o.reference_name = reference_name;
  const SweepTable t = read_sweep_rows(dbs);
  JointLawResult r = fit_joint_law(t, o);
  nlohmann::json j = joint_law_to_json(r);
  if (loso) {
    const Coverage c = loso_coverage(t, o);
    j["loso"] = {{"covered", c.covered}, {"read", c.read}, {"mean_abs_error", json_number(c.mean_abs_error)}};
  }
  return py::make_tuple(j.dump(), joint_law_markdown(r));
}

// transfer-report's analysis as JSON (brain/report/transfer.h), the tables as markdown.
std::string report_py(const std::vector<std::string>& dbs, int64_t bootstrap) {
  const InputNames names("scaleinv.report", report_input_names());
  check_bootstrap(bootstrap, "command line", "--bootstrap", input_name("--bootstrap 200"));
  TransferOptions o;
  o.bootstrap = static_cast<int>(bootstrap);
  return transfer_to_json(analyze_transfer(read_sweep_rows(dbs), o)).dump();
}

// The sweep bindings' callers name the CLI's flags by their keyword arguments (brain/util/errors.h).
InputNames sweep_input_names(const std::string& caller) {
  return InputNames(caller, {{"--out", "db"},
                             {"--param", "param"},
                             {"--db", "db"},
                             {"--config", "space"},
                             {"sweep file", "space"},
                             {"--resume", "resume=True"},
                             {"sweep --resume", "resume=True"},
                             {"--shard", "shard"},
                             {"--shard i/N", "shard=(i, n)"},
                             {"--shard 0/4", "shard=(0, 4)"},
                             {"--shard 3/4", "shard=(3, 4)"},
                             {"run it unsharded (--jobs spreads it over the cores)", "run it unsharded"}});
}

// Python values <-> JSON values, for what crosses the binding as structure (a space, a point's
// values, a result), not as text: dicts (keys as str() gives them, as json.dumps did), lists and
// tuples, str, bool, int, float and None. A value of another type or a non-finite float is a
// UserError naming its dotted path (an int past int64 arrives as an unsigned, which the space's
// reader refuses naming the field; past uint64 it is refused here).
json to_json(const py::handle& v, const std::string& where, const std::string& path) {
  const std::string field = path.empty() ? "space" : path;
  if (v.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) {
    const py::int_ i = py::reinterpret_borrow<py::int_>(v);
    if (py::int_(i) < py::int_(0)) {
      if (i >= py::int_(std::numeric_limits<int64_t>::min())) return i.cast<int64_t>();
    } else if (i <= py::int_(std::numeric_limits<uint64_t>::max())) {
      return i.cast<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? json(i.cast<int64_t>()) : json(i.cast<uint64_t>());
    }
    throw UserError(where, field, py::str(v).cast<std::string>() + " is past a 64-bit integer (from -2^63 to 2^63-1)",
                    "give a smaller integer");
  }
  if (py::isinstance<py::float_>(v)) {
    const double d = v.cast<double>();
    if (!std::isfinite(d))
      throw UserError(where, field, fmt::format("{} is not a finite number", d), "give a finite number");
    return d;
  }
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::dict>(v)) {
    json out = json::object();
    for (const auto& [k, x] : py::reinterpret_borrow<py::dict>(v)) {
      const std::string key = py::str(k).cast<std::string>();
      out[key] = to_json(x, where, path.empty() ? key : path + "." + key);
    }
    return out;
  }
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    json out = json::array();
    for (const auto& x : v) out.push_back(to_json(x, where, path));
    return out;
  }
  throw UserError(where, field, std::string(py::str(py::type::of(v).attr("__name__"))) + " is not a number, string, boolean, list or dict",
                  "give numbers, strings, booleans, lists and dicts");
}

py::object to_py(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return py::none();
    case json::value_t::boolean: return py::bool_(j.get<bool>());
    case json::value_t::number_integer: return py::int_(j.get<int64_t>());
    case json::value_t::number_unsigned: return py::int_(j.get<uint64_t>());
    case json::value_t::number_float: return py::float_(j.get<double>());
    case json::value_t::string: return py::str(j.get<std::string>());
    case json::value_t::array: {
      py::list out;
      for (const auto& x : j) out.append(to_py(x));
      return out;
    }
    case json::value_t::object: {
      py::dict out;
      for (const auto& [k, x] : j.items()) out[py::str(k)] = to_py(x);
      return out;
    }
    default: return py::none();
  }
}

// A point's result as the training function returned it (a dict: losses, steps, val_loss, wall_s,
// items_per_s, error; brain/train/run_result.h run_result_of_report).
RunResult run_result_of(const py::handle& result) {
  return run_result_of_report(to_json(result, "python: train", "result"));
}

// A user model's sweep, built once from the space (a dict, or a TOML file's text) and held while
// Python plans and runs it: the space crosses the binding once, as values.
struct PyUserSweep {
  SweepSpec spec;
  std::string caller;

  // What scaleinv.sweep needs before it runs: the space's name, fingerprint, points (a search: its
  // first rung's), whether it is a search, the widths and depths its points take (the base shape
  // apply() is planned from is the smallest) and their params (planned before the store is opened).
  py::dict info() const {
    std::set<int64_t> widths, depths;
    std::set<std::string> params;
    for (const SweepPoint& p : spec.points) {
      const PointCoords c = p.coords();
      params.insert(c.param);
      if (c.width > 0) widths.insert(c.width);
      if (c.depth > 0) depths.insert(c.depth);
    }
    py::dict out;
    out["name"] = spec.name;
    out["fingerprint"] = spec.fingerprint;
    out["points"] = spec.points.size();
    out["search"] = spec.search ? spec.search->method : std::string();
    out["widths"] = std::vector<int64_t>(widths.begin(), widths.end());
    out["depths"] = std::vector<int64_t>(depths.begin(), depths.end());
    out["params"] = std::vector<std::string>(params.begin(), params.end());
    return out;
  }

  py::object run(const std::string& db, const std::string& shard, bool resume, bool progress, const py::object& train,
                 const py::object& executor) const;
};

PyUserSweep user_sweep_of_dict(const py::dict& space, const std::string& where, const std::string& caller) {
  const InputNames names = sweep_input_names(caller);
  return PyUserSweep{user_sweep_from_json(to_json(space, where, ""), where), caller};
}

PyUserSweep user_sweep_of_toml(const std::string& text, const std::string& where, const std::string& caller) {
  const InputNames names = sweep_input_names(caller);
  return PyUserSweep{user_sweep_from_toml(text, where), caller};
}

// The caller's executor object as a PointExecutor: executor.run(batch, started, record), batch a
// list of (index, point_id, hparams dict); `started(index)` says a point began (the bar's running
// count) and `record(index, result dict)` stores a finished one before it returns; both must be
// called on the thread that called run, before it returns (python/scaleinv/_ray.py).
// `executor.concurrent` (True: several points at once) adds the running count to the bar. Holds
// `executor` by reference (it must outlive the result): no Python reference is copied where the GIL
// is released.
PointExecutor python_executor(const py::object& executor) {
  PointExecutor ex;
  ex.concurrent = py::bool_(py::getattr(executor, "concurrent", py::bool_(false)));
  ex.run = [&executor](const std::vector<PendingPoint>& batch, const PointEvents& events) {
    const py::gil_scoped_acquire gil;
    // The events live while run does: a callback the executor kept and calls later is refused.
    const auto live = std::make_shared<const PointEvents*>(&events);
    struct EndAtReturn {
      std::shared_ptr<const PointEvents*> live;
      ~EndAtReturn() { *live = nullptr; }
    } end_at_return{live};
    auto events_of = [live](const char* what) {
      if (*live == nullptr) throw std::logic_error(std::string("sweep executor: ") + what + " after its rung ended");
      return *live;
    };
    const py::cpp_function started([events_of](size_t index) {
      const PointEvents* ev = events_of("started");
      const py::gil_scoped_release nogil;
      ev->started(index);
    });
    const py::cpp_function record([events_of](size_t index, const py::object& result) {
      const PointEvents* ev = events_of("record");
      RunResult r = run_result_of(result);
      const py::gil_scoped_release nogil;  // the store's write and fsync
      ev->record(index, std::move(r));
    });
    py::list items;
    for (const PendingPoint& p : batch) items.append(py::make_tuple(p.index, p.point->id, to_py(p.hparams)));
    executor.attr("run")(items, started, record);
  };
  return ex;
}

// Runs the space (user_sweep.h), either point by point through `train(point_id, hparams)`, which
// returns the point's result as a dict (run_result_of_report), or, given `executor`, a rung at a
// time (python_executor). The GIL is released while the brain runs (opening the store, ranking,
// writing each result) and held only to call Python. What `train` or `executor.run` raises
// (KeyboardInterrupt) ends the run and reaches the caller; the points recorded before it are in
// the store. Returns run_user_sweep's summary as a dict.
py::object PyUserSweep::run(const std::string& db, const std::string& shard, bool resume, bool progress,
                            const py::object& train, const py::object& executor) const {
  const InputNames names = sweep_input_names(caller);
  UserSweepOptions o;
  o.db_path = db;
  o.shard = parse_shard(shard);
  o.resume = resume;
  o.show_progress = progress;
  PointExecutor ex;
  if (executor.is_none()) {
    ex = sequential_executor([&](const SweepPoint& p, const json& hparams) {
      const py::gil_scoped_acquire gil;
      return run_result_of(train(p.id, to_py(hparams)));
    });
  } else {
    ex = python_executor(executor);
  }
  json out;
  {
    const py::gil_scoped_release nogil;
    out = run_user_sweep(spec, o, ex);
  }
  return to_py(out);
}

// The store a shard writes: DB itself for the whole grid, STEM.shard-i-of-N.db beside it otherwise
// (default_db_path, as `scaleinv sweep --shard` names it).
std::string shard_db_path(const std::string& db, const std::string& shard, const std::string& caller) {
  const InputNames names = sweep_input_names(caller);
  SweepSpec s;
  s.db_path = db;
  return default_db_path(s, parse_shard(shard));
}

// executor="slurm" (python/scaleinv/_slurm.py) talks to Slurm through the CLI's client
// (brain/sweep/slurm.h), each call as it is; its refusals name the executor's arguments, not the CLI's
// flags, and the GIL is released while sbatch, squeue or scancel runs.
class PySlurmClient {
 public:
  PySlurmClient(std::string caller, double timeout_s) : caller_(std::move(caller)), client_(timeout_s) {}
  void check_reachable() const {
    const InputNames n = names();
    client_.check_reachable();
  }
  void check_partition(const std::string& partition) const {
    const InputNames n = names();
    client_.check_partition(partition);
  }
  std::string submit(const std::string& script, const std::vector<std::string>& args,
                     const std::vector<std::string>& script_args) const {
    const InputNames n = names();
    return client_.submit(script, args, script_args);
  }
  std::map<int, std::string> live_tasks(const std::string& job_id) const { return client_.live_tasks(job_id); }
  void cancel(const std::vector<std::string>& job_ids) const { client_.cancel(job_ids); }

 private:
  InputNames names() const {
    return InputNames(caller_, {{"--slurm", "executor"},
                                {"--partition", "executor_options.partition"},
                                {"without Slurm, shard by hand with scaleinv sweep --shard i/N",
                                 "without Slurm, executor=None trains here"},
                                {"fix the sbatch options given after --",
                                 "fix executor_options' sbatch_args, partition or cpus_per_task"}});
  }
  std::string caller_;
  SlurmClient client_;
};

// scaleinv.store.from_records: Python's records into a store through the importer the CLI's
// import-results calls (brain/sweep/import_results.h). `table_json`: {"columns", "rows"} (records_table);
// `mapping_json`: {"lr", "loss", "scales": [[name, column]...], "hparams": [...], "units": {...},
// "param", "param_column", "seed_column", "source", "append"}. Returns the summary as JSON and the
// CLI's printed text.
py::tuple import_records_py(const std::string& table_json, const std::string& mapping_json, const std::string& db) {
  const InputNames names("scaleinv.store.from_records",
                         {{"--out", "db"},
                          {"--lr", "lr"},
                          {"--loss", "loss"},
                          {"--scale", "scales"},
                          {"--hparam", "hparams"},
                          {"--unit", "units"},
                          {"--param", "param"},
                          {"--param-column", "param_column"},
                          {"--seed-column", "seed"},
                          {"--append", "append=True"},
                          {"FILE", "records"},
                          {"--lr lr", "lr='lr'"},
                          {"--loss loss", "loss='loss'"},
                          {"--scale N=N", "scales={'N': 'N'}"},
                          {"--scale N=N (repeat for each axis: --scale D=D)", "scales={'N': 'N', 'D': 'D'}"},
                          {"--hparam batch_size=bs", "hparams={'batch_size': 'bs'}"},
                          {"--hparam NAME=COLUMN", "hparams={NAME: COLUMN}"},
                          {"--unit N=params (for --scale N=COLUMN)", "units={'N': 'params'} (for scales={'N': COLUMN})"},
                          {"--param standard", "param='standard'"},
                          {"--param-column param", "param_column='param'"},
                          {"--seed-column seed", "seed='seed'"},
                          {"--out runs/imported.db", "db='runs/imported.db'"}});
  const json mj = json::parse(mapping_json);
  ImportMapping m;
  m.lr = mj.at("lr").get<std::string>();
  m.loss = mj.at("loss").get<std::string>();
  m.scales = mj.at("scales").get<std::vector<std::pair<std::string, std::string>>>();
  m.hparams = mj.at("hparams").get<std::vector<std::pair<std::string, std::string>>>();
  m.units = mj.at("units").get<std::map<std::string, std::string>>();
  m.param = mj.at("param").get<std::string>();
  m.param_column = mj.at("param_column").get<std::string>();
  m.seed_column = mj.at("seed_column").get<std::string>();
  m.source = mj.at("source").get<std::string>();
  m.append = mj.at("append").get<bool>();
  const ImportSummary s = import_results(records_table(table_json), m, db);
  json cells = json::object();
  for (const auto& [axis, values] : s.cells) cells[axis] = values;
  const json out = {{"db", s.out},         {"rows", s.rows},     {"points", s.points},
                    {"diverged", s.diverged}, {"skipped", s.skipped}, {"total", s.total},
                    {"cells", cells},      {"sha256", s.sha256}, {"fingerprint", s.fingerprint}};
  return py::make_tuple(out.dump(), import_summary_text(s));
}

}  // namespace
}  // namespace scaleinv

PYBIND11_MODULE(_scaleinv, m) {
  using namespace scaleinv;
  m.doc() = "scaleinv's C++ core (JSON in, JSON out); use the scaleinv package";
  py::register_exception<UserError>(m, "UserError", PyExc_ValueError);
  m.def("presets", &preset_names, "the preset parameterizations' names");
  m.def("table", &table_json, py::arg("name"), "a preset or TOML file as the CLI's JSON");
  m.def("optimizer_kinds", &optimizer_kinds_json,
        "the optimizer kinds' rows as JSON: kind, family, decay, eps, fields, python_class, ... (brain/optim/optimizer_kinds.h)");
  m.def("theory", &theory, py::arg("param"), py::arg("optimizer") = "adam", py::arg("depth") = 3,
        py::arg("muon_scale") = "spectral", py::arg("rmsnorm") = false, "(theory JSON, printed table)");
  m.def("plan", &plan, py::arg("param"), py::arg("optimizer"), py::arg("weight_decay"), py::arg("spec_json"),
        "roles and per-tensor factors for a model scaleinv did not write (brain/adapt/own_model.h)");
  m.def("judge_coordcheck", &judge_coordcheck, py::arg("input_json"),
        "(coordcheck JSON, printed table, plot stems) of runs measured in Python");
  m.def("predict_joint", &predict_joint_py, py::arg("dbs"), py::arg("axes"), py::arg("at"), py::arg("fit_upto"),
        py::arg("param"), py::arg("hparam"), py::arg("near_optimal"), py::arg("max_extrapolation"), py::arg("bootstrap"),
        py::arg("retune"), py::arg("reference"), py::arg("reference_name"), py::arg("loso"),
        "(law JSON, printed tables) of a joint law over sweep stores");
  m.def("predict", &predict_py, py::arg("dbs"), py::arg("at"), py::arg("holdout"), py::arg("fit_upto"), py::arg("param"),
        py::arg("max_extrapolation"), py::arg("bootstrap"), py::arg("near_optimal") = 0.0, py::arg("hparam") = "", "(predictions JSON, printed tables) of sweep stores");
  py::class_<PyUserSweep>(m, "UserSweep",
                          "a user model's sweep or search, built once from its space (brain/sweep/user_sweep.h)")
      .def_static("from_dict", &user_sweep_of_dict, py::arg("space"), py::arg("where") = "python: space",
                  py::arg("caller") = "scaleinv.sweep", "the space of a dict (values, not text)")
      .def_static("from_toml", &user_sweep_of_toml, py::arg("text"), py::arg("where"),
                  py::arg("caller") = "scaleinv.sweep", "the space of a TOML file's text")
      .def("info", &PyUserSweep::info, "name, fingerprint, points, search method, widths, depths, params")
      .def_property_readonly("stored_text", [](const PyUserSweep& s) { return s.spec.toml_text; },
                             "the space as the store keeps it (meta sweep_toml)")
      .def("run", &PyUserSweep::run, py::arg("db"), py::arg("shard"), py::arg("resume"), py::arg("progress"),
           py::arg("train"), py::arg("executor") = py::none(),
           "runs it into a store (point by point through train(point_id, hparams), or a rung at a time through "
           "executor.run(batch, started, record)); the summary as a dict");
  m.def("shard_db_path", &shard_db_path, py::arg("db"), py::arg("shard"), py::arg("caller") = "scaleinv.sweep",
        "the store a shard writes");
  m.def("report", &report_py, py::arg("dbs"), py::arg("bootstrap"), "transfer-report's analysis of sweep stores as JSON");
  m.def("import_records", &import_records_py, py::arg("table_json"), py::arg("mapping_json"), py::arg("db"),
        "(summary JSON, printed text) of results imported into a store (brain/sweep/import_results.h)");
  py::class_<PySlurmClient>(m, "SlurmClient",
                            "a Slurm cluster through sbatch, squeue, sinfo and scancel (brain/sweep/slurm.h), for "
                            "executor='slurm'")
      .def(py::init<std::string, double>(), py::arg("caller") = "scaleinv.sweep", py::arg("timeout_s") = 60.0)
      .def("check_reachable", &PySlurmClient::check_reachable, py::call_guard<py::gil_scoped_release>(),
           "UserError when no scheduler answers")
      .def("check_partition", &PySlurmClient::check_partition, py::arg("partition"),
           py::call_guard<py::gil_scoped_release>(), "UserError when the cluster has no such partition")
      .def("submit", &PySlurmClient::submit, py::arg("script"), py::arg("args"), py::arg("script_args"),
           py::call_guard<py::gil_scoped_release>(), "sbatch --parsable ARGS SCRIPT SCRIPT_ARGS: the job id")
      .def("live_tasks", &PySlurmClient::live_tasks, py::arg("job_id"), py::call_guard<py::gil_scoped_release>(),
           "{array index (-1: no array): state} of the job's tasks not yet ended")
      .def("cancel", &PySlurmClient::cancel, py::arg("job_ids"), py::call_guard<py::gil_scoped_release>(),
           "scancel of each job (errors ignored)");
  m.def("partition_in_args", &partition_in_args, py::arg("sbatch_args"),
        "the partition sbatch options name ('' when none)");
  m.attr("max_bootstrap") = kMaxBootstrap;  // the most resamples predict and report take (brain/report/transfer.h)
}
