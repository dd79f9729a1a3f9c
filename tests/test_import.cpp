// Results produced elsewhere imported into a sweep store (brain/sweep/import_results.h; issue 60's
// "Import"): the readers, the store's layout, what predict / transfer-report / sweep rank make of it,
// 64-bit scales, two sources read as one, re-import and --append, and nothing left on a refusal.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <fmt/format.h>

#include "cli_util.h"
#include "brain/util/errors.h"
#include "brain/util/sqlite_db.h"
#include "brain/report/transfer.h"
#include "brain/sweep/import_results.h"

namespace fs = std::filesystem;
using scaleinv::testing::run_cli;
using scaleinv::testing::slurp;
using scaleinv::testing::temp_dir;

namespace scaleinv {
namespace {


// A planted grid: N in 1e8..8e8 (and D fixed at 1e11), log2 LR -12..-4; the optimum falls by half
// a doubling per doubling of N. `hole` leaves out one off-optimum LR at every N.
std::string planted_csv(bool hole) {
  std::string s = "N,D,lr,bs,loss\n";
  for (double n : {1e8, 2e8, 4e8, 8e8})
    for (int k = -12; k <= -4; ++k) {
      if (hole && k == -12) continue;
      const double opt = -8 - 0.5 * std::log2(n / 1e8);
      s += fmt::format("{:.0f},100000000000,{},256,{}\n", n, std::exp2(k), 2 + 0.01 * (k - opt) * (k - opt));
    }
  return s;
}

ImportMapping nd_mapping() {
  ImportMapping m;
  m.lr = "lr";
  m.loss = "loss";
  m.scales = {{"N", "N"}, {"D", "D"}};
  m.hparams = {{"batch_size", "bs"}};
  m.units = {{"N", "params"}, {"D", "tokens"}};
  return m;
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

TEST(ImportResults, CsvWithHolesIsReadByPredictTransferReportAndRank) {
  const std::string dir = temp_dir("import_holes");
  scaleinv::testing::write_file(dir + "/r.csv", planted_csv(true));
  const auto imp = run_cli(fmt::format("import-results {0}/r.csv --out {0}/s.db --lr lr --loss loss --scale N=N "
                                       "--scale D=D --hparam batch_size=bs --unit N=params --source test",
                                       dir));
  ASSERT_EQ(imp.code, 0) << imp.err;
  EXPECT_NE(imp.out.find("32 rows read: 32 points written (0 diverged); 32 points in"), std::string::npos) << imp.out;
  EXPECT_NE(imp.out.find("| N (params) | 4 | 100000000: 8; 200000000: 8; 400000000: 8; 800000000: 8 |"),
            std::string::npos)
      << imp.out;
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"r.csv", "s.db"}));  // no lock, -wal or temporary file left
  const SweepTable t = read_sweep_rows(dir + "/s.db");
  ASSERT_EQ(t.rows.size(), 32u);
  EXPECT_EQ(t.rows[0].width, 0);
  EXPECT_EQ(t.rows[0].param, "imported");
  EXPECT_EQ(t.rows[0].config, "{}");
  const auto pred = run_cli(fmt::format("predict --db {}/s.db --holdout --bootstrap 20", dir));
  ASSERT_EQ(pred.code, 0) << pred.err;
  EXPECT_NE(pred.out.find("| imported, N (D=100000000000, batch_size=256) |"), std::string::npos) << pred.out;
  EXPECT_EQ(pred.out.find("width 0"), std::string::npos) << pred.out;
  const auto rep = run_cli(fmt::format("transfer-report --db {0}/s.db --out {0}/rep --bootstrap 20", dir));
  ASSERT_EQ(rep.code, 0) << rep.err;
  EXPECT_EQ(rep.out.find("width 0"), std::string::npos) << rep.out;
  // `sweep rank` ranks each cell's runs (an import is a grid, not a search's trials): at N = 1e8 the
  // planted optimum, log2 LR -8, is first at the least loss, the next runs half a doubling away.
  const auto rank = run_cli(fmt::format("sweep rank --db {}/s.db --top 2", dir));
  ASSERT_EQ(rank.code, 0) << rank.err;
  EXPECT_NE(rank.out.find("| imported, D=100000000000, N=100000000 | 1 | 0.003906 | -8.00 | batch_size=256 | 2.0000 | +0.000% |"),
            std::string::npos)
      << rank.out;
  EXPECT_NE(rank.out.find("|  | 2 | 0.001953 | -9.00 | batch_size=256 | 2.0100 | +0.500% |"), std::string::npos) << rank.out;
  EXPECT_NE(rank.out.find("32 points in 4 cells"), std::string::npos) << rank.out;
  const auto with_config = run_cli(fmt::format("sweep rank --db {0}/s.db --config {0}/r.csv", dir));
  EXPECT_EQ(with_config.code, 2);
  EXPECT_NE(with_config.err.find("field '--config': an imported store has no sweep file"), std::string::npos) << with_config.err;
}

