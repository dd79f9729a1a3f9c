// Your own libtorch module under muP, from C++ (issue 15): the muP paper's MLP written here, not
// taken from scaleinv's zoo, run through the three things a user does with it:
//   1. the coordinate check, judged against the theory (engine/adapt/module_coordcheck.h), under the
//      chosen parameterization: pass/fail and the update rows;
//   2. a learning-rate sweep at two widths under mup and under standard, every run trained through
//      apply_parameterization (engine/adapt/apply_module.h) with one base learning rate: where the best
//      LR sits at each width and how far it moves;
//   3. nothing else: the module's forward stays as written (the eq. 28 shift folds the table's
//      multipliers into the init and the per-tensor learning rates).
// Built as build/examples/own_mlp:
//   build/examples/own_mlp [--param mup|standard] [--steps 200] [--seeds 3] [--skip-sweep]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "engine/adapt/apply_module.h"
#include "engine/adapt/module_coordcheck.h"
#include "brain/util/errors.h"
#include "engine/runtime/threads.h"
#include "engine/optim/optimizer.h"
#include "brain/param/table.h"

struct MyMlpImpl : torch::nn::Module {
  explicit MyMlpImpl(int width) {
    fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(32, width).bias(false)));
    fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(width, width).bias(false)));
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(width, 10).bias(false)));
  }
  // tap: the coordinate check's recorder (module outputs, named as the modules); nullptr to train.
  torch::Tensor forward(const torch::Tensor& x, scaleinv::ActivationTap* tap = nullptr) {
    auto rec = [&](const char* name, const torch::Tensor& h) { return tap ? (*tap)(name, h) : h; };
    torch::Tensor h = torch::relu(rec("fc1", fc1(x)));
    h = torch::relu(rec("fc2", fc2(h)));
    return rec("head", head(h));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, head{nullptr};
};

namespace {

// A fixed teacher: labels from a random 2-layer net on Gaussian inputs; batch i is the same for
// every run.
struct Teacher {
  torch::Tensor w1, w2;
  Teacher() {
    torch::manual_seed(0);
    w1 = torch::randn({32, 64});
    w2 = torch::randn({64, 10});
  }
  std::pair<torch::Tensor, torch::Tensor> batch(int64_t i, int64_t size = 64) const {
    torch::manual_seed(1000 + i);
    torch::Tensor x = torch::randn({size, 32});
    return {x, torch::relu(x.matmul(w1)).matmul(w2).argmax(1)};
  }
};

// Trains a fresh MyMlp(width) (seed 1) for `steps` AdamW steps at base learning rate lr under
// `param`; returns the mean training loss over the last 20 steps (NaN if it diverged).
double train(const Teacher& teacher, const std::string& param, int width, double lr, int steps) {
  auto base = std::make_shared<MyMlpImpl>(128), delta = std::make_shared<MyMlpImpl>(256);
  torch::manual_seed(1);
  auto model = std::make_shared<MyMlpImpl>(width);
  scaleinv::OptimConfig cfg;
  cfg.kind = "adamw";
  cfg.lr = lr;
  scaleinv::OwnApplied a = scaleinv::apply_parameterization(*model, *base, *delta, scaleinv::preset(param), cfg);
  auto opt = scaleinv::make_optimizer(cfg, a.groups);
  double tail = 0;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = teacher.batch(s);
    opt->zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    const double v = loss.item<double>();
    if (!std::isfinite(v)) return NAN;
    loss.backward();
    opt->step(scaleinv::schedule_factor(cfg, s));
    if (s >= steps - 20) tail += v / 20;
  }
  return tail;
}

}  // namespace

