#pragma once
// A hyperparameter sweep as a file (issue 8; docs/design.md "Data flow of a sweep"): a base training
// config plus a [grid] of values, expanded into the Cartesian product of points, each a complete,
// validated TrainConfig with a stable id.
//
//   base = "../gpt_kjv.toml"        # optional, relative to this file
//   set = ["train.steps=1000"]      # optional --set style overrides of the base
//   [model] ... [train]              # optional inline sections, merged over the base
//   [sweep]
//   name = "gpt-width"               # default: the file's stem
//   ensemble = 8                     # most members trained as one batched ensemble
//   window = 0.1                     # fraction of the final steps averaged into final_loss
//   db = "runs/sweeps/gpt-width.db"  # default --out (relative to the working directory)
//   [grid]
//   param = ["standard", "mup"]      # = param.name
//   "model.width" = [64, 128, 256]   # any config key --set accepts (model.width = [...] works too)
//   lr_log2 = [-12, -11, -10]        # optim.lr = 2^x; or lr_log2 = {from = -12, to = -6, step = 1}
//   seed = [0, 1]                    # sets train.seed and data.seed
//   [search]                         # optional: sampled trials crossed with the grid (search_space.h)
//
// A sweep of the user's own model, trained by a Python function (scaleinv.sweep), is the same file
// with `[sweep] target = "python"`, `[fixed]` instead of a base config and the user's names as
// keys (user_space.h); `scaleinv sweep` refuses to run it (it has no model to train) but ranks and
// merges its stores like any other.
//
// Every mistake (unknown key, empty axis, wrong value type, a point the config loader refuses) is
// a UserError naming the sweep file and the field, found before anything runs.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "brain/sweep/search_space.h"
#include "brain/sweep/sweep_point.h"
#include "brain/train/config.h"

namespace scaleinv {

struct GridAxis {
  std::string key;                       // as written: "lr_log2", "seed", "param", "model.width", ...
  std::vector<nlohmann::json> values;    // scalars (number, string, bool), in file order
};

struct SweepSpec {
  std::string path;                      // the sweep file ("" when built from text)
  std::string name;
  std::string toml_text;                 // the sweep file as written (stored in the db)
  std::string db_path;                   // [sweep] db, "" when absent
  int ensemble = 8;
  double window = 0.1;
  std::vector<GridAxis> axes;            // in expansion order (outermost first; lr then seed innermost)
  std::vector<SweepPoint> points;        // the whole grid, in a deterministic order
  std::string fingerprint;               // hash of every point id, the window and [search]
  std::optional<SearchSpec> search;      // [search]: `points` are then its first rung's
  std::string base_toml;                 // the resolved base config the points start from (TOML)
  std::string label;                     // how errors name the base config
  int64_t full_steps = 0;                // [search]: the base config's train.steps
  bool user_model = false;               // [sweep] target = "python": a model trained from Python
  nlohmann::json fixed = nlohmann::json::object();  // a user model's [fixed] (name -> value)

  nlohmann::json grid_json() const;      // {"axes": [{"key", "values"}...], "points": N}
};

// Reads and expands a sweep file (base paths resolved relative to it).
SweepSpec load_sweep(const std::string& path);
// The same from text; `where` names it in messages, `base_dir` resolves `base`.
SweepSpec sweep_from_toml_text(const std::string& text, const std::string& where, const std::string& base_dir);

// The points of `spec`'s grid with each of `extra` assigned on top (keys as grid keys; "search.*"
// keys recorded in the axes, not set): for every assignment, every grid point in grid order.
// UserError naming the sweep file when a point is not a valid config or repeats another.
std::vector<SweepPoint> expand_points(const SweepSpec& spec, const std::vector<nlohmann::json>& extra);

}  // namespace scaleinv
