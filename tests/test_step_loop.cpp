// The one step loop (engine/train/step_loop.h): the order of its phases, the LR schedule it applies, and
// where each hook stops it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/optim/optimizer.h"
#include "engine/train/step_loop.h"

using namespace scaleinv;

namespace {

// One scalar parameter w (init 1) under plain SGD with lr 0.1; the loss of every step is w^2 / 2,
// so the gradient is w and each update is w <- w - 0.1 * factor(t) * w.
struct Scalar {
  torch::Tensor w = torch::ones({1}).requires_grad_(true);
  std::unique_ptr<Optimizer> opt;
  explicit Scalar(OptimConfig oc = {}) {
    oc.kind = "sgd";
    oc.lr = 0.1;
    oc.momentum = 0.0;
    ParamGroup g;
    g.name = "w";
    g.param = w;
    opt = make_optimizer(oc, {g});
  }
  double value() const { return w.item<double>(); }
};

StepHooks plain(Scalar& s, std::vector<std::string>& trace) {
  StepHooks h;
  h.loss = [&s, &trace](int64_t t) {
    trace.push_back("loss " + std::to_string(t));
    return s.w.pow(2).sum() / 2;
  };
  h.after_backward = [&s, &trace](int64_t t) {
    // The gradient is this step's alone (zero_grad ran before backward): exactly w.
    EXPECT_DOUBLE_EQ(s.w.grad().item<double>(), s.value());
    trace.push_back("backward " + std::to_string(t));
    return true;
  };
  h.after_step = [&trace](int64_t done) {
    trace.push_back("done " + std::to_string(done));
    return true;
  };
  return h;
}

}  // namespace

TEST(StepLoop, RunsThePhasesInOrderAndAppliesTheSchedule) {
  OptimConfig oc;
  oc.warmup_steps = 4;  // factor (t + 1) / 4 at steps 0..3
  Scalar s(oc);
  std::vector<std::string> trace;
  EXPECT_EQ(run_steps(*s.opt, 0, 3, plain(s, trace)), 3);
  EXPECT_EQ(trace, (std::vector<std::string>{"loss 0", "backward 0", "done 1", "loss 1", "backward 1", "done 2",
                                             "loss 2", "backward 2", "done 3"}));
  double w = 1.0;
  for (int t = 0; t < 3; ++t) w -= 0.1 * (t + 1) / 4.0 * w;
  EXPECT_NEAR(s.value(), w, 1e-7);
}

TEST(StepLoop, StartsAtFirstAndStopsWhereEachHookSays) {
  {  // resumed from step 5: the schedule's step, not the count, decides the factor
    OptimConfig oc;
    oc.warmup_steps = 10;
    Scalar s(oc);
    std::vector<std::string> trace;
    EXPECT_EQ(run_steps(*s.opt, 5, 6, plain(s, trace)), 6);
    EXPECT_NEAR(s.value(), 1.0 - 0.1 * 0.6, 1e-7);
  }
  {  // an undefined loss (diverged) at step 2: no update at 2, the loop reports 2 steps done
    Scalar s;
    std::vector<std::string> trace;
    StepHooks h = plain(s, trace);
    auto inner = h.loss;
    h.loss = [inner](int64_t t) { return t == 2 ? torch::Tensor() : inner(t); };
    EXPECT_EQ(run_steps(*s.opt, 0, 10, h), 2);
    EXPECT_NEAR(s.value(), 0.81, 1e-7);
    EXPECT_EQ(trace.back(), "done 2");
  }
  {  // after_backward false at step 1: step 1's update is not taken
    Scalar s;
    std::vector<std::string> trace;
    StepHooks h = plain(s, trace);
    h.after_backward = [](int64_t t) { return t != 1; };
    EXPECT_EQ(run_steps(*s.opt, 0, 10, h), 1);
    EXPECT_NEAR(s.value(), 0.9, 1e-7);
  }
  {  // after_step false after the 3rd update: 3 steps done
    Scalar s;
    std::vector<std::string> trace;
    StepHooks h = plain(s, trace);
    h.after_step = [](int64_t done) { return done < 3; };
    EXPECT_EQ(run_steps(*s.opt, 0, 10, h), 3);
    EXPECT_NEAR(s.value(), 0.729, 1e-7);
  }
  {  // no hooks but the loss; an empty range takes no step
    Scalar s;
    StepHooks h;
    h.loss = [&s](int64_t) { return s.w.pow(2).sum() / 2; };
    EXPECT_EQ(run_steps(*s.opt, 0, 0, h), 0);
    EXPECT_EQ(s.value(), 1.0);
    EXPECT_EQ(run_steps(*s.opt, 0, 1, h), 1);
    EXPECT_NEAR(s.value(), 0.9, 1e-7);
  }
}

TEST(StepLoop, LossAndGradReplacesForwardAndBackward) {
  // The CUDA-graph path's shape on the CPU: the hook leaves the gradient in .grad itself (here
  // written in place into a buffer created once, as a replayed graph rewrites its own), zero_grad
  // is not called, and the updates are those of the plain loop.
  Scalar plain_s, own;
  std::vector<std::string> trace;
  run_steps(*plain_s.opt, 0, 5, plain(plain_s, trace));
  StepHooks h;
  h.loss = [](int64_t) -> torch::Tensor {
    ADD_FAILURE() << "loss called beside loss_and_grad";
    return {};
  };
  torch::Tensor grad = torch::zeros({1});
  own.w.mutable_grad() = grad;
  h.loss_and_grad = [&](int64_t) {
    EXPECT_TRUE(own.w.grad().is_same(grad));  // nobody reset it between steps
    grad.copy_(own.w.detach());               // d(w^2 / 2)/dw
    return (own.w.detach().pow(2) / 2).sum();
  };
  EXPECT_EQ(run_steps(*own.opt, 0, 5, h), 5);
  EXPECT_DOUBLE_EQ(own.value(), plain_s.value());
  // An undefined loss stops the loop before that step's update, as with `loss`.
  h.loss_and_grad = [](int64_t t) { return t == 2 ? torch::Tensor() : torch::ones({1}); };
  EXPECT_EQ(run_steps(*own.opt, 0, 5, h), 2);
}
