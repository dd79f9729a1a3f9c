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

std::optional<std::vector<nlohmann::json>> toml_scalar_array_json(const toml::array& a) {
  std::vector<nlohmann::json> out;
  for (const auto& el : a) {
    std::optional<nlohmann::json> j = toml_scalar_json(el);
    if (!j) return std::nullopt;
    out.push_back(std::move(*j));
  }
  return out;
}

}  // namespace scaleinv
