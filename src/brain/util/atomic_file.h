#pragma once
// Atomic writes: results and checkpoints are written to a temporary file beside PATH whose name
// is unique to the writer (process id and a per-process counter: unique_temp_path), flushed and
// renamed over PATH. A killed process leaves either the old file or the new one, never half of
// one; several threads or processes writing the same PATH at once each rename a whole file of
// their own (the last rename wins), and none fails because another moved its temporary file.
#include <string>

namespace scaleinv {
// Writes `contents` to PATH atomically, creating missing parent directories.
// Throws UserError naming PATH when a directory cannot be created, the file cannot be written or
// the rename fails (the temporary file is removed first).
void write_file_atomic(const std::string& path, const std::string& contents);
// A temporary name beside PATH that no other writer (thread or process) gets:
// PATH.tmp.<pid>.<n>, n counting up within the process. Ignored by .gitignore (*.tmp.*).
std::string unique_temp_path(const std::string& path);
// Creates PATH's parent directories; UserError naming PATH (field `field`) when that fails or a
// parent is not a directory.
void ensure_parent_dir(const std::string& path, const std::string& field = "");
std::string read_file(const std::string& path);  // UserError naming the path if unreadable
// UserError naming INPUT (field `field`) when OUT is the same file as INPUT (a link or another
// spelling of it included): a command must not write its output over what it reads.
void refuse_same_file(const std::string& input, const std::string& out, const std::string& field);
// The files this process reads as its inputs (the CLI registers the values of the options it
// declares as read, cli_options.h): write_file_atomic, a plot's rename and a sweep store refuse
// to write over one of them (issue 63 class 1: `predict --json s.db` replaced the store it read).
// `field` names where the input came from (e.g. "--db"). Thread-safe.
void protect_input(const std::string& path, const std::string& field);
// UserError naming PATH when it is one of the protected inputs (the same file: a link or another
// spelling of it included); nothing when it is not, or does not exist yet.
void refuse_protected_input(const std::string& path);
// Removes PATH and everything under it (like rm -rf; no error when it does not exist). Use this,
// not std::filesystem::remove_all: pip's libtorch 2.x exports its own copy of that symbol, which
// the dynamic linker binds ahead of libstdc++'s and which crashes (a call through a null pointer).
void remove_tree(const std::string& path);
}  // namespace scaleinv
