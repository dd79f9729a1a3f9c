// `scaleinv bench [--json PATH] [--device cpu|cuda] [--quick] [--widths 64,128,...] [--steps N] [--quiet]`
// Speed benchmark (engine/perf/bench.h): sgemm peak, GPT training throughput at the peer's shapes, the
// batched-ensemble time ratio and the coordinate-check step time, with a summary table.
// bench/compare_peer.sh runs it beside the Python peer and prints the ratios.
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "engine/perf/bench.h"
#include "engine/perf/profile.h"

namespace scaleinv {

void add_bench_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string json, device = "cpu", autocast = "auto";
    std::vector<int> widths;
    int depth = 4, seq_len = 128, batch = 16;
    int64_t steps = -1;
    int profile = 0;
    bool quick = false, quiet = false, gpt_only = false, cuda_graph = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("bench", "Speed benchmark: sgemm peak, GPT training tokens/s (the peer's shapes), "
                                          "ensemble ratio, coordinate-check step time");
  writes(cmd->add_option("--json", o->json, "write the results as JSON to this path"));
  cmd->add_option("--device", o->device, "cpu (default) or cuda (bf16 autocast; needs a CUDA build)");
  cmd->add_flag("--quick", o->quick, "few steps, widths 64 and 128 only (tests; timings are rough)");
  cmd->add_option("--widths", o->widths, "GPT widths, multiples of 64 (default 64 128 256 512)")->delimiter(',');
  cmd->add_option("--steps", o->steps, "measured training steps per width (default 20, quick 2)");
  cmd->add_option("--depth", o->depth, "GPT depth (default 4, the CPU peer's)");
  cmd->add_option("--seq-len", o->seq_len, "GPT context length (default 128)");
  cmd->add_option("--batch", o->batch, "GPT batch size (default 16)");
  cmd->add_option("--autocast", o->autocast, "auto (bf16 on cuda, off on cpu), bf16 or off");
  cmd->add_flag("--cuda-graph", o->cuda_graph, "GPT runs replay a captured CUDA graph per step (train.cuda_graph; cuda only)");
  cmd->add_flag("--quiet", o->quiet, "no progress bar");
  cmd->add_flag("--gpt-only", o->gpt_only, "only the sgemm peak and GPT throughput (no ensemble, no coordcheck)");
  cmd->add_option("--profile", o->profile,
                  "instead: profile GPT training at this width (autograd profiler, self time per operator)");
  cmd->callback([o, &exit_code] {
    if (o->steps == 0 || o->steps < -1)
      throw UserError("command line", "--steps", fmt::format("{} steps", o->steps), "use at least 1 step");
    if (o->profile != 0) {
      if (o->profile < 0 || o->profile % 64 != 0)
        throw UserError("command line", "--profile", fmt::format("width {} is not a positive multiple of 64", o->profile),
                        "use e.g. --profile 64 or --profile 512");
      const int64_t steps = o->steps > 0 ? o->steps : (o->quick ? 2 : 10);
      TrainConfig tc =
          bench_gpt_config(o->profile, o->depth, o->seq_len, o->batch, steps, o->device, o->autocast, o->cuda_graph);
      std::fputs(profile_train(tc, o->quick ? 1 : 3, steps).c_str(), stdout);
      exit_code = 0;
      return;
    }
    BenchConfig cfg;
    cfg.device = o->device;
    cfg.depth = o->depth;
    cfg.seq_len = o->seq_len;
    cfg.batch = o->batch;
    cfg.autocast = o->autocast;
    cfg.cuda_graph = o->cuda_graph;
    cfg.quick = o->quick;
    cfg.widths = o->widths;
    cfg.steps = o->steps;
    cfg.gpt_only = o->gpt_only;
    cfg.show_progress = !o->quiet;
    const BenchResult r = run_bench(cfg);
    std::fputs(render_bench(r).c_str(), stdout);
    if (!o->json.empty()) {
      write_file_atomic(o->json, bench_to_json(r).dump(1) + "\n");
      std::printf("wrote %s\n", o->json.c_str());
    }
    exit_code = 0;
  });
}

}  // namespace scaleinv
