// Weights packed side by side in one buffer (src/engine/models/packed_rows.h).
#include "engine/models/packed_rows.h"

#include <stdexcept>

#include "engine/runtime/torch_compat.h"

namespace scaleinv {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

bool same_layout(torch::TensorList ws) {
  if (ws.empty()) return false;
  for (const torch::Tensor& w : ws)
    if (!w.defined() || w.dim() != 2 || w.size(1) != ws[0].size(1) || w.scalar_type() != ws[0].scalar_type() ||
        w.device() != ws[0].device())
      return false;
  return true;
}

int64_t total_rows(torch::TensorList ws) {
  int64_t rows = 0;
  for (const torch::Tensor& w : ws) rows += w.size(0);
  return rows;
}

// The stacked [sum rows, cols] matrix over the storage the row blocks share (no copy, no autograd
// history: the caller's Function routes gradients to the blocks).
torch::Tensor stacked(torch::TensorList ws) {
  const int64_t cols = ws[0].size(1);
  return ws[0].detach().as_strided({total_rows(ws), cols}, {cols, 1}, ws[0].storage_offset());
}

struct PackedLinearFn : public torch::autograd::Function<PackedLinearFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, torch::TensorList ws) {
    torch::Tensor w = stacked(ws), xi = x;
    // Under autocast: cast here (once) and keep the casts for backward, where the incoming
    // gradient is in the autocast dtype; autograd casts each returned gradient to its input's.
    if (const auto dt = compat::autocast_dtype(x); dt && w.is_floating_point()) {
      w = w.to(*dt);
      xi = x.to(*dt);
    }
    std::vector<int64_t> rows;
    for (const torch::Tensor& b : ws) rows.push_back(b.size(0));
    ctx->saved_data["rows"] = rows;
    ctx->save_for_backward({xi, w});
    return torch::linear(xi, w);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    const torch::Tensor g = grads[0].scalar_type() == w.scalar_type() ? grads[0] : grads[0].to(w.scalar_type());
    const std::vector<int64_t> rows = ctx->saved_data["rows"].toIntVector();
    tensor_list out(1 + rows.size());
    if (ctx->needs_input_grad(0)) out[0] = torch::matmul(g, w);
    bool any_w = false;
    for (size_t i = 0; i < rows.size(); ++i) any_w = any_w || ctx->needs_input_grad(1 + i);
    if (any_w) {
      const torch::Tensor gw = torch::mm(g.reshape({-1, w.size(0)}).t(), x.reshape({-1, w.size(1)}));
      int64_t at = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (ctx->needs_input_grad(1 + i)) out[1 + i] = gw.narrow(0, at, rows[i]);
        at += rows[i];
      }
    }
    return out;
  }
};

}  // namespace

bool rows_adjacent(const std::vector<torch::Tensor>& ws) {
  if (!same_layout(ws)) return false;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (!ws[i].is_contiguous()) return false;
    if (i == 0) continue;
    if (!ws[i].storage().is_alias_of(ws[0].storage())) return false;
    if (ws[i].storage_offset() != ws[i - 1].storage_offset() + ws[i - 1].numel()) return false;
  }
  // The whole stack lies inside the shared storage (as_strided would throw otherwise).
  const int64_t end = (ws.back().storage_offset() + ws.back().numel()) * static_cast<int64_t>(ws[0].element_size());
  return end <= static_cast<int64_t>(ws[0].storage().nbytes());
}

bool pack_rows(const std::vector<torch::Tensor>& ws) {
  if (!same_layout(ws)) return false;
  if (rows_adjacent(ws)) return true;
  torch::NoGradGuard no_grad;
  torch::Tensor buf = torch::empty({total_rows(ws), ws[0].size(1)}, ws[0].options().requires_grad(false));
  int64_t at = 0;
  for (const torch::Tensor& w : ws) {
    torch::Tensor block = buf.narrow(0, at, w.size(0));
    block.copy_(w);
    // set_data keeps the tensor object (a registered parameter stays the one the module, the
    // optimizer's groups and the precision scope's names hold) and swaps its storage.
    torch::Tensor(w).set_data(block);
    at += w.size(0);
  }
  return true;
}

torch::Tensor linear_packed(const torch::Tensor& x, const std::vector<torch::Tensor>& ws) {
  if (!rows_adjacent(ws)) throw std::invalid_argument("linear_packed: the weights are not packed (pack_rows)");
  return PackedLinearFn::apply(x, torch::TensorList(ws));
}

}  // namespace scaleinv
