// The coordinate check's layer map (see coordcheck.h, "Predictions come from roles"): which theory
// row every recorded activation and every parameter follows. A layer without one gets "no
// prediction" (still measured).
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "brain/coordcheck/coord_detail.h"
#include "brain/coordcheck/coord_result.h"

namespace scaleinv::coord_detail {

bool hidden_like(Role r) {
  return r != Role::Embedding && r != Role::Readout && r != Role::Vector && r != Role::Router;
}

// The layer map from roles (coordcheck.h), one for the zoo's models and a user's: a chain (no
// hidden tensor in a repeated block) maps its i-th hidden output onto h_{i+1} and its i-th hidden
// matrix onto W_i of seed 000 eq. 1; with blocks, every hidden output is the residual stream and
// every block matrix a hidden W. Along depth (depth_rows: seed 004's residual MLP, the model
// depth_theory describes) the top of the stream ("top") and the readout's output are mapped.
LayerMapper role_layer_map(const std::vector<OwnCoordLayer>& layers, bool depth_rows) {
  bool blocks = false;
  for (const OwnCoordLayer& l : layers)
    if (l.role && hidden_like(*l.role) && l.in_block) blocks = true;
  std::map<std::string, Mapping> acts, weights;
  int hidden_acts = 0, hidden_weights = 0;
  for (const OwnCoordLayer& l : layers) {
    if (!l.role || *l.role == Role::Vector) continue;  // norm gains, biases: no prediction
    const Role r = *l.role;
    Mapping m;
    m.found = true;
    m.routed = l.weight && (r == Role::Router || r == Role::Expert);
    if (l.weight) {
      if (l.tied) continue;  // W_0 and W_{L+1} at once: no single row
      if (r == Role::Embedding) {
        m.target = Target::EmbeddingW;
        m.what = "W_0 (embedding)";
      } else if (r == Role::Readout) {
        m.target = Target::ReadoutW;
        m.what = "W_L+1 (readout)";
      } else if (r == Role::Router) {
        m.target = Target::RouterW;
        m.what = "router W_r (a readout of the stream)";
      } else if (blocks) {
        m.target = r == Role::AttnQ || r == Role::AttnK ? Target::HiddenWQK : Target::HiddenW;
        m.what = "hidden W";
      } else {
        m.row = ++hidden_weights;
        m.what = fmt::format("W_{} (hidden)", m.row);
      }
      weights[l.name] = m;
    } else {
      if (r == Role::Embedding) {
        m.row = 1;
        m.what = "h_1 (embedding output)";
      } else if (r == Role::Readout) {
        m.target = l.tied ? Target::TiedLogits : Target::Logits;
        m.what = l.tied ? "h_L+2 = logits (tied readout)" : "h_L+2 = logits";
      } else if (r == Role::Router) {
        m.target = Target::RouterLogits;
        m.what = "router logits z (as h_L+2 under the router row)";
      } else if (blocks) {
        m.target = Target::Stream;
        m.what = "hidden h (residual stream)";
      } else {
        m.row = ++hidden_acts + 1;
        m.what = fmt::format("h_{} (seed 000 eq. 1)", m.row);
      }
      acts[l.name] = m;
    }
  }
  return [acts, weights, depth_rows](const std::string& axis, bool weight, const std::string& name) {
    Mapping m;
    if (axis == "depth") {
      if (!depth_rows || weight) return m;
      m.found = true;
      if (name == "top") {
        m.target = Target::DepthTop;
        m.what = "top activation x_L (seed 004)";
        return m;
      }
      const auto it = acts.find(name);
      if (it != acts.end() && (it->second.target == Target::Logits || it->second.target == Target::TiedLogits)) {
        m.target = Target::DepthLogits;
        m.what = "logits f = V x_L (seed 004)";
        return m;
      }
      return Mapping{};
    }
    const auto& map = weight ? weights : acts;
    const auto it = map.find(name);
    return it == map.end() ? m : it->second;
  };
}

}  // namespace scaleinv::coord_detail
