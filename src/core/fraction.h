#pragma once
// Exponents are simple fractions (1/2, -3/2, 5/4): read and print them that way.
#include <string>

namespace scaleinv {
// "-1/2" -> -0.5, "0.25" -> 0.25. Returns false on anything else.
bool parse_fraction(const std::string& s, double* out);
// -0.5 -> "-1/2", 1 -> "1", 0.123 -> "0.123" (denominators up to 12 are recognised).
std::string format_fraction(double x);
}  // namespace scaleinv
