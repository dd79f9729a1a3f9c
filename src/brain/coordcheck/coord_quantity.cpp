// The coordinate check's quantities (coordcheck.h): their names, the parsing of a list of them,
// and how an exponent is printed.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "brain/util/fraction.h"
#include "brain/coordcheck/coord_detail.h"
#include "brain/coordcheck/coord_result.h"

namespace scaleinv {

namespace coord_detail {

std::vector<int> sorted_unique(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

namespace {
constexpr QuantityInfo kQuantity[] = {
    {"h", "h", "RMS(h)"},
    {"dh", "dh", "RMS(h_t - h_0)"},
    {"h'", "hgrad", "RMS(dLoss/dh)"},
    {"W'", "wgrad", "RMS(dLoss/dW)"},
    {"dW", "dw", "RMS(W_t - W_t-1)"},
    {"||W||", "wspec", "||W_t||_2"},
    {"||dW||", "dwspec", "||W_t - W_t-1||_2"},
};
static_assert(std::size(kQuantity) == kNumCoordQuantities, "one kQuantity row per CoordQuantity");
}  // namespace

const QuantityInfo& quantity_info(CoordQuantity q) { return kQuantity[static_cast<int>(q)]; }

}  // namespace coord_detail

using coord_detail::quantity_info;
using coord_detail::QuantityInfo;

const char* coord_quantity_name(CoordQuantity q) { return quantity_info(q).name; }

unsigned parse_coord_quantities(const std::string& list, const std::string& where) {
  unsigned mask = 0;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    if (item == "all") {
      mask = kAllCoordQuantities;
      continue;
    }
    unsigned bit = 0;
    for (int q = 0; q < kNumCoordQuantities; ++q) {
      const QuantityInfo& info = quantity_info(static_cast<CoordQuantity>(q));
      if (item == info.name || item == info.file) bit = 1u << q;
    }
    if (!bit)
      throw UserError(where, "quantities", fmt::format("unknown quantity '{}'", item),
                      "use a comma-separated list of h, dh, hgrad, wgrad, dw, wspec, dwspec or all");
    mask |= bit;
  }
  if (!mask) throw UserError(where, "quantities", "an empty list", "name at least one quantity, e.g. h,dh");
  return mask;
}

bool is_activation_quantity(CoordQuantity q) {
  return q == CoordQuantity::H || q == CoordQuantity::DH || q == CoordQuantity::HGrad;
}

}  // namespace scaleinv
