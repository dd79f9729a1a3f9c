// Issue 13 section 3: every mistake is one line on stderr naming the file (or "command line"),
// the field and a fix, exit code 2, and nothing written. One table of bad inputs across the
// subcommands; each case runs the CLI in its own directory (its working directory, where every
// output path of the case points), whose listing must be the same before and after.
#include <gtest/gtest.h>

#include <cstdio>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "cli_util.h"
#include "brain/util/atomic_file.h"
#include "brain/sweep/import_results.h"

namespace fs = std::filesystem;
using scaleinv::testing::slurp;

namespace {

struct BadCase {
  std::string name;
  std::vector<std::pair<std::string, std::string>> files;  // name in the case directory -> contents
  std::string args;                                        // "{D}" is the case directory
  std::string where;                                       // expected in the line ("{D}" expanded)
  std::string field;                                       // expected in the line
  std::string env;                                         // VAR=value settings for the command
};

// A tiny bigram run on the Markov chain, with one TOML line added to `section`.
std::string tiny(const std::string& section = "", const std::string& line = "") {
  std::string model = "kind = \"bigram\"\nwidth = 16\ndepth = 1\nseq_len = 8\n";
  std::string param = "name = \"mup\"\n";
  std::string optim = "kind = \"adam\"\nlr = 0.01\n";
  std::string data = "source = \"markov\"\nvocab = 16\nmarkov_length = 2000\n";
  std::string train = "steps = 2\nbatch_size = 2\neval_every = 0\neval_batches = 1\nout_dir = \"out/run\"\n";
  std::string hp;
  auto add = [&](std::string& s) {
    const std::string key = line.substr(0, line.find(' '));
    std::string kept;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);)
      if (l.substr(0, l.find(' ')) != key) kept += l + "\n";
    s = kept + line + "\n";
  };
  if (section == "model") add(model);
  if (section == "param") add(param);
  if (section == "optim") add(optim);
  if (section == "data") add(data);
  if (section == "train") add(train);
  if (section == "hp") add(hp);
  return "[model]\n" + model + "[param]\n" + param + "[optim]\n" + optim + "[data]\n" + data + "[train]\n" + train +
         (hp.empty() ? "" : "[hp]\n" + hp);
}

// A parameterization file with the hidden role's row replaced.
std::string table_file(const std::string& hidden) {
  const std::string row = "a = 0\nb = \"1/2\"\nlr = { sgd = 0, adam = 1, adafactor = \"1/2\" }\n";
  return "name = \"bad\"\nbase_width = 64\nbase_depth = 4\n[roles.embedding]\n" + row + "[roles.hidden]\n" + hidden +
         "\n[roles.readout]\n" + row + "[roles.vector]\n" + row;
}

// An imported store of 4 cells, N = 1e8..8e8 and D = d_of(N), a 5-point LR grid each (the bytes of
// the file import_results writes; predict --joint's bad-input cases read it).
template <typename F>
std::string nd_store(F d_of) {
  scaleinv::ResultTable t;
  t.file = "planted.csv";
  t.format = "csv";
  t.columns = {"N", "D", "lr", "loss"};
  for (double n : {1e8, 2e8, 4e8, 8e8})
    for (int k = -10; k <= -6; ++k)
      t.rows.push_back({fmt::format("{:.0f}", n), fmt::format("{:.0f}", d_of(n)), fmt::format("{}", std::exp2(k)),
                        fmt::format("{}", 2.0 + 0.01 * (k + 8) * (k + 8))});
  scaleinv::ImportMapping m;
  m.lr = "lr";
  m.loss = "loss";
  m.scales = {{"N", "N"}, {"D", "D"}};
  const std::string dir = scaleinv::testing::temp_dir("bad_input_nd_store");
  scaleinv::import_results(t, m, dir + "/s.db");
  std::string bytes = slurp(dir + "/s.db");
  scaleinv::remove_tree(dir);
  return bytes;
}

