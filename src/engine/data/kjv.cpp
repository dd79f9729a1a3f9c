// The King James Bible as byte-level text, dumped once from Debian's bible-kjv and cached.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "engine/data/data_detail.h"

namespace scaleinv {

namespace {
constexpr const char* kRange = "Gen1:1-Rev22:21";
constexpr size_t kMinBytes = 1u << 20;  // the whole Bible is ~4.4 MB; less means a failed dump

std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::string dirs(path);
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = dirs.substr(start, end - start);
    if (!dir.empty()) {
      const std::string cand = dir + "/" + name;
      struct stat st {};
      if (::stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(cand.c_str(), X_OK) == 0) return cand;
    }
    start = end + 1;
  }
  return "";
}
}  // namespace

std::string kjv_cache_path() {
  const char* dir = std::getenv("SCALEINV_DATA_DIR");
  if (dir != nullptr && *dir != '\0') return (std::filesystem::path(dir) / "kjv.txt").string();
  const char* home = std::getenv("HOME");
  const std::filesystem::path base = (home != nullptr && *home != '\0') ? std::filesystem::path(home) / ".cache"
                                                                          : std::filesystem::temp_directory_path();
  return (base / "scaleinv" / "kjv.txt").string();
}

std::string ensure_kjv_text(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) > 0) return path;
  const std::string bible = find_program("bible");
  if (bible.empty())
    throw UserError(path, "data.source",
                    "the KJV text is not cached here and the program 'bible' (Debian package bible-kjv) is not on PATH",
                    "run scripts/setup.sh (installs bible-kjv), or set data.path to a copy of the text");
  const std::string cmd = fmt::format("'{}' -f '{}' 2>/dev/null", bible, kRange);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr)
    throw UserError(path, "data.source", "could not run '" + bible + "'", "run scripts/setup.sh (installs bible-kjv)");
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0 || text.size() < kMinBytes)
    throw UserError(path, "data.source",
                    fmt::format("'{} -f {}' failed (exit status {}, {} bytes)", bible, kRange,
                                WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.size()),
                    "reinstall bible-kjv (scripts/setup.sh)");
  try {
    write_file_atomic(path, text);  // a writer-unique temporary, then rename: never half a file
  } catch (const UserError& e) {
    throw UserError(path, "SCALEINV_DATA_DIR", std::string("cannot create the cache: ") + e.what(),
                    "set SCALEINV_DATA_DIR (or data.path) to a writable place");
  }
  return path;
}

namespace data_detail {

std::unique_ptr<DataSource> make_kjv(const DataConfig& cfg) {
  const std::string path = ensure_kjv_text(cfg.path.empty() ? kjv_cache_path() : cfg.path);
  const std::string bytes = read_file(path);
  return make_byte_source("kjv " + path, path, bytes, cfg);
}

}  // namespace data_detail
}  // namespace scaleinv
