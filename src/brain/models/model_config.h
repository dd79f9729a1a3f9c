#pragma once
// A model's architecture (ModelConfig) and the hyperparameters the table scales (Hyper): plain
// data, no torch, so the configuration, its TOML/JSON forms and the coordinate check's judging build
// in the torch-free brain (docs/design.md "Build shape"). engine/models/model.h builds models from it.
#include <string>

namespace scaleinv {

// What the model is: architecture only, no parameterization.
struct ModelConfig {
  std::string kind = "gpt";       // a row of brain/models/model_kinds.h: bigram | mlp | resmlp | gpt | vit | llama | moe
  int width = 64;                 // d
  int depth = 2;                  // hidden layers (bigram), blocks (resmlp, gpt, vit)
  // language models
  int vocab = 256;
  int seq_len = 64;               // context (gpt); bigram ignores it
  // attention (gpt, vit): either a fixed head dimension (heads grow with width), or a fixed
  // head count (d_head grows with width) when n_heads > 0.
  int head_dim = 16;
  int n_heads = 0;
  std::string block = "pre";      // pre | post | keel  (seed 000 eqs. 32, 34)
  bool qk_norm = false;
  bool tied = false;              // tied embeddings: readout = embedding^T (see gpt.cpp)
  bool zero_readout = false;
  bool zero_query = false;
  int mlp_ratio = 4;
  // llama: grouped-query attention with kv_heads key/value heads at the base width (0: one per
  // query head); the query heads per key/value head, heads / kv_heads, stay fixed at every width,
  // so the K and V projections grow with the width at a fixed ratio. SwiGLU hidden width: round(8 d / 3)
  // up to a multiple of ffn_multiple. Rotary positions with base rope_theta.
  int kv_heads = 0;
  int ffn_multiple = 16;
  double rope_theta = 10000.0;
  // moe (Llama blocks whose MLP is a mixture of experts, engine/models/moe.cpp): `experts` SwiGLU experts of
  // hidden width swiglu_hidden(d) / granularity (rounded up to ffn_multiple), top_k of them per token
  // (softmax over the router's logits, renormalised over the chosen k), a Switch-style balance loss
  // aux_coef * E * sum_j f_j P_j added to the training loss, and with shared_expert one dense SwiGLU
  // of the same hidden width beside them. bias_rate > 0 balances without a loss term (ref.
  // [lossfree]): each block keeps a selection bias b per expert, the top k are chosen by z + b
  // (the gates still read p), and after every step b_j += bias_rate * sign(mean load - load_j).
  int experts = 8;
  int top_k = 2;
  int granularity = 1;
  double aux_coef = 0.01;
  double bias_rate = 0.0;         // logit units per step; 0: no selection bias
  bool shared_expert = false;
  // bigram (seed 000 eq. 1, App. C) and resmlp (seed 004)
  std::string activation = "linear";  // linear | relu | abs | tanh | gelu
  bool rmsnorm = false;           // bigram: h_l = RMSNorm(W h_{l-1}) (seed 000 Lemma E.3)
  int block_depth = 1;            // resmlp: 1 or 2 (seed 004 App. K)
  bool pre_ln = false;            // resmlp: LN on x_{l-1} before W_l (seed 004 App. L.2, Fig. 13)
  bool mean_subtract = true;      // resmlp: MS(x) = x - mean(x) (seed 004 4.2)
  // dense inputs (resmlp) and images (vit)
  int in_dim = 784;
  int n_classes = 10;
  int image_size = 28;
  int channels = 1;
  int patch = 7;
};

// Hyperparameters that the table scales (all 1 at their defaults; they mean the same at every
// width and depth because the table's factors are 1 at the base shapes).
struct Hyper {
  double init_scale = 1.0;    // global factor on every init std
  double output_mult = 1.0;   // readout multiplier
  double embed_mult = 1.0;    // embedding multiplier
  double branch_mult = 1.0;   // residual block multiplier a (seed 004 eq. 1)
  double attn_mult = 1.0;     // factor on the attention logit scale
  double router_mult = 1.0;   // factor on a mixture's router logits (engine/models/moe.cpp; 1 on dense models)
};

}  // namespace scaleinv
