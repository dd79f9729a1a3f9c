#pragma once
// Rendering of the theory engine's predictions: a fixed-width table for stdout and a JSON object
// (the form `scaleinv theory --json` writes and the coordinate check reads).
//
// JSON keys:
//   stable_init, stable_train, feature_learning, nontrivial   bools (width verdicts, seed 000)
//   layers              [{layer, role, h, h_grad, w_grad, dw, dh}] exponents of d (RMS ~ d^e), row l
//                       in the seed's indexing (see width_theory.h), null where the quantity does
//                       not exist; with RMSNorm each row also has u_rms (null outside normalised rows)
//   failed_conditions   [string], notes [string]
//   depth               {alpha, gamma, shortcut, region, label, stable_init, stable_train, stable,
//                        faithful, nontrivial, feature_learning, max_diversity, kappa (or null),
//                        exponents_of_L {top_init_rho_half, top_init_rho_one, update_correlated,
//                        update_uncorrelated, block_update}, postln_transport_bound {L, bound}}
//   param               the table (param_to_json)
//   optimizer           "sgd" | "adam" | "adafactor"
//   alignment           {omega_hidden, omega_readout, alpha, u}
//   model               {name, depth_L, rmsnorm}
#include <string>

#include <nlohmann/json.hpp>

#include "brain/theory/depth_theory.h"
#include "brain/theory/width_theory.h"

namespace scaleinv {

// An exponent as a simple fraction where it is one: -0.5 -> "-1/2", 1 -> "1".
std::string format_exponent(double e);

// The readable report: header, one row per layer (exponents of d), verdicts, failed conditions,
// notes and the depth classification (transport bound evaluated at L = w.depth). Verdicts that
// rest on an earlier one say so: unstable at init, "stable in training" reads "not judged
// (unstable at init)"; feature learning and nontriviality (1.2.3, stronger than stability) read
// "NO (unstable at init/in training; ...)" when the parameterization is not stable.
std::string theory_table(const WidthTheory& w, const DepthTheory& d);

// Every exponent and verdict; "stable_train_judged" is false when the init is unstable.
nlohmann::json theory_json(const WidthTheory& w, const DepthTheory& d);

}  // namespace scaleinv