TEST(ImportResults, SixtyFourBitScalesKeepTheirTextAndWidthsPastTwoToThe31) {
  const std::string dir = temp_dir("import_64bit");
  ResultTable t;
  t.file = dir + "/t.csv";
  t.format = "csv";
  t.columns = {"N", "D", "w", "lr", "loss"};
  t.rows = {{"2.15e9", "100000000000", "3000000000", "0.001", "2.5"},
            {"2.15e9", "100000000000", "3000000000", "0.002", "2.4"}};
  ImportMapping m;
  m.lr = "lr";
  m.loss = "loss";
  m.scales = {{"N", "N"}, {"D", "D"}, {"width", "w"}};
  import_results(t, m, dir + "/s.db");
  const SweepTable r = read_sweep_rows(dir + "/s.db");
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].axes.at("N"), "2.15e9");  // the text as written
  EXPECT_EQ(std::strtod(r.rows[0].axes.at("N").c_str(), nullptr), 2.15e9);
  EXPECT_EQ(r.rows[0].axes.at("D"), "100000000000");
  EXPECT_EQ(r.rows[0].width, 3000000000LL);
  EXPECT_EQ(r.rows[0].axes.count("width"), 0u);  // the store's own column, not an axis
  EXPECT_DOUBLE_EQ(r.rows[1].lr_log2, std::log2(0.002));
}

TEST(ImportResults, TwoSourcesOfOneLayoutReadAsOneAndAPointInBothIsReadOnce) {
  const std::string dir = temp_dir("import_sources");
  scaleinv::testing::write_file(dir + "/a.csv", planted_csv(false));
  // A second file: one more cell (N = 1.6e9) and one run the first holds too (another spelling of N).
  scaleinv::testing::write_file(dir + "/b.csv", "N,D,lr,bs,loss\n1.6e9,1e11,0.001,256,2.3\n100000000,100000000000,0.00390625,256,2.0\n");
  ImportMapping a = nd_mapping(), b = nd_mapping();
  a.source = "https://example.org/a.csv";
  b.source = "a second lab's run";
  import_results(read_csv_table(dir + "/a.csv"), a, dir + "/a.db");
  import_results(read_csv_table(dir + "/b.csv"), b, dir + "/b.db");
  const SweepTable t = read_sweep_rows(std::vector<std::string>{dir + "/a.db", dir + "/b.db"});
  EXPECT_EQ(t.rows.size(), 37u);  // 36 + the new cell
  EXPECT_EQ(t.duplicates, 1);
  const auto cli = run_cli(fmt::format("predict --db {0}/a.db --db {0}/b.db --holdout --bootstrap 20", dir));
  EXPECT_EQ(cli.code, 0) << cli.err;
}

TEST(ImportResults, DivergedAndMissingLossesAndJsonLines) {
  const std::string dir = temp_dir("import_jsonl");
  scaleinv::testing::write_file(dir + "/r.jsonl",
        "{\"N\": 2150000000, \"lr\": 0.001, \"loss\": 2.5}\n\n{\"N\": 2150000000, \"lr\": 0.002, \"loss\": \"nan\"}\n"
        "{\"N\": 2150000000, \"lr\": 0.004, \"loss\": null}\n{\"N\": 2150000000, \"lr\": 0.008, \"loss\": \"inf\"}\n");
  ImportMapping m;
  m.lr = "lr";
  m.loss = "loss";
  m.scales = {{"N", "N"}};
  const ImportSummary s = import_results(read_result_table(dir + "/r.jsonl", ""), m, dir + "/s.db");
  EXPECT_EQ(s.rows, 4);
  EXPECT_EQ(s.points, 3);
  EXPECT_EQ(s.diverged, 2);
  EXPECT_EQ(s.skipped, 1);  // the null loss: no result, not a diverged run
  const SweepTable t = read_sweep_rows(dir + "/s.db");
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_FALSE(t.rows[0].diverged);
  EXPECT_TRUE(t.rows[1].diverged && std::isnan(t.rows[1].final_loss));
  EXPECT_EQ(t.rows[0].axes.at("N"), "2150000000");
}

