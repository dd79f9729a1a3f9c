#pragma once
// The space of a sweep of the user's own model (issue 41: scaleinv.sweep / scaleinv.search from
// Python): the same grammar as a sweep file's [grid] and [search], over the user's names instead of
// the zoo config's keys, with [fixed] for the values every run takes.
//
//   [sweep]
//   target = "python"            # a model trained by a Python function (scaleinv.sweep sets it)
//   name = "nanogpt-width"
//   [fixed]                      # every run's values unless the grid or the search sets them
//   param = "mup"                # the table scaleinv.apply uses (required somewhere)
//   steps = 300                  # the training budget (required; a search's rungs shorten it)
//   [grid]
//   width = [64, 128, 256]
//   lr_log2 = {from = -10, to = -5}
//   seed = [0, 1]
//   [search.space]
//   init_scale = {from = 0.25, to = 4, log = true}   # any name of the user's is a hyperparameter
//
// The names with a meaning of their own (the table below) are stored under the CLI's keys, so the
// store reads as the CLI's: width -> model.width, depth -> model.depth, steps -> train.steps,
// batch_size -> train.batch_size, weight_decay -> optim.weight_decay, warmup_steps ->
// optim.warmup_steps, lr -> optim.lr, and param, lr_log2 and seed as they are; any other name is
// the user's own hyperparameter, stored under "user" in the point's config.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "brain/sweep/sweep_point.h"

namespace scaleinv {

// The key the store uses for a user sweep's name (the CLI's key for a name of the table above,
// the name itself otherwise). A name may also be written as its CLI key ("model.width").
std::string user_store_key(const std::string& name);

// What a name sets: its store key, except that lr_log2 sets optim.lr (as lr does) and seed
// train.seed. Two names of one space setting the same thing are refused.
std::string user_target(const std::string& name);

// Normalises v to a 64-bit integer in place (2.0 -> 2); false when it is no integer int64 holds:
// not a number, a fraction, or past int64 (1e30, or 2^63 as a JSON unsigned), which a cast would
// wrap to -9223372036854775808.
bool to_int64(nlohmann::json& v);
// What is wrong with a value to_int64 refused: "N is past a 64-bit integer ..." or "every value
// must be an integer".
std::string integer_problem(const nlohmann::json& v);

// Checks and normalises (2.0 -> 2 for an integer) the values of a user sweep's name: integers >= 1
// for width, depth (at most 2^31-1, the config's int), steps and batch_size, >= 0 for seed and warmup_steps; numbers for lr (> 0),
// lr_log2 and weight_decay (>= 0); a string for param; numbers, strings or booleans for the user's
// own. UserError(where, field) naming the fix. Returns whether the name takes integers.
bool check_user_values(const std::string& name, std::vector<nlohmann::json>& values, const std::string& where,
                       const std::string& field);

// One point of a user sweep from its assignment (name -> value; "search.*" keys and the rung's
// optim.total_steps are skipped): the config JSON the store records ({"model": {"kind": "user",
// width, depth}, "param": {"name"}, "optim": {"lr", ...}, "train": {"steps", "seed", ...},
// "user": {name: value}}) and its coordinates (param, width and depth (0 when not set), LR, seed,
// steps). UserError(where, field) when the LR, the steps or param is not set.
UserPoint user_point(const nlohmann::json& assignment, const std::string& where, const std::string& field);

// A point's axes as the store keeps them: every name under its store key.
nlohmann::json user_store_axes(const nlohmann::json& axes);

// The values a training function receives, by the user's names, from a point's stored config:
// param, width, depth (absent when not set), lr, seed, steps and every other name.
nlohmann::json user_hparams(const nlohmann::json& point_config);

}  // namespace scaleinv
