#include "brain/util/atomic_file.h"

#include <fcntl.h>
#include <ftw.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "brain/util/fs_check.h"

namespace scaleinv {

std::string unique_temp_path(const std::string& path) {
  static std::atomic<unsigned long> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
}

namespace {
std::mutex g_inputs_mu;
std::vector<std::pair<std::string, std::string>> g_inputs;  // (path, field)
}  // namespace

void protect_input(const std::string& path, const std::string& field) {
  const std::lock_guard<std::mutex> lock(g_inputs_mu);
  g_inputs.emplace_back(path, field);
}

void refuse_protected_input(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return;
  const std::lock_guard<std::mutex> lock(g_inputs_mu);
  for (const auto& [input, field] : g_inputs)
    if (std::filesystem::equivalent(input, path, ec) && !ec)
      throw UserError(path, "", fmt::format("is the file this command reads as {} ({})", field, input),
                      "write the output to another path");
}

void ensure_parent_dir(const std::string& path, const std::string& field) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (!p.has_parent_path()) return;
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);  // concurrent creators: an existing directory is fine
  if (ec || !fs::is_directory(p.parent_path()))
    throw UserError(path, field,
                    fmt::format("cannot create the directory '{}': {}", p.parent_path().string(),
                                ec ? ec.message() : "a file of that name exists"),
                    "choose a writable path whose parents are directories");
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  std::error_code ec;
  if (path.empty() || std::filesystem::is_directory(path, ec))
    throw UserError(path.empty() ? "command line" : path, "",
                    path.empty() ? "an output path is empty" : "is a directory, not a file to write",
                    "give the path of a file (e.g. DIR/out.json)");
  refuse_protected_input(path);
  const std::string made = first_missing_parent(path);  // removed again if the write fails
  ensure_parent_dir(path);
  const std::string tmp = unique_temp_path(path);
  auto fail = [&](const std::string& what, const std::string& fix) {
    ::unlink(tmp.c_str());
    remove_created_parents(path, made);
    throw UserError(path, "", what, fix);
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) {
    const int err = errno;
    const std::string why = why_not_writable(path);
    fail("cannot write: " + (why.empty() ? std::string(std::strerror(err)) : why), "write it to a directory you can write to");
  }
  size_t off = 0;
  while (off < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + off, contents.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      fail(std::string("write failed: ") + std::strerror(err), "check free disk space");
    }
    off += static_cast<size_t>(n);
  }
  // A full disk can show only here (delayed allocation). Other fsync errors (a file system without
  // it: EINVAL) are not the data's loss and are let pass, as before.
  auto lost = [](int e) { return e == ENOSPC || e == EDQUOT || e == EIO; };
  const int sync_err = ::fsync(fd) == 0 ? 0 : errno;
  const int close_err = ::close(fd) == 0 ? 0 : errno;
  if (lost(sync_err) || lost(close_err))
    fail(std::string("write failed: ") + std::strerror(lost(sync_err) ? sync_err : close_err), "check free disk space");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    fail(std::string("rename failed: ") + std::strerror(err), "check the directory");
  }
}

void refuse_same_file(const std::string& input, const std::string& out, const std::string& field) {
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && std::filesystem::equivalent(input, out, ec))
    throw UserError(input, field, fmt::format("is also the output ({})", out), "write the output to another path");
}

void remove_tree(const std::string& path) {
  auto rm = [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); };
  ::nftw(path.c_str(), rm, 16, FTW_DEPTH | FTW_PHYS);
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(path, "", "is a directory, not a file", "give the path of a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path, "", "cannot open file", "check the path");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace scaleinv
