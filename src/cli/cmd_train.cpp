// `scaleinv train --config FILE.toml [--set key=value]... [--resume] [--stop-after N]`
// `scaleinv sample --checkpoint DIR/checkpoint.pt [--prompt TEXT] [--tokens N] [--temperature T]`
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/errors.h"
#include "brain/util/stop_signal.h"
#include "brain/models/model_kinds.h"
#include "engine/train/checkpoint.h"
#include "engine/train/make_run.h"
#include "engine/train/trainer.h"

namespace scaleinv {

namespace {

// Autoregressive sampling through Model::forward: the very multipliers used in training.
// checkpoint: the file the model came from (named by the error for a non-finite output).
std::string sample_text(Model& model, const std::string& checkpoint, const std::string& prompt, int tokens,
                        double temperature, uint64_t seed) {
  const ModelConfig& cfg = model.config();
  torch::NoGradGuard ng;
  model.eval();
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<int64_t> ids;
  for (unsigned char c : prompt) ids.push_back(c % cfg.vocab);
  if (ids.empty()) ids.push_back('\n' % cfg.vocab);
  std::string out;
  for (int i = 0; i < tokens; ++i) {
    const int64_t ctx = std::min<int64_t>(static_cast<int64_t>(ids.size()), cfg.seq_len);
    torch::Tensor x = torch::tensor(std::vector<int64_t>(ids.end() - ctx, ids.end()), torch::kLong).unsqueeze(0);
    torch::Tensor logits = model.forward(x).index({0, -1}).to(torch::kDouble);
    if (!torch::isfinite(logits).all().item<bool>())
      throw UserError(checkpoint, "params", "the model's output is not finite (NaN or inf weights)",
                      "sample a checkpoint of a run that did not diverge");
    int64_t next;
    if (temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      // Shifted so the largest logit is 0: a tiny temperature then sharpens toward greedy instead
      // of overflowing to inf / inf.
      torch::Tensor p = torch::softmax((logits - logits.max()) / temperature, 0);
      next = at::multinomial(p, 1, false, gen).item<int64_t>();
    }
    ids.push_back(next);
    out.push_back(static_cast<char>(next));
  }
  return out;
}

}  // namespace

void add_train_options(CLI::App* cmd, TrainArgs* a) {
  reads(cmd->add_option("--config", a->config, "TOML config (sections model, param, hp, optim, data, train)"));
  cmd->add_option("--set", a->sets, "override a field: section.key=value (repeatable)");
  cmd->add_flag("--resume", a->resume, "continue from out_dir/checkpoint.pt");
  cmd->add_option("--stop-after", a->stop_after, "stop (with a checkpoint) after this many steps in total");
  cmd->add_flag("--quiet", a->quiet, "no progress bar");
}

void check_train_args(const TrainArgs& a) {
  if (a.stop_after < -1 || a.stop_after == 0)
    throw UserError("command line", "--stop-after", fmt::format("{} steps", a.stop_after),
                    "give a step count of at least 1 (or leave it out to train to train.steps)");
}

void add_train_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<TrainArgs>();
  struct SampleOpts {
    std::string checkpoint, prompt = "In the beginning";
    int tokens = 200;
    double temperature = 0.8;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<SampleOpts>();

  auto* train = app.add_subcommand("train", "Train a model under a parameterization (config: examples/*.toml)");
  add_train_options(train, a.get());
  train->callback([a, &exit_code] {
    check_train_args(*a);
    TrainConfig cfg = load_train_config(a->config, a->sets);
    RunOptions ro;
    ro.resume = a->resume;
    ro.stop_after = a->stop_after;
    ro.show_progress = !a->quiet;
    // Ctrl-C or SIGTERM: stop after the step with a checkpoint (brain/util/stop_signal.h). Not in a
    // data-parallel rank, where launch ends the ranks together and a rank stopping alone would
    // leave the others waiting in an all-reduce.
    const char* world = std::getenv("WORLD_SIZE");
    if (world == nullptr || std::string(world) == "1") {
      install_stop_handlers();
      ro.stop_on_signal = true;
    }
    RunResult s = train_run(cfg, ro);
    if (s.rank == 0) std::fputs(render_summary(cfg, s).c_str(), stdout);  // data-parallel: rank 0 speaks
    if (s.diverged) {
      exit_code = Diverged::kExitCode;
      if (s.rank != 0) return;
      std::fprintf(stderr, "diverged at step %lld: the loss became NaN or inf (recorded in %s/run.json)\n",
                   static_cast<long long>(s.diverged_step), cfg.train.out_dir.c_str());
      return;
    }
    if (s.stopped_by) {
      exit_code = 128 + s.stopped_by;
      std::fprintf(stderr, "stopped by %s after step %lld of %lld; checkpoint in %s (fix: run the same command again with --resume to go on)\n",
                   stop_signal_name(s.stopped_by).c_str(), static_cast<long long>(s.steps_done),
                   static_cast<long long>(cfg.train.steps), cfg.train.out_dir.c_str());
      return;
    }
    exit_code = 0;
  });

  auto* sample = app.add_subcommand("sample", "Sample text from a trained language model's checkpoint");
  reads(sample->add_option("--checkpoint", o->checkpoint, "path to checkpoint.pt")->required());
  sample->add_option("--prompt", o->prompt, "text to continue");
  sample->add_option("--tokens", o->tokens, "bytes to generate");
  sample->add_option("--temperature", o->temperature, "softmax temperature (0: greedy)");
  sample->add_option("--seed", o->seed, "sampling seed");
  sample->callback([o, &exit_code] {
    if (o->tokens < 1 || o->tokens > 1000000)
      throw UserError("command line", "--tokens", fmt::format("{} tokens", o->tokens), "use from 1 to 1000000");
    if (!std::isfinite(o->temperature) || o->temperature < 0)
      throw UserError("command line", "--temperature", fmt::format("{} is not a finite number >= 0", o->temperature),
                      "use e.g. --temperature 0.8 (0: greedy)");
    CheckpointMeta meta = read_checkpoint_meta(o->checkpoint);
    if (!model_kind(meta.config.model.kind, o->checkpoint).language())
      throw UserError(o->checkpoint, "model.kind", "only language models can be sampled",
                      "train a language model (" + model_kind_list([](const ModelKind& k) { return k.language(); }) + ")");
    auto model = build_model(meta.config.model, run_context(meta.config, meta.table), meta.config.hp);
    load_checkpoint(o->checkpoint, *model, nullptr);
    std::string text = sample_text(*model, o->checkpoint, o->prompt, o->tokens, o->temperature, o->seed);
    // The bytes as generated (a byte-level model may emit NUL, which %s would stop at).
    const std::string line = o->prompt + text + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    exit_code = 0;
  });
}

}  // namespace scaleinv
