#pragma once
// Exponents are simple fractions (1/2, -3/2, 5/4): read and print them that way.
#include <string>

namespace scaleinv {
// "-1/2" -> -0.5, "0.25" -> 0.25. Returns false on anything else.
bool parse_fraction(const std::string& s, double* out);
// The largest |exponent| a table or a shift may hold. Every published parameterization stays
// within 2; at 16, m^-a already spans 2^-160..2^160 over widths 2^-10..2^10 of the base (past
// float32's range), so anything beyond is a typo, not a parameterization.
constexpr double kMaxExponent = 16;
// -0.5 -> "-1/2", 1 -> "1", 0.123 -> "0.123" (denominators up to 12 are recognised).
std::string format_fraction(double x);
}  // namespace scaleinv
