#pragma once
// SHA-256 (FIPS 180-4, section 6.2) of a byte string or a file, as 64 lower-case hex digits: an
// imported results file is recorded in its store by this digest (brain/sweep/import_results.h), so the
// store names exactly which file it holds, and `sha256sum FILE` checks it.
#include <string>

namespace scaleinv {

// The digest of `bytes`. Throws nothing.
std::string sha256_hex(const std::string& bytes);

}  // namespace scaleinv