TEST(ImportResults, QuotedCsvFieldsAndAParamColumnAndSeeds) {
  const std::string dir = temp_dir("import_quoted");
  scaleinv::testing::write_file(dir + "/r.csv", "\xEF\xBB\xBFN,lr,loss,sched,p,s\n1e9,0.001,2.5,\"cos, warm\",mup,0\n1e9,0.001,2.6,\"cos, warm\",mup,1\n"
                        "1e9,0.001,2.7,\"say \"\"hi\"\"\",standard,0\n");
  ImportMapping m;
  m.lr = "lr";
  m.loss = "loss";
  m.scales = {{"N", "N"}};
  m.hparams = {{"schedule", "sched"}};
  m.param_column = "p";
  m.param = "";
  m.seed_column = "s";
  import_results(read_csv_table(dir + "/r.csv"), m, dir + "/s.db");
  const SweepTable t = read_sweep_rows(dir + "/s.db");
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[0].axes.at("schedule"), "cos, warm");
  EXPECT_EQ(t.rows[1].seed, 1);
  EXPECT_EQ(t.rows[2].param, "standard");
  EXPECT_EQ(t.rows[2].axes.at("schedule"), "say \"hi\"");
}

TEST(ImportResults, SameImportRewritesAnotherIsRefusedAndAppendAdds) {
  const std::string dir = temp_dir("import_append");
  scaleinv::testing::write_file(dir + "/a.csv", planted_csv(false));
  scaleinv::testing::write_file(dir + "/b.csv", "N,D,lr,bs,loss\n1.6e9,1e11,0.001,256,2.3\n");
  const std::string db = dir + "/s.db";
  import_results(read_csv_table(dir + "/a.csv"), nd_mapping(), db);
  const ImportSummary again = import_results(read_csv_table(dir + "/a.csv"), nd_mapping(), db);
  EXPECT_EQ(again.total, 36);
  const std::string before = slurp(db);
  EXPECT_THROW(import_results(read_csv_table(dir + "/b.csv"), nd_mapping(), db), UserError);
  EXPECT_EQ(slurp(db), before);  // refused: the store as it was
  ImportMapping app = nd_mapping();
  app.append = true;
  EXPECT_EQ(import_results(read_csv_table(dir + "/b.csv"), app, db).total, 37);
  EXPECT_THROW(import_results(read_csv_table(dir + "/b.csv"), app, db), UserError);  // already imported
  ImportMapping other = app;
  other.scales = {{"N", "N"}};  // another layout
  scaleinv::testing::write_file(dir + "/c.csv", "N,D,lr,bs,loss\n3.2e9,1e11,0.001,256,2.2\n");
  EXPECT_THROW(import_results(read_csv_table(dir + "/c.csv"), other, db), UserError);
  SqliteDb s(db, SqliteDb::Mode::ReadOnly);
  const auto rows = s.query("SELECT value FROM meta WHERE key = 'imported'");
  ASSERT_EQ(rows.size(), 1u);
  const std::string imported = std::get<std::string>(rows[0][0]);
  EXPECT_NE(imported.find("a.csv"), std::string::npos);
  EXPECT_NE(imported.find("b.csv"), std::string::npos);
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"a.csv", "b.csv", "c.csv", "s.db"}));
}

TEST(ImportResults, RefusalsNameTheColumnAndLeaveNoFile) {
  const std::string dir = temp_dir("import_refusals");
  scaleinv::testing::write_file(dir + "/r.csv", "N,lr,loss\n1e9,0.001,2.5\n1e9,0.001,2.6\n");
  ImportMapping m;
  m.lr = "lr";
  m.loss = "loss";
  m.scales = {{"N", "N"}};
  try {
    import_results(read_csv_table(dir + "/r.csv"), m, dir + "/s.db");
    FAIL() << "two rows of one point were imported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("data rows 1 and 2"), std::string::npos) << e.what();
  }
  m.scales = {{"N", "params"}};
  try {
    import_results(read_csv_table(dir + "/r.csv"), m, dir + "/s.db");
    FAIL() << "a missing column was imported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("its columns: N, lr, loss"), std::string::npos) << e.what();
  }
  EXPECT_EQ(files_in(dir), (std::set<std::string>{"r.csv"}));
}

}  // namespace
}  // namespace scaleinv
