// `scaleinv transfer-report --db FILE [--db FILE ...] [--out DIR] [--bootstrap N]`
// Analyses a sweep store (brain/report/transfer.h): the optimal LR per parameterization and width (or
// depth), its drift, wider-is-better, transfer regret; writes DIR/report.html (self-contained),
// DIR/summary.md, DIR/transfer.json and the plots, and prints the markdown table. Several --db
// files are read as one sweep (a point in more than one is read once).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/errors.h"
#include "brain/report/html_report.h"
#include "brain/report/transfer.h"

namespace scaleinv {

void add_transfer_report_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::vector<std::string> dbs;
    std::string out;
    int bootstrap = 200;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("transfer-report",
                                 "Judge hyperparameter transfer in a sweep database: optimum per width/depth, drift, "
                                 "regret; HTML + markdown + JSON");
  reads(cmd->add_option("--db", o->dbs, "sweep database (scaleinv sweep --out); repeat to read several as one")->required());
  writes(cmd->add_option("--out", o->out, "output directory (default: DB's directory / NAME-report)"), /*dir=*/true);
  cmd->add_option("--bootstrap", o->bootstrap, "bootstrap resamples over seeds (default 200)");
  cmd->callback([o, &exit_code] {
    check_bootstrap(o->bootstrap, "command line", "--bootstrap", "--bootstrap 200");
    const SweepTable t = read_sweep_rows(o->dbs);
    TransferOptions topts;
    topts.bootstrap = o->bootstrap;
    TransferAnalysis a = analyze_transfer(t, topts);
    std::string out = o->out;
    if (out.empty()) {
      std::filesystem::path p(o->dbs.front());
      out = (p.parent_path() / (p.stem().string() + "-report")).string();
    }
    TransferReportFiles f = write_transfer_report(a, out);
    std::fputs(transfer_markdown(a).c_str(), stdout);
    std::printf("\n%s: %lld points (%lld diverged; a grid point where any seed diverged counts as +inf)\n",
                t.db.c_str(), static_cast<long long>(a.rows), static_cast<long long>(a.diverged_rows));
    if (t.duplicates > 0)
      std::printf("%lld points were in more than one database and were read once\n", static_cast<long long>(t.duplicates));
    std::printf("wrote %s, %s, %s (%d plots inlined)\n", f.html.c_str(), f.markdown.c_str(), f.json.c_str(), f.images);
    exit_code = 0;
  });
}

}  // namespace scaleinv
