#include "cli_util.h"
#include "brain/util/atomic_file.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace scaleinv::testing {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string temp_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / ("scaleinv_test_" + tag + "_" + std::to_string(::getpid()));
  scaleinv::remove_tree(p);
  fs::create_directories(p);
  return p.string();
}

std::string train_args(const std::string& cfg, const std::string& out_dir, const std::string& extra) {
  return "train --quiet --config " + cfg + " --set train.out_dir=\\\"" + out_dir + "\\\" " + extra;
}

ScopedEnv::ScopedEnv(const char* name, const std::string& value) : name_(name) {
  const char* old = std::getenv(name);
  had_ = old != nullptr;
  if (had_) old_ = old;
  setenv(name, value.c_str(), 1);
}
ScopedEnv::~ScopedEnv() {
  if (had_) setenv(name_.c_str(), old_.c_str(), 1);
  else unsetenv(name_.c_str());
}

std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string tiny_sweep_path() { return std::string(SCALEINV_SOURCE_DIR) + "/examples/sweeps/tiny_markov.toml"; }

CliResult run_cli(const std::string& args) { return run_cli_env("", args); }

std::string cold_cache_env(const std::string& dir) {
  std::filesystem::create_directories(dir + "/home");
  std::filesystem::create_directories(dir + "/data");
  return "HOME=" + dir + "/home SCALEINV_DATA_DIR=" + dir + "/data";
}

CliResult run_cli_env(const std::string& env, const std::string& args) {
  const std::string dir = temp_dir("cli");
  const std::string out = dir + "/out", err = dir + "/err";
  const std::string cmd = (env.empty() ? "" : "env " + env + " ") + std::string(SCALEINV_BIN) + " " + args + " >" +
                          out + " 2>" + err;
  int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace scaleinv::testing
