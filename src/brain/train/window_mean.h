#pragma once
// A run's final loss from its curve (torch-free: the trainer, the ensembles and the sweep store use it).
#include <vector>

namespace scaleinv {

// Mean of the last ceil(fraction x n) values (at least one, at most n); NaN when empty.
// RunResult::final_loss is window_mean(losses, kFinalWindow); sweeps use their [sweep] window.
double window_mean(const std::vector<double>& losses, double fraction);
inline constexpr double kFinalWindow = 0.1;

}  // namespace scaleinv
