// The coordinate check of a model scaleinv did not write, judged from series measured elsewhere
// (coord_result.h judge_own_coordcheck), torch-free.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "brain/coordcheck/coord_detail.h"
#include "brain/coordcheck/coord_result.h"
#include "brain/optim/optimizer_kinds.h"
#include "brain/theory/depth_theory.h"
#include "brain/theory/width_theory.h"

namespace scaleinv {

using coord_detail::fit_rows;
using coord_detail::hidden_like;
using coord_detail::judge;
using coord_detail::LayerMapper;
using coord_detail::role_layer_map;
using coord_detail::sorted_unique;

CoordCheckResult judge_own_coordcheck(const OwnCoordInput& in) {
  const auto t0 = std::chrono::steady_clock::now();
  CoordCheckResult res;
  res.config.train.model.kind = in.model;
  res.config.train.optim.kind = in.optimizer;
  res.config.train.optim.muon_scale = muon_scale_name(in.muon_scale);
  res.config.seeds = in.seeds;
  res.config.steps = in.steps;
  res.config.show_progress = false;
  res.table = in.table;
  res.family = optimizer_kind(in.optimizer, "coordcheck", "optimizer").family;
  if (in.seeds.empty()) throw UserError("coordcheck", "seeds", "no seeds", "use 2 or more seeds");
  if (in.steps < 1) throw UserError("coordcheck", "steps", fmt::format("{} steps", in.steps), "use at least 1 step");
  std::vector<int> widths;
  for (const CoordRun& r : in.runs) widths.push_back(r.width);
  res.widths = sorted_unique(widths);
  res.depths = {1};
  if (res.widths.size() < 2)
    throw UserError("coordcheck", "widths", "a slope needs at least 2 widths", "give e.g. widths = [64, 128, 256]");
  std::map<std::string, const OwnCoordLayer*> layer_of;
  for (const OwnCoordLayer& l : in.layers) layer_of[(l.weight ? "w:" : "a:") + l.name] = &l;
  for (int w : res.widths)
    for (int64_t s : in.seeds) {
      const CoordRun* run = nullptr;
      for (const CoordRun& r : in.runs)
        if (r.width == w && r.seed == s) run = &r;
      if (!run)
        throw UserError("coordcheck", "runs", fmt::format("no run for width {} seed {}", w, s),
                        "measure every (width, seed) pair");
      for (const CoordSeries& se : run->series) {
        if (se.rms.size() != static_cast<size_t>(in.steps + 1))
          throw UserError("coordcheck", se.layer,
                          fmt::format("has {} values, not steps + 1 = {}", se.rms.size(), in.steps + 1),
                          "record steps 0..T (NaN where undefined)");
        if (!layer_of.count((is_activation_quantity(se.q) ? "a:" : "w:") + se.layer))
          throw UserError("coordcheck", se.layer, "is measured but not among the layers", "list every measured layer");
      }
    }
  for (CoordRun r : in.runs) {
    r.depth = 1;
    res.runs.push_back(std::move(r));
  }
  res.n_probe = in.n_probe;
  res.n_out = in.n_out;

  // The theory's L: 2 for blocks (every sublayer applies two matrices to a normalised input, as
  // the zoo's gpt), else the chain's hidden count (outputs or matrices, whichever is larger).
  bool blocks = false;
  int hidden_outputs = 0, hidden_weights = 0;
  for (const OwnCoordLayer& l : in.layers)
    if (l.role && hidden_like(*l.role)) {
      blocks = blocks || l.in_block;
      ++(l.weight ? hidden_weights : hidden_outputs);
    }
  const int L = blocks ? 2 : std::max({hidden_outputs, hidden_weights, 1});
  const LayerMapper map_layer = role_layer_map(in.layers, /*depth_rows=*/false);
  std::map<int, WidthTheory> width_theories;
  width_theories.emplace(1, width_theory(res.table, res.family, L, {}, false, in.muon_scale));
  res.width_theory = width_theories.at(1);
  res.theory_depth = L;
  res.theory_note = blocks ? "residual stream = hidden activations of width_theory(L = 2): hidden tensors in repeated "
                             "blocks (as the zoo's gpt)"
                           : fmt::format("a chain: embedding output h_1, {} hidden output(s) h_2..h_{}, logits h_{} "
                                         "(width_theory(L = {}))",
                                         hidden_outputs, L + 1, L + 2, L);
  res.depth_theory = depth_theory(res.table, res.family);
  // The logit scale is the user's own (not a table multiplier): W_q, W_k's gradient is modelled
  // only for the 1/sqrt(d_head) the bigram theory assumes, as for the zoo (width_prediction).
  const bool qk_unmodelled = std::fabs(res.table.attn_logit - 0.5) > kExponentTol;
  fit_rows(res, width_theories, "", qk_unmodelled, true, map_layer);
  judge(res);
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace scaleinv
