#pragma once
// TOML values as JSON: the one conversion of a scalar TOML node, for the sweep and search files
// whose values are kept as JSON (point axes, search choices).
#include <optional>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

namespace scaleinv {

// A scalar node (integer, float, string, boolean) as JSON; nullopt for arrays and tables.
std::optional<nlohmann::json> toml_scalar_json(const toml::node& n);

}  // namespace scaleinv
