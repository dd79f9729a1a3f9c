#pragma once
// Helpers the tests of coordinate checks share (test_coordcheck.cpp, test_muon.cpp): one definition,
// so that two files of one unity batch do not both define them.
#include <string>

#include "brain/coordcheck/coord_result.h"

namespace scaleinv::testing {

// The check's failures, one a line (for a test's message).
inline std::string failures_text(const CoordCheckResult& r) {
  std::string s;
  for (const auto& f : r.failures) s += f + "\n";
  return s;
}

// Whether some failure names both a and b (a quantity and a module, say).
inline bool has_failure(const CoordCheckResult& r, const std::string& a, const std::string& b) {
  for (const auto& f : r.failures)
    if (f.find(a) != std::string::npos && f.find(b) != std::string::npos) return true;
  return false;
}

}  // namespace scaleinv::testing
