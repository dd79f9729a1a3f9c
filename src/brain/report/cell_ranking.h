#pragma once
// `scaleinv sweep rank --db` on a store of results imported from elsewhere (issue 60; an import is
// a grid, not a search's trials): per cell (one point of the store's scale axes, the re-tuned
// hyperparameters' points inside it), its runs ranked by seed-mean final loss (a point where a
// seed diverged ranks last), the best `top` of each with their regret against the cell's best, in
// percent. Pure: reads nothing but the table given, writes nothing.
#include <string>

#include "brain/report/transfer.h"

namespace scaleinv {

// The markdown ranking. The hyperparameters are the LR and table.hparam_axes; every other axis
// that varies (width, depth, N, D, ...) and the parameterization tell cells apart. UserError when
// top < 1.
std::string rank_cells_markdown(const SweepTable& table, int top = 3);

}  // namespace scaleinv
