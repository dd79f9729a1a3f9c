#pragma once
// A small RAII wrapper over SQLite in WAL mode (DESIGN.md: results survive kill -9 and can be
// queried). Statements are prepared and bound; every error names the database file.
#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace scaleinv {

using SqlValue = std::variant<std::nullptr_t, int64_t, double, std::string>;

class SqliteDb {
 public:
  explicit SqliteDb(const std::string& path);  // opens or creates; WAL, synchronous=NORMAL
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  void exec(const std::string& sql);
  void run(const std::string& sql, const std::vector<SqlValue>& args);  // one statement, bound args
  std::vector<std::vector<SqlValue>> query(const std::string& sql, const std::vector<SqlValue>& args = {});
  void begin() { exec("BEGIN IMMEDIATE"); }
  void commit() { exec("COMMIT"); }
  const std::string& path() const { return path_; }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace scaleinv
