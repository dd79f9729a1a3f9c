#pragma once
// Planted test data's noise, the same on every platform: splitmix64 for uniforms, Box-Muller for
// normals (no <random> distribution, whose output the standard leaves to the library).
#include <cmath>
#include <cstdint>

namespace scaleinv::testing {

struct Noise {
  uint64_t s;
  double uniform() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (static_cast<double>((z ^ (z >> 31)) >> 11) + 0.5) * 0x1.0p-53;
  }
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()); }
};

}  // namespace scaleinv::testing
