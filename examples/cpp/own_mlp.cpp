// Your own libtorch module under muP (issue 15): the muP paper's MLP written here, not taken from
// scaleinv's zoo, trained at width 128 and 1024 with one base learning rate through
// apply_parameterization (src/adapt/apply_module.h). Built as build/examples/own_mlp:
//   build/examples/own_mlp [--param mup|standard] [--lr 0.01] [--steps 200]
#include <cstdio>
#include <cstring>
#include <string>

#include <torch/torch.h>

#include "adapt/apply_module.h"
#include "core/errors.h"
#include "optim/optimizer.h"
#include "param/table.h"

struct MyMlpImpl : torch::nn::Module {
  explicit MyMlpImpl(int width) {
    fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(32, width).bias(false)));
    fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(width, width).bias(false)));
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(width, 10).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return head(torch::relu(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, head{nullptr};
};
TORCH_MODULE(MyMlp);

int main(int argc, char** argv) {
  std::string param = "mup";
  double lr = 1e-2;
  int steps = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--param")) param = argv[i + 1];
    else if (!std::strcmp(argv[i], "--lr")) lr = std::stod(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::stoi(argv[i + 1]);
  }
  try {
    // A fixed teacher: labels from a random 2-layer net on Gaussian inputs.
    torch::manual_seed(0);
    const torch::Tensor teacher1 = torch::randn({32, 64}), teacher2 = torch::randn({64, 10});
    auto batch = [&](int64_t i) {
      torch::manual_seed(1000 + i);
      torch::Tensor x = torch::randn({64, 32});
      return std::make_pair(x, torch::relu(x.matmul(teacher1)).matmul(teacher2).argmax(1));
    };
    MyMlp base(128), delta(256);
    std::printf("param %s, AdamW base lr %g, %d steps\n", param.c_str(), lr, steps);
    for (int width : {128, 1024}) {
      torch::manual_seed(1);
      MyMlp model(width);
      scaleinv::OptimConfig cfg;
      cfg.kind = "adamw";
      cfg.lr = lr;
      scaleinv::OwnApplied a = scaleinv::apply_parameterization(*model, *base, *delta, scaleinv::preset(param), cfg);
      auto opt = scaleinv::make_optimizer(cfg, a.groups);
      double first = 0, last = 0;
      for (int s = 0; s < steps; ++s) {
        auto [x, y] = batch(s);
        opt->zero_grad();
        torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
        loss.backward();
        opt->step(1.0);
        (s == 0 ? first : last) = loss.item<double>();
      }
      std::printf("  width %5d: loss %.3f -> %.3f   (", width, first, last);
      for (const auto& g : a.groups) std::printf("%s %s lr x%.3g  ", g.name.c_str(), scaleinv::role_name(g.role), g.lr_mult);
      std::printf(")\n");
    }
  } catch (const scaleinv::UserError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return scaleinv::UserError::kExitCode;
  }
  return 0;
}
