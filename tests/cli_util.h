#pragma once
// Running the built CLI from tests: exit code, stdout and stderr.
#include <string>

namespace scaleinv::testing {
struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};
// Runs `scaleinv ARGS` (the binary CMake built, SCALEINV_BIN) through the shell.
CliResult run_cli(const std::string& args);
// A fresh temporary directory for one test.
std::string temp_dir(const std::string& tag);
}  // namespace scaleinv::testing
