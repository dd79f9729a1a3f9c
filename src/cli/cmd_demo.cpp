// `scaleinv demo [--out DIR] [--resume] [--quick] [--device cpu|cuda] [--model gpt|llama|moe]`: the main job,
// on the files in examples/demo/ (compiled in; issue 8).
// 1. the theory's verdicts for every preset (seed 000 sections 1-2, seed 004);
// 2. coordinate checks of standard vs mup on the bigram model, judged against the theory;
// 3. a width-transfer sweep of standard vs mup on the byte-level KJV GPT (widths 64..512); --model llama
//    or moe trains the Llama decoder or the mixture of experts there instead (examples/demo/models.toml:
//    each model a table merged over the sweep file, so a new demo model is a new table, not code);
// 4. a depth-transfer sweep of standard vs depth-mup on the residual MLP (Fashion-MNIST, depths 4..64);
// then one self-contained HTML report (and its markdown twin) in DIR. Whatever the sweeps show is
// what the report shows: the verdicts come from brain/report/transfer.h, never from this file.
// --device cuda trains everything on the GPU (train.device = "cuda" in every config; the sweeps'
// default batching then trains each chunk as one batched ensemble); fp32 (TF32 matmuls), so its
// optima are comparable with the CPU's.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/atomic_file.h"
#include "engine/runtime/device.h"
#include "brain/util/errors.h"
#include "brain/util/gnuplot.h"
#include "brain/util/toml_json.h"
#include "brain/util/toml_reader.h"
#include "demo_sweeps.h"
#include "engine/coordcheck/coordcheck.h"
#include "brain/report/html_report.h"
#include "brain/report/transfer.h"
#include "engine/sweep/sweep_runner.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/sweep/sweep_store.h"
#include "brain/theory/depth_theory.h"
#include "brain/theory/theory_report.h"
#include "brain/theory/width_theory.h"

namespace scaleinv {

namespace {

// One table, rendered both as markdown (report.md, the terminal) and as HTML (report.html).
struct DemoTable {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;