std::vector<BadCase> cases() {
  std::vector<BadCase> out;
  // --- config fields, in a file and through --set ------------------------------------------------
  const std::vector<std::tuple<std::string, std::string, std::string>> fields = {
      // section, key, bad TOML value
      {"model", "width", "0"},           {"model", "width", "-8"},          {"model", "width", "4294967328"},
      {"model", "width", "1.5"},         {"model", "width", "\"wide\""},    {"model", "width", "1000000000"},
      {"model", "depth", "0"},           {"model", "depth", "-1"},          {"model", "depth", "2.5"},
      {"model", "kind", "\"nosuch\""},   {"model", "kind", "3"},            {"model", "widht", "16"},          {"model", "activation", "\"swish\""}, {"param", "name", "\"nosuch\""},   {"param", "base_width", "-8"},
      {"param", "base_depth", "-1"},     {"param", "base_width", "\"x\""},  {"optim", "kind", "\"rmsprop\""},
      {"optim", "lr", "nan"},            {"optim", "lr", "inf"},            {"optim", "lr", "1e39"},            {"optim", "lr", "\"fast\""},
      {"optim", "schedule", "\"step\""}, {"optim", "wd_mode", "\"weird\""}, {"optim", "beta2", "nan"},
      {"optim", "warmup_steps", "-3"},   {"optim", "eps", "-inf"},          {"optim", "momentum", "\"a\""},
      {"optim", "decay_fraction", "0"},  {"optim", "decay_fraction", "1.5"}, {"optim", "decay_fraction", "nan"},
      {"data", "source", "\"nosuch\""},  {"data", "vocab", "1.5"},          {"data", "seed", "\"s\""},
      {"data", "markov_temperature", "nan"}, {"train", "steps", "0"},      {"train", "steps", "-5"},
      {"train", "steps", "1e30"},        {"train", "batch_size", "0"},      {"train", "batch_size", "-2"},
      {"train", "eval_batches", "0"},    {"train", "log_every", "0"},       {"train", "eval_every", "-1"},
      {"train", "checkpoint_every", "-1"}, {"train", "out_dir", "\"\""},    {"train", "device", "\"tpu\""},
      {"train", "precision", "\"fp4\""}, {"train", "autocast", "\"fp16\""}, {"train", "autocast", "\"bf16\""},
      {"train", "tf32", "\"yes\""},      {"train", "cuda_graph", "\"yes\""}, {"train", "cuda_graph", "true"},      {"train", "dist_timeout_s", "0"},  {"train", "seed", "\"x\""},
      {"hp", "init_scale", "nan"},       {"hp", "output_mult", "inf"},      {"hp", "attn_mult", "\"big\""},
      {"hp", "init_scale", "0"},         {"hp", "output_mult", "-1"},       {"hp", "embed_mult", "0"},
      {"hp", "branch_mult", "-2"},       {"hp", "attn_mult", "0"},          {"hp", "router_mult", "0"},
      {"data", "val_fraction", "2"},
      {"data", "val_fraction", "-0.5"},  {"data", "val_fraction", "0"},     {"train", "batch_size", "2000000000"},
      {"data", "vocab", "0"},            {"model", "seq_len", "0"},         {"data", "markov_length", "0"},
  };
  for (const auto& [sec, key, value] : fields) {
    const std::string field = sec + "." + key;
    // autocast bf16 on the CPU names the autocast field; a width of 1e9 fails the memory check.
    out.push_back({fmt::format("file_{}_{}", field, value), {{"c.toml", tiny(sec, key + " = " + value)}},
                   "train --config {D}/c.toml", "{D}/c.toml", field});
    out.push_back({fmt::format("set_{}_{}", field, value), {{"c.toml", tiny()}},
                   fmt::format("train --config {{D}}/c.toml --set '{}={}'", field, value), "{D}/c.toml", field});
  }
  // --- config files that are not usable --------------------------------------------------------
  out.push_back({"config_missing", {}, "train --config {D}/none.toml", "{D}/none.toml", ""});
  out.push_back({"config_is_a_directory", {{"sub/x", ""}}, "train --config {D}/sub", "{D}/sub", ""});
  out.push_back({"config_bad_syntax", {{"c.toml", "[model\nwidth = 3\n"}}, "train --config {D}/c.toml", "{D}/c.toml", ""});
  out.push_back({"config_section_not_a_table", {{"c.toml", "model = 3\n"}}, "train --config {D}/c.toml", "{D}/c.toml", "model"});
  out.push_back({"set_without_equals", {{"c.toml", tiny()}}, "train --config {D}/c.toml --set model.width", "", "--set"});
  out.push_back({"data_does_not_fit_model", {{"c.toml", tiny("data", "source = \"fashion_mnist\"")}},
                 "train --config {D}/c.toml", "{D}/c.toml", "data.source"});
  out.push_back({"gpt_heads_do_not_split",
                 {{"c.toml", tiny("model", "kind = \"gpt\"") + "\n"}},
                 "train --config {D}/c.toml --set model.head_dim=5", "{D}/c.toml", "model."});
  // --- the Llama and mixture-of-experts fields (issue 36) ----------------------------------------
  for (const auto& [n, kind, set, field] : std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {"llama_kv_heads_not_dividing", "llama", "model.kv_heads=3", "model.kv_heads"},
           {"moe_no_experts", "moe", "model.experts=0", "model.experts"},
           {"moe_top_k_over_experts", "moe", "model.top_k=9", "model.top_k"},
           {"moe_aux_coef_negative", "moe", "model.aux_coef=-0.1", "model.aux_coef"},
           {"moe_bias_rate_negative", "moe", "model.bias_rate=-0.001", "model.bias_rate"},
           // A field the kind does not read is refused, not ignored (issue 63 class 4; each ran before).
           {"llama_experts_not_read", "llama", "model.experts=8", "model.experts"},
           {"llama_bias_rate_not_read", "llama", "model.bias_rate=0.01", "model.bias_rate"},
           {"llama_router_mult_one_not_read", "llama", "hp.router_mult=1", "hp.router_mult"},
           {"gpt_kv_heads_not_read", "gpt", "model.kv_heads=2", "model.kv_heads"},
           {"gpt_top_k_not_read", "gpt", "model.top_k=2", "model.top_k"},
           // Experts past any machine's memory are named, not the width (it blamed model.width).
           {"moe_experts_past_memory", "moe", "model.experts=100000000", "model.experts"},
       }) {
    out.push_back({n, {{"c.toml", tiny("model", "kind = \"" + kind + "\"")}},
                   "train --config {D}/c.toml --set " + set, "{D}/c.toml", field});
  }
  out.push_back({"router_mult_on_dense_model", {{"c.toml", tiny()}}, "train --config {D}/c.toml --set hp.router_mult=2",
                 "{D}/c.toml", "hp.router_mult"});
  out.push_back({"moe_table_on_dense_model", {{"c.toml", tiny("param", "name = \"mup-moe\"")}},
                 "train --config {D}/c.toml", "{D}/c.toml", "param.name"});
  // --- parameterization tables -----------------------------------------------------------------
  for (const auto& [n, hidden, field] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"a_nan_string", "a = \"nan\"\nb = 0\nlr = { sgd = 0, adam = 1, adafactor = 0 }", "roles.hidden.a"},
           {"b_inf_string", "a = 0\nb = \"inf\"\nlr = { sgd = 0, adam = 1, adafactor = 0 }", "roles.hidden.b"},
           {"a_1e999", "a = \"1e999\"\nb = 0\nlr = { sgd = 0, adam = 1, adafactor = 0 }", "roles.hidden.a"},
           {"a_toml_nan", "a = nan\nb = 0\nlr = { sgd = 0, adam = 1, adafactor = 0 }", "roles.hidden.a"},
           {"b_toml_inf", "a = 0\nb = inf\nlr = { sgd = 0, adam = 1, adafactor = 0 }", "roles.hidden.b"},
           {"a_div_zero", "a = \"1/0\"\nb = 0\nlr = { sgd = 0, adam = 1, adafactor = 0 }", "roles.hidden.a"},
           {"a_word", "a = \"half\"\nb = 0\nlr = { sgd = 0, adam = 1, adafactor = 0 }", "roles.hidden.a"},
           {"missing_b", "a = 0\nlr = { sgd = 0, adam = 1, adafactor = 0 }", "roles.hidden.b"},
           {"a_1e300", "a = 1e300\nb = 0\nlr = { sgd = 0, adam = 1, adafactor = 0 }", "roles.hidden.a"},
           {"b_17_string", "a = 0\nb = \"17\"\nlr = { sgd = 0, adam = 1, adafactor = 0 }", "roles.hidden.b"},
           {"lr_adam_minus_40", "a = 0\nb = 0\nlr = { sgd = 0, adam = -40, adafactor = 0 }", "roles.hidden.lr.adam"},
       }) {
    out.push_back({"table_show_" + n, {{"p.toml", table_file(hidden)}}, "param show {D}/p.toml", "{D}/p.toml", field});
    out.push_back({"table_theory_" + n, {{"p.toml", table_file(hidden)}}, "theory --param {D}/p.toml", "{D}/p.toml", field});
    out.push_back({"table_train_" + n, {{"p.toml", table_file(hidden)}, {"c.toml", tiny()}},
                   "train --config {D}/c.toml --set 'param.name=\"{D}/p.toml\"'", "{D}/p.toml", field});
  }
  // --- command-line flags ------------------------------------------------------------------------
  const std::vector<std::pair<std::string, std::string>> flags = {
      {"param show nosuch", "--param"},
      {"param shift sp --theta hidden=nan", "--theta"},
      {"param shift sp --theta bogus=1", "--theta"},
      {"param shift sp --theta hidden=1e999", "--theta"},
      {"--threads -1 theory --param mup", "--threads"},
      {"theory --param nosuch", "--param"},
      {"theory --param mup --depth 0", "--depth"},
      {"theory --param mup --depth 100000000", "--depth"},
      {"theory --param mup --optimizer rmsprop", "--optimizer"},
      {"theory --param mup --omega-readout 2", "--omega-readout"},
      {"theory --param mup --align-u x", "--align-u"},
      {"coordcheck --model bigram --param mup --seeds 1", "--seeds"},
      {"coordcheck --model bigram --param mup --seeds 0", "--seeds"},
      {"coordcheck --model nosuch --param mup", "--model"},
      {"coordcheck --model bigram --param nosuch", "param.name"},
      {"coordcheck --model bigram --param mup --widths 0,64", "--widths"},
      {"coordcheck --model bigram --param mup --steps 0", "--steps"},
      {"coordcheck --model bigram --param mup --quantities h,bogus", "quantities"},
      {"coordcheck --model bigram --param mup --quantities ,", "quantities"},
      {"coordcheck --model bigram --param mup --device tpu", "--device"},
      {"sample --checkpoint {D}/none.pt", ""},
      {"sample --checkpoint {D}/none.pt --tokens -5", "--tokens"},
      {"sample --checkpoint {D}/none.pt --temperature nan", "--temperature"},
      {"sample --checkpoint {D}/none.pt --temperature -1", "--temperature"},
      {"sweep --config {D}/none.toml", ""},
      {"sweep merge {D}/out.db {D}/none.db", ""},
      {"transfer-report --db {D}/none.db --out {D}/rep", "--db"},
      {"predict --db {D}/none.db --at width=512", "--db"},
      {"predict --db {D}/none.db", "--at"},
      {"bench --quick --quiet --device tpu", "--device"},
      {"demo --quick --out {D}/demo --device tpu", "--device"},
      {"bench --quick --quiet --widths 100", "--widths"},
      {"bench --quick --quiet --steps 0", "--steps"},
      {"bench --quick --quiet --depth 0", "--depth"},
      {"bench --quick --quiet --autocast fp16", "--autocast"},
      {"scales --model nosuch --param mup --widths 64", "model.kind"},
      {"diagnose alignment --param nosuch", "--param"},
      {"launch --nproc 0 -- train --config {D}/none.toml", "--nproc"},
      {"train --config {D}/none.toml --resume", ""},
      {"train --config {D}/none.toml --stop-after -5", "--stop-after"},
      {"param shift sp --theta hidden=1e300", "--theta"},
      {"param shift sp --theta hidden=1/2 --theta hidden=1", "--theta"},
      {"coordcheck --model bigram --param mup --steps 2000000000", "--steps"},
      {"coordcheck --model bigram --param mup --seeds 2000000000", "--seeds"},
      {"launch --nproc 2 --grace nan -- train --config {D}/none.toml", "--grace"},
      {"precision --config {D}/none.toml --rows -3", "--rows"},
      {"demo --quick --out ''", "--out"},
      {"coordcheck --model bigram --param mup --optimizer rmsprop", "--optimizer"},
      {"bench --profile 64 --depth 0", "--depth"},
      {"bench --quick --quiet --cuda-graph", "--cuda-graph"},
      {"diagnose alignment --model gpt --block foo", "--block"},
      {"diagnose alignment --model gpt --head-dim 0", "--head-dim"},
      {"diagnose init-stats --head-dim 0", "--head-dim"},
      {"diagnose init-stats --seq-len 0", "--seq-len"},
      {"diagnose diversity --eval-batch 0", "--eval-batch"},
      {"sweep --config {D}/none.toml --jobs 2000", "--jobs"},
  };
  // Flags name "command line", except where the mistake is a missing file, which is named.
  const std::set<std::string> names_file = {"sample --checkpoint {D}/none.pt", "sweep --config {D}/none.toml",
                                            "sweep merge {D}/out.db {D}/none.db",
                                            "transfer-report --db {D}/none.db --out {D}/rep",
                                            "predict --db {D}/none.db --at width=512",
                                            "train --config {D}/none.toml --resume"};
  for (size_t i = 0; i < flags.size(); ++i)
    out.push_back({fmt::format("flag_{}", i), {}, flags[i].first,
                   names_file.count(flags[i].first) ? "{D}/none" : "command line", flags[i].second});
  // --- sweep files ---------------------------------------------------------------------------------
  auto sweep = [](const std::string& grid) {
    return "[sweep]\nname = \"s\"\n" + tiny() + "[grid]\n" + grid + "\n";
  };
  for (const auto& [n, grid, field] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"unknown_key", "\"model.widht\" = [16, 32]", "model.widht"},
           {"empty_axis", "lr_log2 = []", "lr_log2"},
           {"wrong_type", "\"model.width\" = [\"a\", \"b\"]", "model.width"},
           {"huge_grid", "a1 = {from = 0, to = 999, step = 1}\n\"seed\" = {from = 0, to = 999, step = 1}", "grid"},
           {"bad_range", "lr_log2 = {from = 0, to = -5, step = 1}", "lr_log2"},
           {"zero_step", "lr_log2 = {from = 0, to = 5, step = 0}", "lr_log2"},
           {"nan_lr", "lr_log2 = [nan]", "lr"},
           {"lr_past_float32", "lr_log2 = [130]", "optim.lr"},
           {"bad_width_value", "\"model.width\" = [0]", "model.width"},
       })
    out.push_back({"sweep_" + n, {{"s.toml", sweep(grid)}}, "sweep --config {D}/s.toml --out {D}/s.db", "{D}/s.toml",
                   field});
  // A [search] range whose LR passes float32's largest (issue 38): refused before any trial runs.
  out.push_back({"search_lr_past_float32",
                 {{"s.toml", sweep("lr_log2 = [-8, -6]").substr(0, sweep("lr_log2 = [-8, -6]").find("[grid]")) +
                                 "[search]\nmethod = \"random\"\ntrials = 3\n[search.space]\n"
                                 "\"hp.output_mult\" = {from = 0.5, to = 2}\nlr_log2 = {from = -10, to = 140}\n"}},
                 "sweep --config {D}/s.toml --out {D}/s.db", "{D}/s.toml", "search.space.lr_log2"});
  out.push_back({"sweep_bad_shard", {{"s.toml", sweep("lr_log2 = [-8, -6]")}},
                 "sweep --config {D}/s.toml --out {D}/s.db --shard 3/2", "command line", "--shard"});
  out.push_back({"sweep_bad_shard_text", {{"s.toml", sweep("lr_log2 = [-8, -6]")}},
                 "sweep --config {D}/s.toml --out {D}/s.db --shard x", "command line", "--shard"});
  out.push_back({"sweep_bad_jobs", {{"s.toml", sweep("lr_log2 = [-8, -6]")}},
                 "sweep --config {D}/s.toml --out {D}/s.db --jobs -2", "command line", "--jobs"});
  // --- databases that are not sweep databases (read, never modified) -----------------------------
  out.push_back({"report_empty_db", {{"e.db", ""}}, "transfer-report --db {D}/e.db --out {D}/rep", "{D}/e.db", ""});
  out.push_back({"report_junk_db", {{"j.db", std::string(5000, 'j')}}, "transfer-report --db {D}/j.db --out {D}/rep",
                 "{D}/j.db", ""});
  out.push_back({"merge_empty_db", {{"e.db", ""}}, "sweep merge {D}/m.db {D}/e.db", "{D}/e.db", ""});
  out.push_back({"merge_junk_db", {{"j.db", std::string(5000, 'j')}}, "sweep merge {D}/m.db {D}/j.db", "{D}/j.db", ""});
  // --- safetensors (export, import) ------------------------------------------------------------------
  out.push_back({"export_junk_checkpoint", {{"c.pt", std::string(5000, 'j')}},
                 "export --checkpoint {D}/c.pt --out {D}/w.safetensors", "{D}/c.pt", "checksum"});
  out.push_back({"import_short", {{"w.safetensors", "abc"}}, "import --safetensors {D}/w.safetensors --out {D}/c.pt",
                 "{D}/w.safetensors", "header"});
  out.push_back({"import_header_too_long", {{"w.safetensors", std::string("\xff\xff\0\0\0\0\0\0{}", 10)}},
                 "import --safetensors {D}/w.safetensors --out {D}/c.pt", "{D}/w.safetensors", "header"});
  out.push_back({"import_header_not_json", {{"w.safetensors", std::string("\x08\0\0\0\0\0\0\0{nojson}", 16)}},
                 "import --safetensors {D}/w.safetensors --out {D}/c.pt", "{D}/w.safetensors", "header"});
  out.push_back({"import_no_metadata", {{"w.safetensors", std::string("\x08\0\0\0\0\0\0\0{}      ", 16)}},
                 "import --safetensors {D}/w.safetensors --out {D}/c.pt", "{D}/w.safetensors", "__metadata__"});
  // safetensors the format forbids (issue 38): a name twice, two tensors on the same bytes, a shape
  // whose element count overflows.
  auto st = [](const std::string& header, size_t data_bytes) {
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return len + header + std::string(data_bytes, '\x01');
  };
  const std::string f32 = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  out.push_back({"import_duplicate_name", {{"w.safetensors", st("{\"a\":" + f32 + ",\"a\":" + f32 + "}", 4)}},
                 "import --safetensors {D}/w.safetensors --out {D}/c.pt", "{D}/w.safetensors", "named twice"});
  out.push_back({"import_overlapping_bytes", {{"w.safetensors", st("{\"a\":" + f32 + ",\"b\":" + f32 + "}", 4)}},
                 "import --safetensors {D}/w.safetensors --out {D}/c.pt", "{D}/w.safetensors", "overlap"});
  out.push_back({"import_shape_overflows",
                 {{"w.safetensors", st(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0)}},
                 "import --safetensors {D}/w.safetensors --out {D}/c.pt", "{D}/w.safetensors", "more elements"});
  // Nesting 100000 deep (issue 38: a recursive parser would overflow the stack and kill a Python
  // process that loaded the library): toml++ stops at 256 levels, nlohmann's parser and destructor
  // keep their own stack.
  const std::string deep(100000, '[');
  out.push_back({"import_header_nested_deep",
                 {{"w.safetensors", st("{\"a\":" + deep + std::string(100000, ']') + "}", 0)}},
                 "import --safetensors {D}/w.safetensors --out {D}/c.pt", "{D}/w.safetensors", "'a'"});
  out.push_back({"train_toml_nested_deep", {{"c.toml", tiny() + "[x]\ny = " + deep + std::string(100000, ']') + "\n"}},
                 "train --config {D}/c.toml", "{D}/c.toml", "nested"});
  out.push_back({"blas_threads_not_a_count", {}, "theory --param mup --json {D}/t.json", "environment",
                 "SCALEINV_BLAS_THREADS", "SCALEINV_BLAS_THREADS=abc"});
  // launch reads the config before it starts any rank: one line, not one per rank.
  out.push_back({"launch_bad_config", {{"c.toml", tiny()}},
                 "launch --nproc 2 -- train --config {D}/c.toml --set model.width=-3", "{D}/c.toml", "model.width"});
  // ... and the rest of train's command line with train's own declarations.
  out.push_back({"launch_unknown_train_flag", {{"c.toml", tiny()}},
                 "launch --nproc 2 -- train --config {D}/c.toml --bogus", "command line", "--bogus"});
  out.push_back({"launch_bad_stop_after", {{"c.toml", tiny()}},
                 "launch --nproc 2 -- train --config {D}/c.toml --stop-after 0", "command line", "--stop-after"});
  // An output file that is a directory (here the case's own directory).
  out.push_back({"json_out_is_a_directory", {}, "theory --param mup --json {D}", "{D}", "directory"});
  out.push_back({"sweep_out_is_a_directory", {{"s.toml", sweep("lr_log2 = [-8, -6]")}},
                 "sweep --config {D}/s.toml --out {D}", "{D}", "directory"});
  // An output over one of the command's inputs (issue 63 class 1): refused before anything is read
  // or written; each of these wrote over its input before, with exit 0 (the store, the table, the
  // config, the sweep file). The listing compares contents, so an overwrite fails the case.
  const std::string store = slurp(std::string(SCALEINV_SOURCE_DIR) + "/docs/results/data/nanogpt_loop_width_cpu.db");
  const std::string table = "# my table\n" + slurp(std::string(SCALEINV_SOURCE_DIR) + "/examples/params/custom.toml");
  for (const auto& [n, files, args, where, field] :
       std::vector<std::tuple<std::string, std::vector<std::pair<std::string, std::string>>, std::string, std::string,
                              std::string>>{
           {"predict_json_over_its_store", {{"s.db", store}}, "predict --db {D}/s.db --at width=512 --json {D}/s.db",
            "{D}/s.db", "--json"},
           {"predict_json_over_its_store_spelled_otherwise", {{"s.db", store}, {"sub/keep", ""}},
            "predict --db {D}/s.db --at width=512 --json {D}/sub/../s.db", "{D}/sub/../s.db", "--json"},
           {"transfer_report_out_over_its_store", {{"s.db", store}}, "transfer-report --db {D}/s.db --out {D}/s.db",
            "{D}/s.db", "--out"},
           {"param_show_toml_over_its_table", {{"p.toml", table}}, "param show {D}/p.toml --toml {D}/p.toml",
            "{D}/p.toml", "--toml"},
           {"param_shift_json_over_its_table", {{"p.toml", table}}, "param shift {D}/p.toml --theta hidden=1/2 --json {D}/p.toml",
            "{D}/p.toml", "--json"},
           {"theory_json_over_its_table", {{"p.toml", table}}, "theory --param {D}/p.toml --json {D}/p.toml",
            "{D}/p.toml", "--json"},
           {"coordcheck_json_over_its_config", {{"c.toml", tiny()}},
            "coordcheck --config {D}/c.toml --widths 16,32 --steps 1 --seeds 2 --json {D}/c.toml", "{D}/c.toml", "--json"},
           {"scales_json_over_its_config", {{"c.toml", tiny()}}, "scales --config {D}/c.toml --json {D}/c.toml",
            "{D}/c.toml", "--json"},
           {"precision_json_over_its_config", {{"c.toml", tiny()}}, "precision --config {D}/c.toml --json {D}/c.toml",
            "{D}/c.toml", "--json"},
           {"sweep_out_over_its_file", {{"s.toml", sweep("lr_log2 = [-8, -6]")}}, "sweep --config {D}/s.toml --out {D}/s.toml",
            "{D}/s.toml", "--out"},
           // The store named inside the sweep file, not on the command line, is the file itself.
           {"sweep_db_field_is_its_file", {{"s.toml", "[sweep]\nname = \"s\"\ndb = \"s.toml\"\n" + tiny() + "[grid]\nlr_log2 = [-8, -6]\n"}},
            "sweep --config {D}/s.toml", "{D}/s.toml", "--config"},
           // A run's files written into its out_dir over the config it was started from.
           {"train_out_dir_over_its_config", {{"out/run/config.json", tiny()}}, "train --config {D}/out/run/config.json",
            "out/run/config.json", "--config"},
       })
    out.push_back({n, files, args, where, field});
  // A damaged store the demo would resume is refused before the demo writes anything (issue 63
  // class 7: its coordinate checks' folders were written first).
  out.push_back({"demo_resume_damaged_store", {{"demo/width-sweep.db", std::string(5000, 'j')}},
                 "demo --quick --resume --out {D}/demo", "{D}/demo/width-sweep.db", ""});
  // An output over the command's own input is refused before either is read.
  out.push_back({"export_over_its_checkpoint", {{"c.pt", std::string(5000, 'j')}},
                 "export --checkpoint {D}/c.pt --out {D}/c.pt", "{D}/c.pt", "--out"});
  out.push_back({"import_over_its_file", {{"w.safetensors", "abc"}},
                 "import --safetensors {D}/w.safetensors --out {D}/w.safetensors", "{D}/w.safetensors", "--out"});
  out.push_back({"rank_not_a_sweep_db", {{"s.toml", sweep("lr_log2 = [-8, -6]")}, {"e.db", ""}},
                 "sweep rank --config {D}/s.toml --db {D}/e.db", "{D}/e.db", ""});
  out.push_back({"param_file_is_a_directory", {{"d.toml/keep", ""}}, "param show {D}/d.toml", "{D}/d.toml",
                 "directory"});
  // A bad model is named before the data it would train on is made: with no KJV cache and no
  // `bible` on PATH (a GPU machine built with scripts/build_cuda.sh), the model is still the error.
  out.push_back({"scales_bad_model_without_kjv", {}, "scales --model nosuch --param mup --widths 64", "command line",
                 "model.kind", "PATH=/nonexistent"});
  // --plot where gnuplot is missing is refused before the measurement: no run wasted, and the
  // --json beside it is not written either.
  for (const char* cmd : {"coordcheck --model bigram --param mup --widths 32,64 --steps 1 --seeds 2",
                          "scales --model bigram --param mup --widths 32", "diagnose alignment --widths 32,64",
                          "diagnose transport --depths 2,4", "diagnose diversity", "diagnose init-stats",
                          "diagnose depth-scaling"})
    out.push_back({fmt::format("plot_without_gnuplot_{}", out.size()), {},
                   fmt::format("{} --json {{D}}/r.json --plot {{D}}/plots", cmd), "command line", "--plot",
                   "PATH=/nonexistent"});
  out.push_back({"sample_junk_checkpoint", {{"c.pt", std::string(5000, 'j')}}, "sample --checkpoint {D}/c.pt", "{D}/c.pt",
                 "checksum"});
  // import-results (brain/sweep/import_results.h): each refusal names the column or axis, no store left.
  const std::string csv_head = "N,D,lr,bs,loss\n", ok_row = "2150000000,1e11,0.001,128,2.5\n";
  const std::string import_args = "import-results {D}/r.csv --out {D}/s.db --lr lr --loss loss --scale N=N --scale D=D";
  for (const auto& [n, text, extra, field] : std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {"import_column_not_in_file", csv_head + ok_row, " --hparam batch_size=batch", "--hparam"},
           {"import_loss_is_text", csv_head + ok_row + "2150000000,1e11,0.002,128,oops\n", "", "--loss"},
           {"import_two_rows_one_point", csv_head + ok_row + "2.15e9,1e11,0.001,128,2.6\n", "", "rows"},
           {"import_negative_scale", csv_head + "-5,1e11,0.001,128,2.5\n", "", "--scale"},
           {"import_zero_lr", csv_head + "2150000000,1e11,0,128,2.5\n", "", "--lr"},
           {"import_scale_not_a_number", csv_head + "2B,1e11,0.001,128,2.5\n", "", "--scale"},
           {"import_empty_file", "", "", "FILE"},
           {"import_no_rows", csv_head, "", "FILE"},
       })
    out.push_back({n, {{"r.csv", text}}, import_args + extra, "{D}/r.csv", field});
  out.push_back({"import_out_over_its_file", {{"r.csv", csv_head + ok_row}},
                 "import-results {D}/r.csv --out {D}/r.csv --lr lr --loss loss --scale N=N", "{D}/r.csv", "--out"});
  // A joint law (predict --joint): axes on one line, an axis with one value, a target missing an
  // axis, a one-axis holdout value, an incomplete reference law, a joint-only flag without --joint.
  const std::string line = nd_store([](double n) { return 20 * n; });  // D = 20 N in every cell
  const std::string one_d = nd_store([](double) { return 1e10; });      // D held at one value
  for (const auto& [n, db, args, field] : std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {"joint_axes_collinear", line, "--joint N,D --at N=1e9,D=2e10", "--joint"},
           {"joint_axis_one_value", one_d, "--joint N,D --at N=1e9,D=1e10", "--joint"},
           {"joint_target_missing_axis", one_d, "--joint N --at D=1e10", "--at"},
           {"joint_fit_upto_without_axis", one_d, "--joint N --holdout --fit-upto 4e8", "--fit-upto"},
           {"joint_reference_law_incomplete", one_d, "--joint N --at N=1e9 --reference-law c=1.79", "--reference-law"},
           {"joint_loso_without_joint", one_d, "--at N=1e9 --loso", "--loso"},
       })
    out.push_back({n, {{"s.db", db}}, "predict --db {D}/s.db " + args + " --json {D}/p.json", "command line", field});
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
  return s;
}

