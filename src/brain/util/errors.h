#pragma once
// Errors a user can cause. Each carries one line naming the file, the field and the fix;
// the CLI prints it and exits with UserError::kExitCode. Nothing a user can cause should
// surface as a libtorch stack trace.
#include <map>
#include <stdexcept>
#include <string>

namespace scaleinv {

class UserError : public std::runtime_error {
 public:
  static constexpr int kExitCode = 2;
  // where: file (or "command line"); field: the offending key/option; fix: what to do.
  UserError(const std::string& where, const std::string& field, const std::string& problem,
            const std::string& fix);
  explicit UserError(const std::string& message) : std::runtime_error(message) {}
};

// The config file that config-level checks refer to. Checks deep in the library (model shapes,
// optimizer and schedule settings, data sizes) throw UserError("config", field, ...) without
// knowing the file; while a ConfigSource is alive on the thread, those errors name its file
// instead (train_run, train_ensemble and the coordinate check open one for cfg.source).
class ConfigSource {
 public:
  explicit ConfigSource(std::string file);
  ~ConfigSource();
  ConfigSource(const ConfigSource&) = delete;
  ConfigSource& operator=(const ConfigSource&) = delete;

 private:
  const std::string* prev_;
  std::string file_;
};

// Who an error speaks to. The library names its inputs as the CLI spells them ("--out",
// "--resume"); the Python module calls the same code with keyword arguments ("db=",
// "resume=True"). While an InputNames scope is alive on the thread, a UserError whose where is
// "command line" names the scope's caller instead (e.g. "scaleinv.predict"), its field is looked up
// in the names, and message sites spell a flag inside their text through input_name().
class InputNames {
 public:
  InputNames(std::string caller, std::map<std::string, std::string> names);
  ~InputNames();
  InputNames(const InputNames&) = delete;
  InputNames& operator=(const InputNames&) = delete;

 private:
  friend std::string input_name(const std::string& cli_flag);
  friend std::string input_caller();
  const InputNames* prev_;
  std::string caller_;
  std::map<std::string, std::string> names_;
};

// cli_flag ("--out") as the current caller spells it: the InputNames entry, else the flag itself.
std::string input_name(const std::string& cli_flag);
// "command line", or the InputNames scope's caller.
std::string input_caller();

// A training run whose loss became NaN/inf. Recorded, never a crash (exit code 3 from `train`).
class Diverged : public std::runtime_error {
 public:
  static constexpr int kExitCode = 3;
  Diverged(long step, double loss);
  long step;
  double loss;
};

}  // namespace scaleinv
