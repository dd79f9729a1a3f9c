#pragma once
// Atomic writes: results and checkpoints are written to PATH.tmp.<pid>, flushed and renamed over
// PATH, so a killed process leaves either the old file or the new one, never half of one.
#include <string>

namespace scaleinv {
void write_file_atomic(const std::string& path, const std::string& contents);
std::string read_file(const std::string& path);  // UserError naming the path if unreadable
}  // namespace scaleinv
