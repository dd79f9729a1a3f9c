// A hash that is the same on every platform, build and run: 64-bit FNV-1a.
// Used for sweep point ids and fingerprints, parameterization fingerprints and the data-parallel
// ranks' agreement check, so a value written to a store or compared across processes never
// depends on std::hash. Throws nothing.
#pragma once

#include <cstdint>
#include <string>

namespace scaleinv {

// FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3) of the bytes of `text`.
uint64_t stable_hash64(const std::string& text);

// stable_hash64 as 16 lower-case hex digits.
std::string stable_hash(const std::string& text);

}  // namespace scaleinv
