// Shared test fixtures (see fixtures.h).
#include "fixtures.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "brain/util/errors.h"
#include "engine/runtime/threads.h"
#include "brain/util/toml_reader.h"
#include "engine/data/data.h"
#include "engine/models/layers.h"
#include "engine/optim/optimizer.h"
#include "brain/sweep/sweep_spec.h"
#include "engine/train/checkpoint.h"

namespace scaleinv::testing {

namespace {
// Every test process splits its cores as the CLI does (engine/runtime/threads.h: libtorch's pool on the
// calling thread, OpenBLAS on every core), so in-process runs compute as `scaleinv` runs do.
// Without it both pools stay at the core count; under libtorch 2.6 (scripts/test_torch2_cpu.sh)
// their spinning workers made some tests 6-17x slower on 2 cores.
class CliThreadSplit : public ::testing::Environment {
 public:
  void SetUp() override { configure_threads(0); }
};
[[maybe_unused]] const ::testing::Environment* const kThreadSplit =
    ::testing::AddGlobalTestEnvironment(new CliThreadSplit);

// A function, not a global: test files build their own globals from these fixtures.
std::string small_gpt_path() { return std::string(SCALEINV_SOURCE_DIR) + "/tests/fixtures/small_gpt.toml"; }
}  // namespace

std::string small_gpt_toml(const std::vector<std::string>& sets) {
  toml::table root = parse_toml(slurp(small_gpt_path()), small_gpt_path());
  for (const std::string& s : sets) apply_override(root, s);
  std::ostringstream out;
  out << root;
  return out.str();
}

TrainConfig small_gpt(const std::vector<std::string>& sets) {
  return train_config_from_toml_text(slurp(small_gpt_path()), "tests/fixtures/small_gpt.toml", sets);
}

std::vector<double> losses_in(const std::string& metrics_jsonl) {
  std::vector<double> out;
  std::istringstream in(slurp(metrics_jsonl));
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  return out;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  return m;
}

double diff_over_largest(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

int packed_attention_layers(Model& m) {
  int packed = 0;
  for (const auto& sub : m.modules(/*include_self=*/false))
    if (auto* a = dynamic_cast<Attention*>(sub.get())) packed += a->packed() ? 1 : 0;
  return packed;
}

std::string user_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string sweep_error_of(const std::string& text) {
  return user_error_of([&] { sweep_from_toml_text(text, "bad.toml", "."); });
}

std::shared_ptr<Model> model_from_checkpoint(const TrainConfig& c, const ParamTable& table, const std::string& path) {
  auto model =
      build_model(c.model, ScaleContext{table, optimizer_family(c.optim.kind), c.model.width, c.model.depth}, c.hp);
  load_checkpoint(path, *model, nullptr);
  model->eval();
  return model;
}

double validation_loss(Model& model, const TrainConfig& c) {
  const auto data = make_data(c.data);
  torch::NoGradGuard ng;
  double total = 0;
  for (int64_t i = 0; i < c.train.eval_batches; ++i) {
    const Batch b = data->batch(Split::Val, i, c.train.batch_size);
    total += model.loss(b.x, b.y).item<double>();
  }
  return total / static_cast<double>(c.train.eval_batches);
}

}  // namespace scaleinv::testing
