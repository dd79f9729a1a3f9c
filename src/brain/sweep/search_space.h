#pragma once
// A hyperparameter search in a sweep file (issue 16): [search] samples configurations from a
// space instead of listing a grid, and may prune them by successive halving. The [grid] axes
// (e.g. param, seed) are crossed with every sampled trial; a trial is ranked within its group (the
// grid point without its seed) by the mean final loss over seeds.
//
//   [search]
//   method = "halving"      # "random": every trial at train.steps; "halving": successive halving
//                           # (Jamieson and Talwalkar 2016, ref. [halving]);
//                           # "hyperband": brackets of successive halving (below)
//   trials = 27             # configurations, quasi-random: a Halton sequence shifted by `seed`
//                           # (hyperband: the first, most aggressive bracket's)
//   seed = 0
//   eta = 3                 # halving: each rung keeps the best floor(n / eta) (at least 1) per group
//   min_steps = 100         # halving: the shortest rung's floor; the last rung trains train.steps,
//                           # each rung before it 1/eta of the next (300, eta 3, 33: 33, 100, 300)
//   [search.space]
//   lr_log2 = {from = -12, to = -4}                     # uniform (lr_log2 is already a log)
//   "hp.output_mult" = {from = 0.25, to = 4, log = true} # log-uniform
//   "optim.beta2" = [0.95, 0.99, 0.999]                  # one of these
//
// Hyperband (Li et al. 2018, ref. [hyperband] in docs/references.md; their Algorithm 1): with the
// halving rungs r_0 < ... < r_K (R = r_K = train.steps), bracket s = K, K-1, ..., 0 starts
// n_s = ceil(trials * (K+1)/(s+1) * eta^(s-K)) new trials at rung K - s and halves them s times, so
// that every bracket spends about the same budget; bracket K is exactly method = "halving" with the
// same trials, bracket 0 trains its trials at R only. Brackets take consecutive trial indices (bracket
// K: 0..trials-1, the next bracket the following ones), survivors are chosen per (group, bracket),
// and the brackets run rung-synchronously: rung k trains every bracket's trials at r_k in one sweep
// run. A trial's rank is by the rung it reached, then loss, so the winner is the best at R.
//
// Any key a grid takes is a dimension (sweep_spec.h); an integer field gets rounded samples.
// Each rung is a set of complete runs of its length (train.steps and optim.total_steps set to the
// rung's budget, so the schedule spans the shorter run); nothing is continued from the rung before.
// Sampling and rung plans are pure functions of the file: a resumed or repeated search draws the
// same trials (Halton radical inverses plus a splitmix64 shift, no platform RNG).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

namespace scaleinv {

struct SearchDim {
  std::string key;                       // a grid key: "lr_log2", "hp.output_mult", ...
  double lo = 0, hi = 0;                 // a range
  bool log = false;                      // log-uniform in [lo, hi] (lo > 0)
  bool integer = false;                  // the field is an integer: samples rounded
  std::vector<nlohmann::json> choices;   // or one of these (then lo/hi unused)
};

struct SearchSpec {
  std::string method = "random";         // "random", "halving" or "hyperband"
  int trials = 0;
  uint64_t seed = 0;
  int eta = 3;
  int64_t min_steps = 0;
  std::vector<SearchDim> dims;
  std::string text;                      // the [search] table as TOML (part of the fingerprint;
                                         // hyperband's written as halving's, search_space.cpp)
};

// Checks a dimension's key as a grid key: throws UserError naming `field`; sets *integer when
// the config field is an integer; coerces `probe` values (the choices) to the field's type.
using SearchKeyCheck = std::function<void(const std::string& key, const std::string& field, bool* integer,
                                          std::vector<nlohmann::json>& probe)>;

// Parses [search] (`where` names the file in errors). `full_steps` is the base config's train.steps.
SearchSpec parse_search(const toml::table& t, const std::string& where, const SearchKeyCheck& check,
                        int64_t full_steps);

// The `trial`-th configuration (0-based): {key: value} over the space's dimensions.
nlohmann::json sample_trial(const SearchSpec& s, int trial);

// The training steps of each rung: {full_steps} for random; for halving and hyperband
// full_steps / eta^k (rounded) for k = K..0, K the largest with full_steps / eta^K >= min_steps.
std::vector<int64_t> rung_steps(const SearchSpec& s, int64_t full_steps);

// A bracket: `trials` trials with indices first_trial.. that start at rung first_rung.
struct Bracket {
  int first_rung = 0;
  int first_trial = 0;
  int trials = 0;
};

// The brackets, most aggressive first: one {0, 0, trials} for random and halving; K + 1 for hyperband.
std::vector<Bracket> brackets(const SearchSpec& s, int64_t full_steps);

// Every bracket's trials together.
int total_trials(const std::vector<Bracket>& b);

// The bracket (an index into `b`) that holds `trial`.
int bracket_of(const std::vector<Bracket>& b, int trial);

// How many of a group's `n` trials go on to the next rung.
int survivors(const SearchSpec& s, int n);

// The assignments of rung `rung` for the given trials: the sample plus "search.trial",
// "search.rung", train.steps and optim.total_steps (the rung's budget).
std::vector<nlohmann::json> rung_assignments(const SearchSpec& s, int rung, const std::vector<int>& trials,
                                             int64_t full_steps);

}  // namespace scaleinv
