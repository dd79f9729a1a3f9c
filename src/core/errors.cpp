#include "core/errors.h"

#include <fmt/format.h>

namespace scaleinv {

static std::string one_line(const std::string& where, const std::string& field,
                            const std::string& problem, const std::string& fix) {
  std::string msg = where.empty() ? std::string() : where + ": ";
  if (!field.empty()) msg += "field '" + field + "': ";
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
