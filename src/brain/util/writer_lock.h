#pragma once
// One writer at a time for a file or a directory (a sweep store, a training run's out_dir): an
// exclusive flock on a lock file, which the holder's pid is written into for the refusal message.
// The flock goes with the process however it ends (kill -9 included), so a killed writer never
// blocks the next; a writer that ends normally removes the file while still holding the lock, and
// a process that locked that removed file meanwhile notices and starts over on the path's new file.
#include <optional>
#include <string>

namespace scaleinv {

class WriterLock {
 public:
  WriterLock() = default;
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;
  ~WriterLock();  // removes the lock file and releases the lock, when held

  // Takes the lock on `lock_path` (created when missing). nullopt: taken (or already held by this
  // object); otherwise another process holds it, and the text is what it wrote ("pid 123"; "" when
  // it could not be read). UserError (the lock file, field `field`) when the file cannot be created.
  std::optional<std::string> try_acquire(const std::string& lock_path, const std::string& field);

  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace scaleinv
