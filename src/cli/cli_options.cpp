#include "cli/cli_options.h"

#include <exception>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace scaleinv {

std::vector<int> parse_int_list(const std::string& option, const std::string& text) {
  std::vector<int> out;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(cur, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != cur.size())
      throw UserError("command line", option, fmt::format("cannot read '{}' as an integer", cur),
                      "give a comma-separated list of integers, e.g. 64,128,256");
    out.push_back(v);
    cur.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ') {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  if (out.empty())
    throw UserError("command line", option, "the list is empty", "give a comma-separated list, e.g. 64,128,256");
  return out;
}

std::string toml_quote(const std::string& s) { return nlohmann::json(s).dump(); }  // JSON strings are TOML strings

}  // namespace scaleinv
