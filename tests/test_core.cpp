// src/brain/util: atomic writes under concurrent writers, the SQLite wrapper's modes and errors, typed
// TOML reads, exponent fractions.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "cli_util.h"
#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/util/fraction.h"
#include "brain/util/json_number.h"
#include "brain/util/sqlite_db.h"
#include "brain/util/stable_hash.h"
#include "brain/util/toml_json.h"
#include "brain/util/toml_reader.h"
#include "fixtures.h"

using namespace scaleinv;
using scaleinv::testing::user_error_of;
using scaleinv::testing::temp_dir;
using scaleinv::testing::slurp;
namespace fs = std::filesystem;

namespace {


bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

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

TEST(TomlReader, ReadsPresentFieldsAndKeepsDefaultsOfMissingOnes) {
  const toml::table t = parse_toml("width = 128\nlr = 0.25\nname = \"mup\"\nflag = true\nsteps = 3.0\n", "cfg.toml");
  const TomlReader r(t, "cfg.toml", "model.");
  int width = 64, depth = 4;
  int64_t steps = 0;
  double lr = 1, eps = 1e-8;
  std::string name = "sp", act = "relu";
  bool flag = false, tied = true;
  r.get("width", &width);
  r.get("lr", &lr);
  r.get("name", &name);
  r.get("flag", &flag);
  r.get("steps", &steps);  // a whole float is an integer
  EXPECT_EQ(width, 128);
  EXPECT_EQ(lr, 0.25);
  EXPECT_EQ(name, "mup");
  EXPECT_TRUE(flag);
  EXPECT_EQ(steps, 3);
  r.get("depth", &depth);
  r.get("eps", &eps);
  r.get("act", &act);
  r.get("tied", &tied);
  EXPECT_EQ(depth, 4);
  EXPECT_EQ(eps, 1e-8);
  EXPECT_EQ(act, "relu");
  EXPECT_TRUE(tied);
  EXPECT_NO_THROW(r.reject_unknown());  // every key present was read
  EXPECT_TRUE(r.has("width"));
  EXPECT_FALSE(r.has("depth"));
}

TEST(TomlReader, AWrongTypeIsAUserErrorNamingFileAndDottedField) {
  const toml::table t = parse_toml("width = \"wide\"\nlr = \"fast\"\nflag = 1\nname = 3\nsteps = 2.5\n", "cfg.toml");
  const TomlReader r(t, "cfg.toml", "model.");
  int width = 64;
  EXPECT_EQ(user_error_of([&] { r.get("width", &width); }),
            "cfg.toml: field 'model.width': expected an integer (fix: write e.g. width = 64)");
  EXPECT_EQ(width, 64);  // left as it was
  double lr = 0.5;
  const std::string lr_msg = user_error_of([&] { r.get("lr", &lr); });
  EXPECT_TRUE(contains(lr_msg, "cfg.toml") && contains(lr_msg, "'model.lr'") && contains(lr_msg, "expected a number"))
      << lr_msg;
  bool flag = false;
  const std::string flag_msg = user_error_of([&] { r.get("flag", &flag); });
  EXPECT_TRUE(contains(flag_msg, "cfg.toml") && contains(flag_msg, "'model.flag'") &&
              contains(flag_msg, "true or false"))
      << flag_msg;
  std::string name;
  const std::string name_msg = user_error_of([&] { r.get("name", &name); });
  EXPECT_TRUE(contains(name_msg, "'model.name'") && contains(name_msg, "expected a string")) << name_msg;
  int64_t steps = 0;
  const std::string steps_msg = user_error_of([&] { r.get("steps", &steps); });
  EXPECT_TRUE(contains(steps_msg, "'model.steps'") && contains(steps_msg, "expected an integer")) << steps_msg;
}

TEST(TomlReader, RequireNamesAMissingField) {
  const toml::table t = parse_toml("width = 8\n", "cfg.toml");
  const TomlReader r(t, "cfg.toml", "model.");
  int width = 0, depth = 0;
  r.require("width", &width);
  EXPECT_EQ(width, 8);
  EXPECT_EQ(user_error_of([&] { r.require("depth", &depth); }),
            "cfg.toml: field 'model.depth': missing (fix: add depth = <value>)");
}

TEST(TomlReader, RejectUnknownNamesTheUnknownKeyAndTheKnownOnes) {
  const toml::table t = parse_toml("width = 8\nwidht = 9\n", "cfg.toml");
  const TomlReader r(t, "cfg.toml", "model.");
  int width = 0, depth = 0;
  r.get("width", &width);
  r.get("depth", &depth);  // absent, but read: a known field
  EXPECT_EQ(user_error_of([&] { r.reject_unknown(); }),
            "cfg.toml: field 'model.widht': unknown field (fix: known fields here: depth, width)");
  EXPECT_NO_THROW(TomlReader(t, "cfg.toml", "").expect_keys({"width", "widht"}));
  EXPECT_EQ(user_error_of([&] { TomlReader(t, "cfg.toml", "").expect_keys({"width"}); }),
            "cfg.toml: field 'widht': unknown field (fix: known fields here: width)");
}

TEST(TomlReader, SubTablesReadWithTheirDottedPrefix) {
  const toml::table t = parse_toml("[model]\nwidth = 256\n[model.attn]\nheads = \"four\"\nextra = 1\n", "cfg.toml");
  const TomlReader root(t, "cfg.toml", "");
  const TomlReader model = root.sub("model");
  int width = 0;
  model.get("width", &width);
  EXPECT_EQ(width, 256);
  const TomlReader attn = model.sub("attn");
  int heads = 1;
  EXPECT_EQ(user_error_of([&] { attn.get("heads", &heads); }),
            "cfg.toml: field 'model.attn.heads': expected an integer (fix: write e.g. heads = 1)");
  EXPECT_TRUE(contains(user_error_of([&] { attn.reject_unknown(); }), "field 'model.attn.extra': unknown field"));
  // An absent sub-table reads as empty: defaults stay and nothing is unknown.
  const TomlReader data = root.sub("data");
  int vocab = 50;
  data.get("vocab", &vocab);
  EXPECT_EQ(vocab, 50);
  EXPECT_NO_THROW(data.reject_unknown());
  EXPECT_NO_THROW(root.reject_unknown());  // "model" and "data" were read through root
  // A value where a table belongs is an error naming the key.
  const toml::table flat = parse_toml("model = 3\n", "flat.toml");
  const TomlReader flat_root(flat, "flat.toml", "");
  const std::string msg = user_error_of([&] { flat_root.sub("model"); });
  EXPECT_TRUE(contains(msg, "flat.toml") && contains(msg, "'model'") && contains(msg, "expected a table")) << msg;
}

TEST(TomlReader, ExponentsAreNumbersOrFractionStrings) {
  const toml::table t = parse_toml("a = \"-1/2\"\nb = 0.25\nc = 1\nd = \"one half\"\n", "t.toml");
  const TomlReader r(t, "t.toml", "table.embedding.");
  double a = 9, b = 9, c = 9, d = 9, e = 9;
  r.get_exponent("a", &a);
  r.get_exponent("b", &b);
  r.get_exponent("c", &c);
  r.get_exponent("e", &e);  // absent: the default stays
  EXPECT_EQ(a, -0.5);
  EXPECT_EQ(b, 0.25);
  EXPECT_EQ(c, 1.0);
  EXPECT_EQ(e, 9.0);
  const std::string msg = user_error_of([&] { r.get_exponent("d", &d); });
  EXPECT_TRUE(contains(msg, "t.toml") && contains(msg, "'table.embedding.d'") && contains(msg, "fraction")) << msg;
  EXPECT_EQ(d, 9.0);
}

TEST(Fraction, ParsesFractionsAndDecimals) {
  const std::vector<std::pair<std::string, double>> cases = {
      {"1/2", 0.5},  {"-1", -1.0},  {"0", 0.0},     {"3/2", 1.5},
      {"-1/2", -0.5}, {"5/4", 1.25}, {"0.25", 0.25}, {"-3/2", -1.5}};
  for (const auto& [text, want] : cases) {
    double v = 99;
    EXPECT_TRUE(parse_fraction(text, &v)) << text;
    EXPECT_EQ(v, want) << text;
  }
}

TEST(Fraction, FormatsSimpleFractions) {
  EXPECT_EQ(format_fraction(0.5), "1/2");
  EXPECT_EQ(format_fraction(-1.0), "-1");
  EXPECT_EQ(format_fraction(0.0), "0");
  EXPECT_EQ(format_fraction(-0.0), "0");
  EXPECT_EQ(format_fraction(1.5), "3/2");
  EXPECT_EQ(format_fraction(-0.5), "-1/2");
  EXPECT_EQ(format_fraction(1.0 / 3), "1/3");
  EXPECT_EQ(format_fraction(2.0), "2");
  EXPECT_EQ(format_fraction(0.123), "0.123");  // no denominator up to 12 fits
}

TEST(Fraction, ParseAndFormatRoundTrip) {
  for (const std::string text : {"1/2", "-1", "0", "3/2", "-1/2", "5/4", "1/3", "-7/12", "2"}) {
    double v = 99;
    ASSERT_TRUE(parse_fraction(text, &v)) << text;
    EXPECT_EQ(format_fraction(v), text);
  }
  for (double x : {0.5, -1.0, 0.0, 1.5, -0.25, 2.0 / 3}) {
    double back = 99;
    ASSERT_TRUE(parse_fraction(format_fraction(x), &back)) << x;
    EXPECT_DOUBLE_EQ(back, x);
  }
}

TEST(Fraction, MalformedTextIsRejectedAndLeavesTheOutputAlone) {
  for (const std::string text : {"", "abc", "1/0", "1/", "/2", "1/2x", "1//2", "0.5.5", "nan", "inf", "1/2/3"}) {
    double v = 42;
    EXPECT_FALSE(parse_fraction(text, &v)) << "'" << text << "'";
    EXPECT_EQ(v, 42.0) << "'" << text << "'";
  }
}

// One rule for numbers in every JSON file scaleinv writes: finite as is, anything else null.
TEST(JsonNumber, NonFiniteIsNull) {
  EXPECT_EQ(scaleinv::json_number(1.5), nlohmann::json(1.5));
  EXPECT_EQ(scaleinv::json_number(-0.0).get<double>(), 0.0);
  for (double v : {std::nan(""), HUGE_VAL, -HUGE_VAL}) EXPECT_TRUE(scaleinv::json_number(v).is_null()) << v;
}
