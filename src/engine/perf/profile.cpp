// Operator profile of a training run: see profile.h.
#include "engine/perf/profile.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "engine/train/trainer.h"

namespace scaleinv {

std::string profile_train(TrainConfig cfg, int64_t warmup, int64_t steps, int top) {
  namespace prof = torch::autograd::profiler;
  RunOptions ro;
  ro.show_progress = false;
  ro.write_files = false;
  ro.data_parallel = false;
  if (warmup > 0) {
    cfg.train.steps = warmup;
    train_run(cfg, ro);
  }
  // On CUDA the host returns from an op long before its kernels ran: time each op on the device
  // instead (the legacy profiler's CUDA state records an event on the stream at every push and
  // pop), so "self" is device time between the op's events minus its children's.
  const bool on_cuda = cfg.train.device == "cuda";
  struct Agg {
    double self_us = 0;
    int64_t calls = 0;
  };
  // One profiled run of n steps: self time and calls per op, and the run's wall time.
  auto profiled = [&](int64_t n, std::map<std::string, Agg>& agg) {
    cfg.train.steps = n;
    prof::TLSLegacyProfilerGuard guard(
        torch::profiler::impl::ProfilerConfig(on_cuda ? torch::profiler::impl::ProfilerState::CUDA
                                                      : torch::profiler::impl::ProfilerState::CPU),
        [&](const prof::thread_event_lists& lists) {
          for (const auto& list : lists) {
            // Ranges nest per thread: self = own duration - the durations of direct children.
            struct Open {
              const prof::LegacyEvent* push;
              double child_us;
            };
            std::vector<Open> stack;
            for (const auto& e : list) {
              if (e.kindStr() == "push") {
                stack.push_back({&e, 0.0});
              } else if (e.kindStr() == "pop" && !stack.empty()) {
                Open o = stack.back();
                stack.pop_back();
                const double dur = (on_cuda && o.push->hasCuda() && e.hasCuda()) ? o.push->cudaElapsedUs(e)
                                                                                 : o.push->cpuElapsedUs(e);
                Agg& a = agg[o.push->name()];
                a.self_us += dur - o.child_us;
                a.calls += 1;
                if (!stack.empty()) stack.back().child_us += dur;
              }
            }
          }
        });
    return train_run(cfg, ro).wall_s;
  };
  // The set-up of a run (init, the weights' upload, data) is the same in a run of 1 step and one of
  // steps + 1: their difference over `steps` is the steady step alone. (On CUDA the set-up's host
  // work spans whole seconds of device time between an op's two events.)
  std::map<std::string, Agg> one, agg;
  const double wall_one = profiled(1, one);
  const double wall_s = profiled(steps + 1, agg) - wall_one;
  for (const auto& [name, a] : one) {
    Agg& b = agg[name];
    b.self_us -= a.self_us;
    b.calls -= a.calls;
  }
  std::vector<std::pair<std::string, Agg>> rows;
  for (const auto& r : agg)
    if (r.second.calls > 0) rows.push_back(r);  // (an op of the set-up alone cancels to 0 calls)
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.self_us > b.second.self_us; });
  double self_total = 0;
  for (const auto& r : rows) self_total += std::max(0.0, r.second.self_us);
  std::string out = fmt::format(
      "profile: {} width {} depth {}, {} steps after the first (step loop {:.1f} ms/step under the profiler); self {} time per op\n",
      cfg.model.kind, cfg.model.width, cfg.model.depth, steps, 1000.0 * wall_s / static_cast<double>(steps),
      on_cuda ? "device (CUDA events)" : "CPU");
  out += fmt::format("  {:<58} {:>10} {:>12} {:>7}\n", "op", "calls/step", "ms/step", "share");
  int shown = 0;
  for (const auto& [name, a] : rows) {
    if (shown++ >= top) break;
    out += fmt::format("  {:<58} {:>10.1f} {:>12.2f} {:>6.1f}%\n", name.substr(0, 58),
                       static_cast<double>(a.calls) / static_cast<double>(steps),
                       a.self_us / 1000.0 / static_cast<double>(steps), 100.0 * a.self_us / std::max(self_total, 1e-9));
  }
  out += fmt::format("  total self time in ops {:.1f} ms/step\n", self_total / 1000.0 / static_cast<double>(steps));
  return out;
}

}  // namespace scaleinv
