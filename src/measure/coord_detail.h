#pragma once
// What the coordinate check's driver (coordcheck.cpp) and its outputs (coord_render.cpp) share:
// internal to measure/, not part of coordcheck.h's contract.
#include <string>

#include "measure/coordcheck.h"

namespace scaleinv::coord_detail {

// An exponent as a fraction ("1/2", "-1"), with values within kExponentTol of 0 shown as 0.
std::string fmt_exp(double e);

// One row per CoordQuantity, in enum order: the printed name, the plot file's suffix, the plot's label.
struct QuantityInfo {
  const char* name;
  const char* file;
  const char* label;
};
const QuantityInfo& quantity_info(CoordQuantity q);

}  // namespace scaleinv::coord_detail
