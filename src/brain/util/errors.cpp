#include "brain/util/errors.h"

#include <fmt/format.h>

namespace scaleinv {

namespace {
thread_local const std::string* t_config_source = nullptr;
thread_local const InputNames* t_input_names = nullptr;
}  // namespace

InputNames::InputNames(std::string caller, std::map<std::string, std::string> names)
    : prev_(t_input_names), caller_(std::move(caller)), names_(std::move(names)) {
  t_input_names = this;
}
InputNames::~InputNames() { t_input_names = prev_; }

std::string input_name(const std::string& cli_flag) {
  if (t_input_names == nullptr) return cli_flag;
  const auto it = t_input_names->names_.find(cli_flag);
  return it == t_input_names->names_.end() ? cli_flag : it->second;
}

std::string input_caller() { return t_input_names == nullptr ? "command line" : t_input_names->caller_; }

ConfigSource::ConfigSource(std::string file) : prev_(t_config_source), file_(std::move(file)) {
  t_config_source = &file_;
}
ConfigSource::~ConfigSource() { t_config_source = prev_; }

static std::string one_line(const std::string& where_in, const std::string& field,
                            const std::string& problem, const std::string& fix) {
  const std::string where = where_in == "config" && t_config_source != nullptr ? *t_config_source
                            : where_in == "command line"                         ? input_caller()
                                                                                 : where_in;
  std::string msg = where.empty() ? std::string() : where + ": ";
  if (!field.empty()) msg += "field '" + input_name(field) + "': ";
  msg += problem;
  if (!fix.empty()) msg += " (fix: " + fix + ")";
  return msg;
}

UserError::UserError(const std::string& where, const std::string& field, const std::string& problem,
                     const std::string& fix)
    : std::runtime_error(one_line(where, field, problem, fix)) {}

Diverged::Diverged(long step_, double loss_)
    : std::runtime_error(fmt::format("diverged at step {} (loss {})", step_, loss_)), step(step_), loss(loss_) {}

}  // namespace scaleinv
