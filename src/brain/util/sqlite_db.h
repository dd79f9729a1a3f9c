#pragma once
// A small RAII wrapper over SQLite in WAL mode (results survive kill -9 and can be queried).
// Statements are prepared and bound; every error names the database file.
//
// Errors: a file that is not a SQLite database, a damaged one, one that cannot be opened, read or
// written (permissions, full disk) is a UserError naming the file; anything else (a bug in our
// SQL) is std::runtime_error.
#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace scaleinv {

using SqlValue = std::variant<std::nullptr_t, int64_t, double, std::string>;

class SqliteDb {
 public:
  enum class Mode {
    ReadWrite,  // opens or creates; WAL, synchronous=NORMAL
    ReadOnly,   // must exist; never writes, creates or converts the file (reports, merge inputs)
  };
  explicit SqliteDb(const std::string& path, Mode mode = Mode::ReadWrite);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  void exec(const std::string& sql);
  void run(const std::string& sql, const std::vector<SqlValue>& args);  // one statement, bound args
  std::vector<std::vector<SqlValue>> query(const std::string& sql, const std::vector<SqlValue>& args = {});
  void begin() { exec("BEGIN IMMEDIATE"); }
  void commit() { exec("COMMIT"); }
  // PRAGMA quick_check: UserError naming the file (field "integrity") unless it reports ok.
  void check_integrity();
  // Copies the WAL into the database file and truncates it (a checkpoint), so what is committed
  // no longer depends on the -wal file surviving.
  void checkpoint_wal();
  bool has_table(const std::string& name);
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(int rc, const std::string& sql);
  sqlite3* db_ = nullptr;
  std::string path_;
};

// Reads a column that must be text / an integer; UserError naming the file and the column when
// the stored value has another type (a damaged or foreign database).
std::string sql_text(const SqlValue& v, const std::string& db_path, const std::string& column);
int64_t sql_int(const SqlValue& v, const std::string& db_path, const std::string& column);

}  // namespace scaleinv