  std::string markdown() const {
    std::string s = "|";
    for (const auto& h : head) s += " " + h + " |";
    s += "\n|";
    for (size_t i = 0; i < head.size(); ++i) s += "---|";
    s += "\n";
    for (const auto& r : rows) {
      s += "|";
      for (const auto& c : r) s += " " + c + " |";
      s += "\n";
    }
    return s;
  }
  std::string html() const {
    std::string s = "<table><tr>";
    for (size_t i = 0; i < head.size(); ++i) s += (i ? "<th>" : "<th class=\"l\">") + html_escape(head[i]) + "</th>";
    s += "</tr>\n";
    for (const auto& r : rows) {
      s += "<tr>";
      for (size_t i = 0; i < r.size(); ++i) s += (i ? "<td>" : "<td class=\"l\">") + html_escape(r[i]) + "</td>";
      s += "</tr>\n";
    }
    return s + "</table>\n";
  }
};

const char* yes_no(bool b) { return b ? "yes" : "NO"; }

// The demo's width-section model `name`: its table of examples/demo/models.toml (label, and `over`,
// merged over width_sweep.toml). UserError for a name the file has no table for.
const toml::table& demo_model(const toml::table& models, const std::string& name) {
  if (const toml::table* t = models.get_as<toml::table>(name)) return *t;
  std::string known;
  for (const auto& [k, v] : models) known += (known.empty() ? "" : ", ") + std::string(k.str());
  throw UserError("command line", "--model", fmt::format("'{}' is not a demo model (the demo has {})", name, known),
                  "e.g. --model llama");
}

// The demo's sweep `which` ("width" or "depth"): examples/demo/<which>_sweep.toml as compiled in
// (generated/demo_sweeps.h), `over` merged over it (the width section's model), then under --quick
// examples/demo/quick.toml's [<which>].
// Every run on `device`: train.device set, where not the CPU (the default, so a CPU demo's sweep
// files, point ids and --resume stay as they were).
toml::table demo_sweep(const char* text, const std::string& which, bool quick, const std::string& device,
                       const toml::table* over = nullptr) {
  toml::table root = parse_toml(text, "examples/demo/" + which + "_sweep.toml");
  if (over) merge_toml(root, *over);
  if (quick) {
    const toml::table q = parse_toml(kDemo_quick, "examples/demo/quick.toml");
    if (const toml::table* over = q.get_as<toml::table>(which)) merge_toml(root, *over);
  }
  if (device != "cpu") {
    toml::table on_device;
    on_device.insert("train", toml::table{{"device", device}});
    merge_toml(root, on_device);
  }
  return root;
}

std::string shown_scalar(const toml::node& n) {
  const std::optional<nlohmann::json> j = toml_scalar_json(n);
  return !j ? "?" : j->is_string() ? j->get<std::string>() : j->dump();
}

// One value of a sweep file as the set-up note shows it: a scalar as written, an array as [a, b].
std::string shown(const toml::table& root, const std::string& section, const std::string& key) {
  const toml::node* n = root.get_as<toml::table>(section) ? root.get_as<toml::table>(section)->get(key) : nullptr;
  if (!n) return "?";
  if (const toml::array* arr = n->as_array()) {
    std::string s = "[";
    for (size_t i = 0; i < arr->size(); ++i) s += (i ? ", " : "") + shown_scalar(*arr->get(i));
    return s + "]";
  }
  return shown_scalar(*n);
}

HtmlSection theory_section(nlohmann::json& all, std::string& md) {
  DemoTable t;
  t.head = {"preset", "omega_readout", "stable at init", "stable in training", "feature learning", "nontrivial",
            "depth class"};
  for (const std::string& name : preset_names()) {
    for (double omega_r : {1.0, 0.5}) {
      ParamTable p = preset(name);
      Alignment a;
      a.omega_readout = omega_r;
      WidthTheory w = width_theory(p, OptFamily::Adam, 3, a);
      DepthTheory d = depth_theory(p, OptFamily::Adam);
      all[name][omega_r == 1.0 ? "omega_readout_1" : "omega_readout_half"] = theory_json(w, d);
      t.rows.push_back({name, omega_r == 1.0 ? "1" : "1/2", yes_no(w.stable_init), yes_no(w.stable_train),
                        yes_no(w.feature_learning), yes_no(w.nontrivial), depth_region_name(d.region)});
    }
  }
  const std::string note =
      "omega_readout = 1 is muP's worst-case readout alignment (seed 000 eq. 50); 1/2 is Everett et al.'s "
      "relaxation, under which sp and ntk are stable too (seed 000 Table 1). Full tables: "
      "`scaleinv theory --param NAME`.";
  const std::string title = "1. Theory: verdicts per preset (Adam, bigram model with 3 hidden layers)";
  md += "## " + title + "\n\n" + t.markdown() + "\n" + note + "\n\n";
  return {title, t.html() + "<p class=\"note\">" + note + "</p>", {}};
}

HtmlSection coordcheck_section(const std::string& out, bool quick, const std::string& device, bool plots,
                               std::string& md) {
  DemoTable t;
  t.head = {"param", "rows with a prediction", "match theory", "stable", "verdict", "first failures"};
  std::vector<ReportFigure> figures;
  for (const char* param : {"standard", "mup"}) {
    CoordCheckConfig cc;
    cc.train = train_config_from_toml_text(fmt::format(R"(
[model]
kind = "bigram"
depth = 2
seq_len = 8
[param]
name = "{}"
[optim]
kind = "adam"
lr = 0.001
[data]
source = "markov"
vocab = 32
[train]
batch_size = 2
device = "{}"
)",
                                                       param, device),
                                           "demo coordcheck defaults");
    cc.widths = quick ? std::vector<int>{64, 128} : std::vector<int>{64, 128, 256, 512};
    cc.steps = 3;
    cc.seeds = {0, 1, 2};  // a small probe (2 x 8 tokens) keeps the finite-size tolerance tight
    CoordCheckResult r = run_coordcheck(cc);
    const std::string dir = fmt::format("{}/coordcheck-{}", out, param);
    std::filesystem::create_directories(dir);
    write_file_atomic(dir + "/coordcheck.json", coordcheck_to_json(r).dump(1) + "\n");
    // The report inlines the activations (h) and their updates (dh); the gradients' plots stay beside it.
    // Without gnuplot (`plots` false; a GPU machine built with scripts/build_cuda.sh may have none)
    // the report says so and has no plots, as the transfer report does: the demo asked for none.
    const std::vector<std::string> stems = plots ? plot_coordcheck(r, dir) : std::vector<std::string>{};
    for (const std::string& stem : stems) {
      const std::string q = stem.substr(stem.rfind('_') + 1);
      if (q == "h" || q == "dh")
        figures.push_back({fmt::format("coordinate check, {}: RMS of {} against width (dashed: the theory's slopes)",
                                       param, q == "h" ? "activations" : "activation updates"),
                           stem + ".png"});
    }
    int predicted = 0, matched = 0, stable_rows = 0, judged_stable = 0;
    for (const CoordRow& row : r.rows) {
      if (row.predicted) ++predicted;
      if (row.matches.value_or(false)) ++matched;
      if (row.stable) {
        ++judged_stable;
        if (*row.stable) ++stable_rows;
      }
    }
    std::string first;
    for (size_t i = 0; i < r.failures.size() && i < 3; ++i) first += (i ? "; " : "") + r.failures[i];
    t.rows.push_back({param, std::to_string(predicted), std::to_string(matched),
                      fmt::format("{}/{}", stable_rows, judged_stable), r.pass() ? "PASS" : "FAIL",
                      first.empty() ? "-" : first});
    std::printf("coordcheck %s: %s (%zu failures)\n", param, r.pass() ? "PASS" : "FAIL", r.failures.size());
  }
  const std::string note =
      "Each row of the full tables is one quantity, layer and step: the log-log slope of its RMS against width, "
      "judged against the theory's exponent. The theory predicts that `standard` (one global LR) is unstable in "
      "training (updates grow with width, seed 000 eq. 25) and that `mup` is stable; the measurement decides. "
      "Full tables: `scaleinv coordcheck --model bigram --param NAME --widths 64,128,256,512`.";
  const std::string title = "2. Coordinate checks: standard vs mup (bigram model, Adam)";
  md += "## " + title + "\n\n" + t.markdown() + "\n" + note + "\n\n";
  return {title, t.html() + "<p class=\"note\">" + note + "</p>", figures};
}

SweepSpec demo_spec(const toml::table& sweep, const std::string& where) {
  std::ostringstream text;
  text << sweep;
  return sweep_from_toml_text(text.str(), where, ".");
}

// --resume: a store the demo would continue is read first, read-only, so that a damaged one or one
// holding another grid (a --quick store resumed without --quick) is refused before the demo writes
// anything (issue 63 class 7: the coordinate checks' folders were written first).
void check_demo_store(const SweepSpec& spec, const std::string& db) {
  if (std::error_code ec; !std::filesystem::exists(db, ec)) return;
  const std::string held = sweep_db_fingerprint(db);  // UserError naming db when damaged or not a sweep's
  if (held != spec.fingerprint)
    throw UserError(db, "--resume",
                    fmt::format("holds another grid than this demo's (fingerprint {}, this demo {})", held, spec.fingerprint),
                    "resume with the flags (--quick, --model, --device) the demo was started with, or leave out --resume");
}

// Runs one of the demo's sweeps into DIR/NAME.db (resuming when asked) and returns its rows.
SweepTable run_demo_sweep(const SweepSpec& spec, const std::string& db, bool resume) {
  if (!resume)
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db + suffix);
  SweepRunOptions ro;
  ro.db_path = db;
  ro.resume = true;  // (after the removal above: a fresh db unless --resume)
  SweepRunSummary s = run_sweep(spec, ro);
  std::printf("%s\n", render_sweep_summary(s).c_str());
  return read_sweep_rows(db);
}

}  // namespace

