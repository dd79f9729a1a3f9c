// Mixture-of-experts decoder (brain/models/model_kinds.h row "moe"; docs/moe.md; refs. [switch],
// [mup-moe], [completep-moe]): the Llama decoder (engine/models/llama.cpp) with each block's MLP a mixture
// of E SwiGLU experts:
//
//   z = d^-a_r W_r x                          W_r: [E, d], role Router (fan-in d, fan-out E)
//   p = softmax(z),  S = top-k of p,  g_j = p_j / sum_{i in S} p_i     (renormalised over the k chosen)
//   y = sum_{j in S} g_j  W_down,j (silu(W_gate,j x) * W_up,j x)  [+ SwiGLU_shared(x)]
//
// W_gate, W_up: [E, n, d], W_down: [E, d, n], role Expert (E hidden matrices; forward multiplier
// d^-a of the expert row), n = swiglu_hidden(d) / granularity rounded up to model.ffn_multiple.
// Dispatch is dropless: the N k (token, expert) pairs are sorted by expert and each expert runs its
// SwiGLU on its contiguous slice (no capacity, no dropped token; engine/models/expert_dispatch.h: one matmul
// per expert on the CPU, batched matmuls over zero-padded slices on CUDA), the outputs are weighted
// by g and added back to their tokens (index_add).
//
// Balance loss (Switch Transformer, ref. [switch] eq. 4): B = E sum_j f_j P_j, f_j the share of the
// N k assignments that went to expert j, P_j the mean router probability of j; 1 when the routing
// is uniform. The model's aux loss is model.aux_coef times the mean of B over the blocks (a mean, so
// the coefficient means the same at every depth); Model::loss adds it to the cross-entropy.
//
// Aux-loss-free balancing (model.bias_rate = u > 0; ref. [lossfree] Sec. 3 and its Algorithm 1):
// a per-expert bias b (a buffer "expert_bias", saved in checkpoints, not trained) moves the choice
// only,
//   S = top-k of z + b,   g_j = p_j / sum_{i in S} p_i   (the gates read the unbiased p),
// and after every step b_j += u * sign(mean_i c_i - c_j), c the step's assignment counts (with
// ranks, their mean over ranks: Model::balance_experts, called by the trainer). b is in logit
// units, as z is: under a muP router z is O(1) after training at every width, so u means the same
// at every width. With u = 0 the choice is the top k of p, as it was before b existed.
//
// The model is engine/models/llama_layers.h's LlamaDecoder with this feed-forward in every block. Records:
// as the Llama ("embed", "block{l}", "logits") plus "router{l}" (the router logits z of block l,
// role Router), which the coordinate check judges as a readout of the stream.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "engine/models/expert_dispatch.h"
#include "engine/models/llama_layers.h"
#include "brain/models/model_kinds.h"
#include "engine/models/zoo.h"

namespace scaleinv {

namespace {

class MoeFeedForward : public FeedForward {
 public:
  MoeFeedForward(int64_t d, const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp)
      : experts_(cfg.experts), top_k_(cfg.top_k), bias_rate_(cfg.bias_rate) {
    const int64_t n = expert_hidden(cfg.width, cfg.ffn_multiple, cfg.granularity);  // model_kinds.h
    // hp.router_mult: a base-shape constant on the logits, as hp.output_mult is on the readout's
    const auto router = DenseOptions(Role::Router).in_block(true).base_std(width_fan_in_std(d, ctx)).extra_mult(hp.router_mult);
    router_ = register_module("router", std::make_shared<Dense>(d, experts_, router, ctx, hp));
    auto expert = [&](const char* name, int64_t out, int64_t in) {
      const ParamTag tag{Role::Expert, true, width_fan_in_std(in, ctx)};
      return add_param(name, torch::randn({experts_, out, in}) * init_std(tag, ctx, hp), tag);
    };
    gate_ = expert("gate", n, d);
    up_ = expert("up", n, d);
    down_ = expert("down", d, n);
    mult_ = role_multiplier(Role::Expert, true, ctx);
    if (cfg.shared_expert) shared_ = register_module("shared", std::make_shared<SwiGlu>(d, n, ctx, hp));
    if (bias_rate_ > 0) bias_ = register_buffer("expert_bias", torch::zeros({experts_}));
  }

