// src/core: atomic writes under concurrent writers, the SQLite wrapper's modes and errors.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "cli_util.h"
#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/sqlite_db.h"
#include "core/stable_hash.h"
#include "core/toml_json.h"
#include "core/toml_reader.h"

using namespace scaleinv;
using scaleinv::testing::temp_dir;
using scaleinv::testing::slurp;
namespace fs = std::filesystem;

namespace {
}  // namespace

// Many threads of two processes write the same path at once (a cold cache, a shared report): every
// write succeeds, the file is one writer's whole contents, and no temporary file is left.
TEST(AtomicFile, ConcurrentWritersFromThreadsAndProcessesAllSucceed) {
  const std::string dir = temp_dir("atomic");
  const std::string path = dir + "/sub/shared.txt";  // the parent is created concurrently too
  auto hammer = [&](char tag) {
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 25; ++i) {
          try {
            write_file_atomic(path, std::string(64 * 1024, static_cast<char>(tag + t)));
          } catch (const std::exception&) {
            ++failures;
          }
        }
      });
    for (auto& th : threads) th.join();
    return failures.load();
  };
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(hammer('a') == 0 ? 0 : 1);
  EXPECT_EQ(hammer('A'), 0);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a write in the child process failed";
  const std::string got = slurp(path);
  ASSERT_EQ(got.size(), 64u * 1024);
  EXPECT_EQ(got, std::string(got.size(), got[0]));  // one writer's whole file, never a mix
  for (const auto& e : fs::directory_iterator(dir + "/sub")) EXPECT_EQ(e.path(), fs::path(path)) << "left behind";
}

TEST(AtomicFile, TemporaryNamesAreUniquePerWriter) {
  std::set<std::string> names;
  for (int i = 0; i < 1000; ++i) names.insert(unique_temp_path("/x/f"));
  EXPECT_EQ(names.size(), 1000u);
  EXPECT_NE(names.begin()->find(".tmp." + std::to_string(::getpid()) + "."), std::string::npos);
}

TEST(AtomicFile, AParentThatIsAFileIsAUserErrorNamingThePath) {
  const std::string dir = temp_dir("atomic_parent");
  std::ofstream(dir + "/file") << "x";
  try {
    write_file_atomic(dir + "/file/out.json", "{}");
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/file/out.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_file(dir), UserError);  // a directory is not a file
}

TEST(SqliteDb, ReadOnlyNeverCreatesOrConvertsAFile) {
  const std::string dir = temp_dir("sqlite_ro");
  EXPECT_THROW(SqliteDb(dir + "/missing.db", SqliteDb::Mode::ReadOnly), UserError);
  EXPECT_FALSE(fs::exists(dir + "/missing.db"));
  std::ofstream(dir + "/empty.db").flush();
  EXPECT_THROW(SqliteDb(dir + "/empty.db", SqliteDb::Mode::ReadOnly), UserError);
  EXPECT_EQ(fs::file_size(dir + "/empty.db"), 0u);
  std::ofstream(dir + "/junk.db") << std::string(5000, 'j');
  EXPECT_THROW(SqliteDb(dir + "/junk.db", SqliteDb::Mode::ReadOnly), UserError);
  for (const char* f : {"empty.db-wal", "empty.db-shm", "junk.db-wal", "junk.db-shm"}) EXPECT_FALSE(fs::exists(dir + "/" + f)) << f;
  {
    SqliteDb w(dir + "/good.db");
    w.exec("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (7)");
    w.checkpoint_wal();
  }
  SqliteDb r(dir + "/good.db", SqliteDb::Mode::ReadOnly);
  r.check_integrity();
  EXPECT_TRUE(r.has_table("t"));
  EXPECT_EQ(sql_int(r.query("SELECT x FROM t")[0][0], r.path(), "t.x"), 7);
  EXPECT_THROW(r.exec("INSERT INTO t VALUES (8)"), UserError);  // read-only: a UserError, not a crash
  EXPECT_THROW(sql_text(SqlValue(nullptr), r.path(), "t.x"), UserError);
}

TEST(SqliteDb, AWriterOnAFileThatIsNoDatabaseGetsAUserError) {
  const std::string dir = temp_dir("sqlite_junk");
  std::ofstream(dir + "/junk.db") << std::string(5000, 'j');
  EXPECT_THROW(SqliteDb(dir + "/junk.db"), UserError);
}

TEST(StableHash, IsFnv1a64AsSixteenHexDigits) {
  EXPECT_EQ(stable_hash(""), "cbf29ce484222325");
  EXPECT_EQ(stable_hash("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(stable_hash64("a"), 0xaf63dc4c8601ec8cull);
}

TEST(TomlJson, ScalarsKeepTheirTypeArraysAndTablesAreNone) {
  const toml::table t = parse_toml("i = 3\nf = 0.5\ns = \"mup\"\nb = true\na = [1, 2]\n[sub]\nx = 1\n", "t.toml");
  EXPECT_TRUE(toml_scalar_json(*t.get("i"))->is_number_integer());
  EXPECT_EQ(*toml_scalar_json(*t.get("i")), 3);
  EXPECT_TRUE(toml_scalar_json(*t.get("f"))->is_number_float());
  EXPECT_EQ(*toml_scalar_json(*t.get("s")), "mup");
  EXPECT_EQ(*toml_scalar_json(*t.get("b")), true);
  EXPECT_FALSE(toml_scalar_json(*t.get("a")).has_value());
  EXPECT_FALSE(toml_scalar_json(*t.get("sub")).has_value());
}
