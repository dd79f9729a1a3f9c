#include "brain/util/json_number.h"

#include <cmath>

namespace scaleinv {

nlohmann::json json_number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace scaleinv
