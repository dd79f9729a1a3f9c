// TOML scalars as JSON (see toml_json.h).
#include "core/toml_json.h"

namespace scaleinv {

std::optional<nlohmann::json> toml_scalar_json(const toml::node& n) {
  if (auto v = n.value_exact<int64_t>()) return nlohmann::json(*v);
  if (auto v = n.value_exact<double>()) return nlohmann::json(*v);
  if (auto v = n.value_exact<std::string>()) return nlohmann::json(*v);
  if (auto v = n.value_exact<bool>()) return nlohmann::json(*v);
  return std::nullopt;
}

}  // namespace scaleinv
