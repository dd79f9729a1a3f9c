#pragma once
// Numbers in the JSON scaleinv writes: one rule for every file (run.json, metrics.jsonl,
// transfer.json, predict.json, a search's ranking, coordcheck and diagnose --json). JSON has no NaN
// or infinity, so a non-finite number is written as null; where why matters (a diverged run, a
// trial never run) a field beside it says so ("diverged": true, "status": "diverged").
#include <nlohmann/json.hpp>

namespace scaleinv {

// v when finite, else null.
nlohmann::json json_number(double v);

}  // namespace scaleinv
