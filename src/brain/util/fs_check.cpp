// Why a path cannot be written (see fs_check.h).
#include "brain/util/fs_check.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

namespace scaleinv {

std::string why_not_writable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::exists(dir, ec)) return fmt::format("its directory {} does not exist", dir.string());
  if (!fs::is_directory(dir, ec)) return fmt::format("{} is not a directory", dir.string());
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) == 0 && (st.f_flag & ST_RDONLY) != 0)
    return fmt::format("{} is on a read-only file system", dir.string());
  if (::access(dir.c_str(), W_OK) != 0) return fmt::format("{} is not writable by this user", dir.string());
  return "";
}

std::string first_missing_parent(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string top;
  for (fs::path d = fs::path(path).parent_path(); !d.empty() && !fs::exists(d, ec); d = d.parent_path()) {
    top = d.string();
    if (d == d.parent_path()) break;
  }
  return top;
}

void remove_created_parents(const std::string& path, const std::string& top) {
  namespace fs = std::filesystem;
  if (top.empty()) return;
  for (fs::path d = fs::path(path).parent_path(); !d.empty(); d = d.parent_path()) {
    if (::rmdir(d.c_str()) != 0) return;  // not empty (or gone): what is left is not ours alone
    if (d.string() == top || d == d.parent_path()) return;
  }
}

}  // namespace scaleinv
