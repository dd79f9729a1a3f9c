#pragma once
// Shared test fixtures (tests/fixtures/*.toml), so a configuration used by several test files is
// written once and each test states only what it changes.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/models/model.h"
#include "brain/train/config.h"

namespace scaleinv::testing {

// tests/fixtures/small_gpt.toml with `section.key=value` overrides applied (as --set applies them),
// as TOML text (for a test that writes a config file for the CLI) and as a validated TrainConfig.
std::string small_gpt_toml(const std::vector<std::string>& sets = {});
TrainConfig small_gpt(const std::vector<std::string>& sets = {});

// The training losses of a run's metrics.jsonl, one per logged step.
std::vector<double> losses_in(const std::string& metrics_jsonl);
// max over i of |a_i - b_i| / |b_i| (a failed expectation when the sizes differ).
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b);
// The largest |a - b| over the largest |b| (the difference relative to the tensor's scale, so
// entries near zero do not blow it up; 0 where both are all zero).
double diff_over_largest(const torch::Tensor& a, const torch::Tensor& b);
// How many of a model's attention layers read q, k, v packed (Attention::packed, engine/models/packed_rows.h).
int packed_attention_layers(Model& m);

// Run c's model on the CPU, built under `table` (the config's own: resolve_param(c)) with the
// weights of the checkpoint at `path`, in eval mode; and a model's mean loss over c's validation
// batches (c.train.eval_batches of c.train.batch_size, as train_run evaluates on one process).
std::shared_ptr<Model> model_from_checkpoint(const TrainConfig& c, const ParamTable& table, const std::string& path);
double validation_loss(Model& model, const TrainConfig& c);

// What a user's mistake says: the message of the UserError `f` throws, or "(no error)".
std::string user_error_of(const std::function<void()>& f);

// The UserError message of a sweep file with this text, read as "bad.toml" (or "(no error)").
std::string sweep_error_of(const std::string& text);

}  // namespace scaleinv::testing
