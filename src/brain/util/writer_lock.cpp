// One writer at a time through an flock'ed file (see writer_lock.h).
#include "brain/util/writer_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"

namespace scaleinv {

WriterLock::~WriterLock() {
  if (fd_ < 0) return;
  // The file goes while the lock is still held: a process waiting on it holds the removed inode,
  // sees that in try_acquire and starts over on a new file.
  ::unlink(path_.c_str());
  ::close(fd_);  // releases the flock (so does any exit, kill -9 included)
}

std::optional<std::string> WriterLock::try_acquire(const std::string& lock_path, const std::string& field) {
  if (fd_ >= 0) return std::nullopt;
  int fd = -1;
  for (;;) {
    fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw UserError(lock_path, field, std::string("cannot create the lock file: ") + std::strerror(errno),
                      "write to a directory you can write to");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) break;  // held by another process
    // Locked; but if the holder before us removed the file meanwhile (its destructor), this lock
    // is on an inode no other process can find: try again on the path's current file.
    struct stat held {}, now {};
    if (::fstat(fd, &held) == 0 && ::stat(lock_path.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
        held.st_dev == now.st_dev) {
      const std::string me = fmt::format("pid {}", ::getpid());
      if (::ftruncate(fd, 0) == 0 && ::write(fd, me.data(), me.size()) < 0) {
      }  // who holds it, for another process's message; the flock is what counts
      fd_ = fd;
      path_ = lock_path;
      return std::nullopt;
    }
    ::close(fd);
  }
  ::close(fd);
  std::string holder;
  try {
    holder = read_file(lock_path);
  } catch (const UserError&) {  // the holder just finished and removed it: named without its pid
  }
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder;
}

}  // namespace scaleinv