// Every path under DIR with its contents' hash: a case that rewrote a file fails as one that added one.
std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    out.insert(e.path().string() +
               (e.is_regular_file() ? fmt::format(" {:x}", std::hash<std::string>{}(slurp(e.path().string()))) : ""));
  return out;
}


}  // namespace

TEST(BadInput, EveryMistakeIsOneLineNamingFileFieldAndFixWithExitCode2AndNothingWritten) {
  const std::vector<BadCase> all = cases();
  ASSERT_EQ(all.size(), 323u);  // the count docs/reliability.md (and README's results table) states: a new case updates all three
  std::printf("%zu bad inputs\n", all.size());  // the count docs/reliability.md states
  const std::string root = scaleinv::testing::temp_dir("bad_input");
  struct Outcome {
    int code = -1;
    std::string err, where, field;
    std::set<std::string> before, after;
  };
  std::vector<Outcome> res(all.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < all.size(); i = next++) {
      const BadCase& c = all[i];
      const std::string dir = fmt::format("{}/c{:03d}", root, i), io = fmt::format("{}/io{:03d}", root, i);
      fs::create_directories(dir);
      fs::create_directories(io);
      for (const auto& [name, text] : c.files) {
        fs::create_directories(fs::path(dir + "/" + name).parent_path());
        std::ofstream(dir + "/" + name, std::ios::binary) << text;
      }
      Outcome& o = res[i];
      o.before = listing(dir);
      const std::string cmd = fmt::format("cd {0} && env HOME={3} SCALEINV_DATA_DIR={3} {4} {1} {2} >{3}/out 2>{3}/err",
                                          dir, SCALEINV_BIN, replace_all(c.args, "{D}", dir), io, c.env);
      const int st = std::system(cmd.c_str());
      o.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      o.err = slurp(io + "/err");
      o.after = listing(dir);
      o.where = replace_all(c.where, "{D}", dir);
      o.field = c.field;
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  for (size_t i = 0; i < all.size(); ++i) {
    const Outcome& o = res[i];
    SCOPED_TRACE(all[i].name + ": " + all[i].args);
    EXPECT_EQ(o.code, 2) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find(o.where), std::string::npos) << "file/where '" << o.where << "' not named: " << o.err;
    if (!o.field.empty()) {
      EXPECT_NE(o.err.find(o.field), std::string::npos) << "field not named: " << o.err;
    }
    EXPECT_NE(o.err.find("fix:"), std::string::npos) << o.err;
    EXPECT_EQ(o.before, o.after) << "the failed command wrote something";
  }
}
