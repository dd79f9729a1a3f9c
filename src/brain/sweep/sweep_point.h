#pragma once
// One point of a sweep (sweep_spec.h expands them): a zoo model's resolved config, or a point of
// the user's own model (user_space.h), and the coordinates every point has whichever it is.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "brain/train/config.h"

namespace scaleinv {

// What every point has, whatever trains it: the store's columns (param, width, depth, lr, seed;
// sweep_store.h), a search rung's budget (steps) and the keys of a shard's chunks.
struct PointCoords {
  std::string param;
  int width = 0;      // 0: not set (a user's model that names no width)
  int depth = 0;
  double lr = 0;
  int64_t seed = 0;
  int64_t steps = 0;
};

// A point of a user model's sweep (scaleinv.sweep / scaleinv.search): only what its names set, no
// zoo TrainConfig (whose defaults mean nothing for a user's model).
struct UserPoint {
  // What the store's config column records and the point's id hashes (user_space.h user_point):
  // {"model": {"kind": "user", width, depth}, "param": {"name"}, "optim": {"lr", ...},
  // "train": {"steps", "seed", ...}, "user": {name: value}}.
  nlohmann::json config;
  PointCoords coords;
};

struct SweepPoint {
  std::string id;                  // 16 hex digits: hash of the resolved config's JSON
  nlohmann::json axes;             // axis key -> value, e.g. {"lr_log2": -10, "param": "mup"}
  TrainConfig config;              // a zoo model's point: its resolved, validated config (unused
                                   // for a user point)
  std::optional<UserPoint> user;   // a user model's point (then `config` is not set)

  PointCoords coords() const;           // user->coords, or the zoo config's
  nlohmann::json stored_config() const; // the store's config column: user->config, or the zoo config's JSON
  // Points of one key may train as one batched ensemble and go to one chunk of a shard: a zoo
  // point's is brain/train/ensemble_key.h's; a user point's its param, width, depth and steps.
  std::string ensemble_key() const;
};

}  // namespace scaleinv
