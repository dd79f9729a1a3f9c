#include "brain/util/sqlite_db.h"

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "brain/util/fs_check.h"

namespace scaleinv {

namespace {
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

// Result codes a user's file or machine causes (not our SQL).
bool user_caused(int rc) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB: case SQLITE_CORRUPT: case SQLITE_CANTOPEN: case SQLITE_READONLY:
    case SQLITE_FULL: case SQLITE_IOERR: case SQLITE_PERM: case SQLITE_BUSY: case SQLITE_LOCKED:
    case SQLITE_NOMEM: case SQLITE_AUTH:
      return true;
    default:
      return false;
  }
}

std::string fix_for(int rc) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB: case SQLITE_CORRUPT:
      return "the file is not a scaleinv database or is damaged: restore a copy, or give another path";
    case SQLITE_BUSY: case SQLITE_LOCKED:
      return "another process holds the database: wait for it to finish";
    case SQLITE_FULL: return "free disk space";
    default: return "check the path, the directory and its permissions";
  }
}
}  // namespace

SqliteDb::SqliteDb(const std::string& path, Mode mode) : path_(path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError(path, "", "is a directory, not a database file", "give a file path such as runs/sweeps/NAME.db");
  if (mode == Mode::ReadOnly && !std::filesystem::is_regular_file(path, ec))
    throw UserError(path, "", "no such database file", "give the path of a database written by scaleinv");
  // Read-only: where no -wal file exists no writer is active and the file holds every committed
  // row, so it is opened immutable (SQLite then creates no -wal/-shm files beside it, not even for
  // a damaged or truncated file); with a -wal file present (a sweep still running), as a plain
  // read-only reader that sees the WAL's rows too.
  std::string name = path;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (mode == Mode::ReadOnly) {
    flags = SQLITE_OPEN_READONLY;
    if (!std::filesystem::exists(path + "-wal", ec)) {
      name = "file:";
      for (char c : path) {
        if (c == '%' || c == '?' || c == '#') name += fmt::format("%{:02X}", static_cast<unsigned char>(c));
        else name += c;
      }
      name += "?immutable=1";
      flags |= SQLITE_OPEN_URI;
    }
  }
  const int rc = sqlite3_open_v2(name.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    if (mode != Mode::ReadOnly)
      if (const std::string why = why_not_writable(path); !why.empty())
        throw UserError(path, "", "cannot create or open the database: " + why, "write it to a directory you can write to");
    throw UserError(path, "", "cannot open database: " + msg, fix_for(rc));
  }
  sqlite3_extended_result_codes(db_, 0);
  sqlite3_busy_timeout(db_, 10000);
  try {
    if (mode == Mode::ReadOnly) {
      // An empty file is a valid (empty) SQLite database to SQLite; to a reader it is no database.
      if (std::filesystem::file_size(path, ec) == 0)
        throw UserError(path, "", "the file is empty, not a database", "give the path of a database written by scaleinv");
      query("SELECT COUNT(*) FROM sqlite_master");  // fails here on a file that is no database
    } else {
      exec("PRAGMA journal_mode=WAL");
      exec("PRAGMA synchronous=NORMAL");
    }
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

SqliteDb::~SqliteDb() { sqlite3_close(db_); }

void SqliteDb::fail(int rc, const std::string& sql) {
  const std::string msg = sqlite3_errmsg(db_);
  if (user_caused(rc)) throw UserError(path_, "", "sqlite: " + msg, fix_for(rc));
  throw std::runtime_error(path_ + ": sqlite: " + msg + " in: " + sql);
}

void SqliteDb::exec(const std::string& sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  if (rc != SQLITE_OK) fail(rc, sql);
}

static void bind_all(sqlite3_stmt* s, const std::vector<SqlValue>& args) {
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
  if (int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr); rc != SQLITE_OK) fail(rc, sql);
  bind_all(st.s, args);
  std::vector<std::vector<SqlValue>> rows;
  for (;;) {
    int rc = sqlite3_step(st.s);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) fail(rc, sql);
    std::vector<SqlValue> row;
    const int n = sqlite3_column_count(st.s);
    for (int c = 0; c < n; ++c) {
      switch (sqlite3_column_type(st.s, c)) {
        case SQLITE_INTEGER: row.emplace_back(static_cast<int64_t>(sqlite3_column_int64(st.s, c))); break;
        case SQLITE_FLOAT: row.emplace_back(sqlite3_column_double(st.s, c)); break;
        case SQLITE_NULL: row.emplace_back(nullptr); break;
        default: {
          const auto* txt = reinterpret_cast<const char*>(sqlite3_column_text(st.s, c));
          row.emplace_back(std::string(txt ? txt : "", static_cast<size_t>(sqlite3_column_bytes(st.s, c))));
        }
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

void SqliteDb::check_integrity() {
  auto rows = query("PRAGMA quick_check");
  if (rows.size() == 1 && std::holds_alternative<std::string>(rows[0][0]) && std::get<std::string>(rows[0][0]) == "ok")
    return;
  std::string first = rows.empty() || !std::holds_alternative<std::string>(rows[0][0]) ? "no answer"
                                                                                      : std::get<std::string>(rows[0][0]);
  // quick_check's answer can span lines ("*** in database main ***\nPage 3: ..."): one line, cut short.
  for (char& c : first)
    if (c == '\n' || c == '\r') c = ' ';
  if (first.size() > 160) first = first.substr(0, 157) + "...";
  throw UserError(path_, "integrity", "the database is damaged (sqlite quick_check: " + first + ")",
                  "restore a copy, or move it away and start over");
}

void SqliteDb::checkpoint_wal() {
  int log = 0, done = 0;
  const int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_TRUNCATE, &log, &done);
  if (rc != SQLITE_OK && rc != SQLITE_BUSY) fail(rc, "wal_checkpoint");
}

bool SqliteDb::has_table(const std::string& name) {
  return !query("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", {name}).empty();
}

std::string sql_text(const SqlValue& v, const std::string& db_path, const std::string& column) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  throw UserError(db_path, column, "holds a value that is not text (a damaged or foreign database)",
                  "give a database written by scaleinv, or restore a copy");
}

int64_t sql_int(const SqlValue& v, const std::string& db_path, const std::string& column) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  throw UserError(db_path, column, "holds a value that is not an integer (a damaged or foreign database)",
                  "give a database written by scaleinv, or restore a copy");
}

}  // namespace scaleinv