int main(int argc, char** argv) {
  std::string param = "mup";
  int steps = 200, seeds = 3;
  bool sweep = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--skip-sweep")) sweep = false;
    else if (i + 1 < argc && !std::strcmp(argv[i], "--param")) param = argv[++i];
    else if (i + 1 < argc && !std::strcmp(argv[i], "--steps")) steps = std::stoi(argv[++i]);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--seeds")) seeds = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "error: command line: unknown argument '%s' (fix: --param P --steps N --seeds S --skip-sweep)\n", argv[i]);
      return scaleinv::UserError::kExitCode;
    }
  }
  // Split the cores as `scaleinv` does (engine/runtime/threads.h): OpenBLAS's pool takes the matmuls,
  // libtorch's own pool stays on this thread, so the two pools do not fight over the cores.
  scaleinv::configure_threads();
  try {
    const Teacher teacher;
    // 1. The coordinate check on the module as written, under `param`.
    scaleinv::ModuleCoordCheck cc;
    cc.widths = {128, 256, 512, 1024};
    cc.seeds.clear();
    for (int s = 0; s < seeds; ++s) cc.seeds.push_back(s);
    cc.param = param;
    cc.optim.kind = "adamw";
    cc.optim.lr = 1e-2;
    cc.model_name = "MyMlp";
    cc.show_progress = false;
    auto make = [](int width) { return std::make_shared<MyMlpImpl>(width); };
    auto loss = [](torch::nn::Module& m, const torch::Tensor& x, const torch::Tensor& y, scaleinv::ActivationTap& tap) {
      return torch::nn::functional::cross_entropy(static_cast<MyMlpImpl&>(m).forward(x, &tap), y);
    };
    const scaleinv::CoordCheckResult r = scaleinv::coordcheck_module(make, loss, {teacher.batch(-1, 16)}, cc);
    std::printf("coordinate check of MyMlp under %s (AdamW lr 0.01, widths 128..1024, %d seeds, 3 steps): %s\n",
                param.c_str(), seeds, r.pass() ? "PASS" : "FAIL");
    std::printf("  %-6s %-12s %8s %9s  verdict\n", "qty", "tensor", "measured", "predicted");
    for (const auto& row : r.rows) {
      const std::string q = scaleinv::coord_quantity_name(row.q);
      if (row.step != 1 || (q != "dh" && q != "dW")) continue;
      const bool ok = row.matches.value_or(true) && row.stable.value_or(true);
      char pred[32] = "-";
      if (row.predicted) std::snprintf(pred, sizeof pred, "%+.2f", *row.predicted + 0.0);
      std::printf("  %-6s %-12s %+8.2f %9s  %s\n", q.c_str(), row.layer.c_str(), row.fit.slope, pred, ok ? "ok" : "FAILED");
    }
    for (const auto& f : r.failures) std::printf("  %s\n", f.c_str());
    if (!sweep) return 0;

    // 2. A learning-rate sweep at widths 128 and 1024 under mup and standard.
    std::printf("\nlearning-rate sweep: AdamW, %d steps, loss = mean of the last 20 steps\n", steps);
    std::printf("  %-8s %5s", "param", "width");
    const std::vector<int> log2_lrs = {-12, -11, -10, -9, -8, -7, -6, -5, -4};
    for (int e : log2_lrs) std::printf("  2^%-4d", e);
    std::printf("  best\n");
    for (const std::string p : {"mup", "standard"}) {
      std::map<int, int> best;
      for (int width : {128, 1024}) {
        std::printf("  %-8s %5d", p.c_str(), width);
        double best_loss = INFINITY;
        for (int e : log2_lrs) {
          const double l = train(teacher, p, width, std::ldexp(1.0, e), steps);
          std::printf("  %6.3f", l);
          if (l < best_loss) best_loss = l, best[width] = e;
        }
        std::printf("  2^%d\n", best[width]);
      }
      std::printf("  %s: the best learning rate moves %+d doublings from width 128 to 1024\n", p.c_str(),
                  best[1024] - best[128]);
    }
  } catch (const scaleinv::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return scaleinv::UserError::kExitCode;
  }
  return 0;
}
