#pragma once
// TOML values as JSON: the one conversion of a scalar TOML node, for the sweep and search files
// whose values are kept as JSON (point axes, search choices); and JSON as TOML, for a sweep space
// given as a Python dict (read as the same TOML a sweep file holds).
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

namespace scaleinv {

// A scalar node (integer, float, string, boolean) as JSON; nullopt for arrays and tables.
std::optional<nlohmann::json> toml_scalar_json(const toml::node& n);
// Every element of an array as toml_scalar_json; nullopt when any element is not a scalar.
std::optional<std::vector<nlohmann::json>> toml_scalar_array_json(const toml::array& a);
// A JSON object as a TOML table: objects are tables, arrays arrays, numbers, strings and booleans
// themselves (an integer stays an integer). Throws std::invalid_argument naming the dotted key of a
// null (TOML has none) or of a non-object at the top.
toml::table json_to_toml_table(const nlohmann::json& obj);

}  // namespace scaleinv
