// 64-bit FNV-1a (see stable_hash.h).
#include "brain/util/stable_hash.h"

#include <fmt/format.h>

namespace scaleinv {

uint64_t stable_hash64(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64: offset basis and prime
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string stable_hash(const std::string& text) { return fmt::format("{:016x}", stable_hash64(text)); }

}  // namespace scaleinv
