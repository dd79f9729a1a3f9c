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

ScopedEnv::ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
ScopedEnv::~ScopedEnv() { unsetenv(name.c_str()); }

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