void add_demo_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string out = "out/demo";
    bool resume = false;
    bool quick = false;
    std::string device = "cpu";
    std::string model = "gpt";
  };
  auto o = std::make_shared<Opts>();
  auto* demo = app.add_subcommand("demo", "Run the end-to-end demo on embedded defaults and write a report");
  writes(demo->add_option("--out", o->out, "output directory"), /*dir=*/true);
  demo->add_flag("--resume", o->resume, "keep the sweep points a killed demo already finished");
  demo->add_flag("--quick", o->quick, "tiny sizes (seconds; for tests), not evidence");
  demo->add_option("--device", o->device, "cpu (default) or cuda: where every run trains");
  demo->add_option("--model", o->model,
                   "the width section's language model: gpt (default), llama or moe (examples/demo/models.toml)");
  demo->callback([o, &exit_code] {
    resolve_device(o->device, "command line", "--device");  // before anything is written
    if (o->out.empty())
      throw UserError("command line", "--out", "is empty", "give a directory for the report, e.g. --out runs/demo");
    const toml::table models = parse_toml(kDemo_models, "examples/demo/models.toml");
    const toml::table& model = demo_model(models, o->model);
    const std::string label = model["label"].value_or(o->model);
    const toml::table width = demo_sweep(kDemo_width_sweep, "width", o->quick, o->device, model.get_as<toml::table>("over"));
    // The scale-invariant parameterization the width sweep sets against standard.
    std::string scaled = "mup";
    if (const toml::array* ps = width["grid"]["param"].as_array())
      for (const auto& p : *ps)
        if (p.value_or(std::string()) != "standard") scaled = p.value_or(scaled);
    const toml::table depth_toml = demo_sweep(kDemo_depth_sweep, "depth", o->quick, o->device);
    const SweepSpec width_spec = demo_spec(width, "demo width sweep");
    const SweepSpec depth_spec = demo_spec(depth_toml, "demo depth sweep");
    const std::string width_db = o->out + "/width-sweep.db", depth_db = o->out + "/depth-sweep.db";
    if (o->resume) {
      check_demo_store(width_spec, width_db);
      check_demo_store(depth_spec, depth_db);
    }
    std::filesystem::create_directories(o->out);
    const bool plots = gnuplot_available();
    if (!plots)
      std::fprintf(stderr, "demo: gnuplot is not installed: the report will have no plots (fix: apt-get install gnuplot-nox)\n");
    std::string md = "# scaleinv demo report\n\n";
    nlohmann::json theory;
    std::vector<HtmlSection> sections;
    sections.push_back(theory_section(theory, md));
    write_file_atomic(o->out + "/theory.json", theory.dump(2) + "\n");
    std::printf("%s", md.c_str());
    sections.push_back(coordcheck_section(o->out, o->quick, o->device, plots, md));

    std::printf("\n## 3. Width transfer: standard vs %s on the byte-level KJV %s\n", scaled.c_str(), label.c_str());
    SweepTable rows = run_demo_sweep(width_spec, width_db, o->resume);
    std::printf("\n## 4. Depth transfer: standard vs depth-mup on the residual MLP (Fashion-MNIST)\n");
    SweepTable depth = run_demo_sweep(depth_spec, depth_db, o->resume);
    // Each database analysed on its own (a GPT and an MLP must never share a curve), then one report.
    TransferAnalysis a = analyze_transfer(rows);
    const TransferAnalysis ad = analyze_transfer(depth);
    a.groups.insert(a.groups.end(), ad.groups.begin(), ad.groups.end());
    a.rows += ad.rows;
    a.diverged_rows += ad.diverged_rows;
    a.db = width_db + " and " + depth_db;
    a.name = "scaleinv demo";

    const std::string setup = fmt::format(
        "Width sweep: {} depth 2, head_dim 16, batch 8 x 32 bytes of the KJV, AdamW with warmup and cosine decay, "
        "{} steps, widths {}, log2 LR {}, seeds {}; base width 64. Depth sweep: residual MLP width 128 (ReLU, "
        "branch multiplier 0.5), Fashion-MNIST batch 64, Adam, {} steps, depths {}, log2 LR {}, seeds {}; base "
        "width 128 and base depth {} (the two parameterizations are the same network at the smallest depth). "
        "Loss: mean training loss over the last 10% of steps.{}",
        label, shown(width, "train", "steps"), shown(width, "grid", "model.width"), shown(width, "grid", "lr_log2"),
        shown(width, "grid", "seed"), shown(depth_toml, "train", "steps"), shown(depth_toml, "grid", "model.depth"),
        shown(depth_toml, "grid", "lr_log2"), shown(depth_toml, "grid", "seed"), shown(depth_toml, "param", "base_depth"),
        o->quick ? " QUICK MODE: sizes for tests, not evidence." : "");
    HtmlSection sweeps{"3-4. Transfer sweeps: set-up", "<p class=\"note\">" + setup + "</p>", {}};
    sections.push_back(sweeps);
    // At a glance, first on the page: every transfer verdict (details in sections 3-4 below).
    HtmlSection glance{"At a glance: does the optimal learning rate transfer?", "", {}};
    for (const auto& g : a.groups)
      for (const auto& p : g.params) {
        const char* cls = p.curves.size() < 2 || std::isnan(p.shift) ? "unknown" : p.holds ? "holds" : "fails";
        glance.html += fmt::format("<div class=\"verdict {}\">{}, {}: {}</div>\n", cls, g.title(), p.param, p.verdict);
      }
    sections.insert(sections.begin(), glance);
    md += "## 3-4. Transfer sweeps\n\n" + setup + "\n\n" + transfer_markdown(a) + "\n";
    const TransferReportFiles files = write_transfer_report(a, o->out, sections, "scaleinv demo report");
    write_file_atomic(o->out + "/report.md", md);
    std::printf("\n%s\n", transfer_markdown(a).c_str());
    for (const auto& g : a.groups)
      for (const auto& p : g.params) std::printf("%s, %s: %s\n", g.title().c_str(), p.param.c_str(), p.verdict.c_str());
    std::printf("\nreport: %s (open in a browser; %d plots inlined), %s/report.md\n", files.html.c_str(),
                files.images, o->out.c_str());
    exit_code = 0;
  });
}

}  // namespace scaleinv
