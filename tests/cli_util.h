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
// The same with environment assignments first (e.g. "HOME=/tmp/h SCALEINV_DATA_DIR=/tmp/d").
CliResult run_cli_env(const std::string& env, const std::string& args);
// Creates DIR/home and DIR/data and returns the assignments of a cold cache: HOME and
// SCALEINV_DATA_DIR pointing at those empty directories (a fresh machine's first run).
std::string cold_cache_env(const std::string& dir);
// The bytes of a file ("" when it cannot be read).
std::string slurp(const std::string& path);
// A fresh temporary directory for one test.
std::string temp_dir(const std::string& tag);
// The arguments of `scaleinv train --quiet` on config file `cfg` writing to `out_dir`, then `extra`.
std::string train_args(const std::string& cfg, const std::string& out_dir, const std::string& extra = "");
// Sets an environment variable for one scope (this process and those a test starts), and puts
// back what it was (or unsets it) at the end.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};
// Writes `text` to `path` (bytes as they are); returns path.
std::string write_file(const std::string& path, const std::string& text);
// examples/sweeps/tiny_markov.toml: the smallest sweep file, which several tests run.
std::string tiny_sweep_path();
}  // namespace scaleinv::testing
