#include "cli/cli_options.h"

#include <exception>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"

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

namespace {
enum class PathRole { input, output_file, output_dir };
std::vector<std::pair<CLI::Option*, PathRole>>& path_options() {
  static std::vector<std::pair<CLI::Option*, PathRole>> options;  // filled while the commands register
  return options;
}
}  // namespace

CLI::Option* reads(CLI::Option* opt) {
  path_options().emplace_back(opt, PathRole::input);
  return opt;
}

CLI::Option* writes(CLI::Option* opt, bool dir) {
  path_options().emplace_back(opt, dir ? PathRole::output_dir : PathRole::output_file);
  return opt;
}

void refuse_outputs_over_inputs() {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> inputs;  // (path, option)
  for (const auto& [opt, role] : path_options())
    if (role == PathRole::input)
      for (const std::string& v : opt->results())
        if (std::error_code ec; fs::is_regular_file(v, ec)) inputs.emplace_back(v, opt->get_name());
  for (const auto& [opt, role] : path_options()) {
    if (role == PathRole::input) continue;
    for (const std::string& out : opt->results())
      for (const auto& [in, in_opt] : inputs) {
        std::error_code ec;
        if (!fs::equivalent(in, out, ec) || ec) continue;
        throw UserError(out, opt->get_name(),
                        fmt::format("is {} ({}), which this command reads", in_opt, in),
                        fmt::format("give {} another path", opt->get_name()));
      }
  }
  for (const auto& [path, opt] : inputs) protect_input(path, opt);
}

}  // namespace scaleinv
