#pragma once
// What a tensor is to the parameterization, and the context that turns it into numbers: the
// role tag every model gives each trainable tensor (ParamTag), the tensor with its tag
// (TaggedParam: what a model hands the optimizer), and the table plus shapes a layer sizes itself
// from (ScaleContext). Here, below models and optim, so that the optimizer's param groups
// (engine/optim/optimizer.h) need no model: a tagged tensor from the zoo, from a user's module
// (adapt/) or from a test is the same thing. Throws nothing.
#include <string>

#include <ATen/core/Tensor.h>

#include "brain/param/table.h"

namespace scaleinv {

// Everything a layer needs to size itself: the table, the optimizer family, the shapes.
struct ScaleContext {
  ParamTable table;
  OptFamily family = OptFamily::Adam;
  int width = 64;
  int depth = 2;
  // > 0: a batched ensemble of this many members (engine/train/ensemble.h). Every tensor then carries a
  // leading [members] dimension, inputs are [members, batch, ...] and logits [members, batch, ...];
  // member e computes exactly what a single model with member e's tensors computes.
  int members = 0;
  // > 0: a mixture of this many experts (engine/models/moe.cpp); the table's experts_lr acts through e().
  int experts = 0;
  double m() const { return table.width_mult(width); }
  double k() const { return table.depth_mult(depth); }
  double e() const { return table.experts_mult(experts); }
  TensorScale scale(Role r, bool in_block, double base_std = 0) const {
    return tensor_scale(table, r, family, m(), k(), in_block, base_std, e());
  }
};

struct ParamTag {
  Role role = Role::Hidden;
  bool in_block = false;      // inside a residual block: the table's depth exponents apply
  double base_std = 0;        // init std at the base shape, before the table's m^-b (0: constant init)
  bool tied = false;          // also the readout (tied embeddings): W_0 and W_{L+1} at once
};

struct TaggedParam {
  std::string name;           // fully qualified, e.g. "blocks.2.attn.q"
  at::Tensor tensor;
  ParamTag tag;
};

}  // namespace scaleinv
