#include "core/sqlite_db.h"

#include <stdexcept>

#include "core/errors.h"

namespace scaleinv {

namespace {
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};
}  // namespace

SqliteDb::SqliteDb(const std::string& path) : path_(path) {
  if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw UserError(path, "", "cannot open database: " + msg, "check the directory and permissions");
  }
  sqlite3_busy_timeout(db_, 10000);
  exec("PRAGMA journal_mode=WAL");
  exec("PRAGMA synchronous=NORMAL");
}

SqliteDb::~SqliteDb() { sqlite3_close(db_); }

void SqliteDb::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw std::runtime_error(path_ + ": sqlite: " + msg + " in: " + sql);
  }
}

static void bind_all(sqlite3* db, sqlite3_stmt* s, const std::vector<SqlValue>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const int idx = static_cast<int>(i) + 1;
    const SqlValue& v = args[i];
    if (std::holds_alternative<std::nullptr_t>(v)) sqlite3_bind_null(s, idx);
    else if (auto* p = std::get_if<int64_t>(&v)) sqlite3_bind_int64(s, idx, *p);
    else if (auto* d = std::get_if<double>(&v)) sqlite3_bind_double(s, idx, *d);
    else {
      const std::string& str = std::get<std::string>(v);
      sqlite3_bind_text(s, idx, str.c_str(), static_cast<int>(str.size()), SQLITE_TRANSIENT);
    }
  }
}

void SqliteDb::run(const std::string& sql, const std::vector<SqlValue>& args) { query(sql, args); }

std::vector<std::vector<SqlValue>> SqliteDb::query(const std::string& sql, const std::vector<SqlValue>& args) {
  Stmt st;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK)
    throw std::runtime_error(path_ + ": sqlite: " + sqlite3_errmsg(db_) + " in: " + sql);
  bind_all(db_, st.s, args);
  std::vector<std::vector<SqlValue>> rows;
  for (;;) {
    int rc = sqlite3_step(st.s);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) throw std::runtime_error(path_ + ": sqlite: " + sqlite3_errmsg(db_) + " in: " + sql);
    std::vector<SqlValue> row;
    const int n = sqlite3_column_count(st.s);
    for (int c = 0; c < n; ++c) {
      switch (sqlite3_column_type(st.s, c)) {
        case SQLITE_INTEGER: row.emplace_back(static_cast<int64_t>(sqlite3_column_int64(st.s, c))); break;
        case SQLITE_FLOAT: row.emplace_back(sqlite3_column_double(st.s, c)); break;
        case SQLITE_NULL: row.emplace_back(nullptr); break;
        default: row.emplace_back(std::string(reinterpret_cast<const char*>(sqlite3_column_text(st.s, c))));
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace scaleinv