  torch::Tensor forward(const torch::Tensor& x) override {
    const int64_t d = x.size(-1);
    const torch::Tensor flat = x.reshape({-1, d});
    const int64_t N = flat.size(0), E = experts_, k = top_k_;
    logits_ = router_->forward(flat);                      // [N, E]
    const torch::Tensor probs = torch::softmax(logits_, -1);
    torch::Tensor top_p, top_i;                            // [N, k]
    if (bias_.defined()) {  // chosen by z + b, gated by p
      top_i = std::get<1>((logits_.detach() + bias_).topk(k, -1));
      top_p = probs.gather(1, top_i);
    } else {
      std::tie(top_p, top_i) = probs.topk(k, -1);
    }
    const torch::Tensor gates = top_p / top_p.sum(-1, true);
    // Balance loss: f_j from the (non-differentiable) assignment counts, P_j from the probabilities.
    const torch::Tensor flat_i = top_i.reshape({-1});      // [N k], pair p = token p / k
    // (a scatter, not bincount: CUDA's bincount reads the largest index back to the host first)
    const torch::Tensor counts = torch::zeros({E}, flat_i.options()).scatter_add_(0, flat_i, torch::ones_like(flat_i));
    if (load_.defined() && load_.device() == counts.device()) load_.add_(counts);
    else load_ = counts.clone();
    balance_ = static_cast<double>(E) * (counts.to(probs.scalar_type()) / static_cast<double>(N * k) * probs.mean(0)).sum();
    // Dropless dispatch: pairs sorted by expert, each expert's SwiGLU on its slice
    // (engine/models/expert_dispatch.h): one matmul per expert on the CPU, batched over zero-padded slices
    // on CUDA, where E launches per matrix rather than the arithmetic bound the step.
    const auto [sorted_expert, order] = flat_i.sort(/*stable=*/c10::optional<bool>(true), 0, false);
    const torch::Tensor token = torch::div(order, k, "floor");
    const torch::Tensor xs = flat.index_select(0, token);  // [N k, d]
    const torch::Tensor per = counts.cpu();
    const ExpertWeights weights{gate_, up_, down_, mult_};
    const torch::Tensor ys = flat.is_cuda() ? experts_padded(xs, sorted_expert, counts, per.max().item<int64_t>(), weights)
                                            : experts_looped(xs, per, weights);
    const torch::Tensor w = gates.reshape({-1}).index_select(0, order).unsqueeze(1);
    torch::Tensor out = torch::zeros_like(flat).index_add(0, token, ys * w);
    if (shared_) out = out + shared_->forward(flat);
    return out.view(x.sizes());
  }

  torch::Tensor router_logits() const override { return logits_; }  // z of the last forward, [N, E]
  torch::Tensor balance() const override { return balance_; }
  torch::Tensor take_counts() override {
    if (!load_.defined()) return torch::zeros({experts_}, gate_.options().dtype(torch::kInt64));
    torch::Tensor c = load_.clone();
    load_.zero_();
    return c;
  }
  void shift_bias(const torch::Tensor& counts) override {
    if (!bias_.defined()) return;
    torch::NoGradGuard ng;
    const torch::Tensor c = counts.to(bias_.device(), torch::kFloat64);
    bias_.add_((torch::sign(c.mean() - c) * bias_rate_).to(bias_.scalar_type()));
  }

 private:
  int64_t experts_, top_k_;
  double bias_rate_;
  std::shared_ptr<Dense> router_;
  torch::Tensor gate_, up_, down_;
  double mult_ = 1;
  std::shared_ptr<SwiGlu> shared_;
  torch::Tensor logits_, balance_;
  torch::Tensor bias_;  // [E] selection bias (bias_rate > 0), a registered buffer
  torch::Tensor load_;  // [E] int64: assignments since the last take_counts
};

}  // namespace

std::shared_ptr<FeedForward> make_moe_feed_forward(int64_t d, const ModelConfig& cfg, const ScaleContext& ctx,
                                                   const Hyper& hp) {
  validate_model_config(cfg, ctx);
  return std::make_shared<MoeFeedForward>(d, cfg, ctx, hp);
}

std::shared_ptr<Model> make_moe(const ModelConfig& cfg, const ScaleContext& ctx, const Hyper& hp) {
  ScaleContext c = ctx;
  c.experts = cfg.experts;  // the table's experts_lr acts through c.e() (and the optimizer's groups)
  return std::make_shared<LlamaDecoder>(cfg, c, hp, [&] { return std::make_shared<MoeFeedForward>(cfg.width, cfg, c, hp); });
}

}  // namespace scaleinv
