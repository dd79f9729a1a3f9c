#pragma once
// Why a file cannot be written at `path`, in the words a user acts on (issue 38: "unable to open
// database file" does not say that the location is read-only). Reads the file system, writes
// nothing.
#include <string>

namespace scaleinv {

// "" when nothing is found in the way; else e.g. "its directory /a/b does not exist",
// "/a/b is on a read-only file system", "/a/b is not writable by this user".
std::string why_not_writable(const std::string& path);

// The outermost of path's parent directories that does not exist yet ("" when they all do): what
// ensure_parent_dir (atomic_file.h) is about to create, for a writer that removes it again when its
// write fails, so that a failed write leaves nothing behind (issue 38: an import onto a full disk
// left the directory it had made).
std::string first_missing_parent(const std::string& path);

// Removes the directories from path's parent up to and including `top` (first_missing_parent's
// answer), each only where it is empty; nothing when `top` is "".
void remove_created_parents(const std::string& path, const std::string& top);

}  // namespace scaleinv
