// `scaleinv import-results FILE --out DB --lr COL --loss COL --scale NAME=COL [--scale ...]
//                         [--hparam NAME=COL ...] [--unit NAME=UNIT ...] [--param NAME | --param-column COL]
//                         [--seed-column COL] [--source TEXT] [--format csv|jsonl] [--append]`
// Sweep results produced elsewhere (a published CSV, JSON lines) into a sweep store that predict,
// transfer-report and sweep merge read (brain/sweep/import_results.h: the mapping, the store's layout,
// what is refused). Prints what it wrote: rows, points, and each scale axis' values with their
// rows. UserError (exit 2) for bad input, nothing written.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/errors.h"
#include "brain/sweep/import_results.h"

namespace scaleinv {

namespace {

// "N=N" items of `flag` -> (name, value) in the order given; UserError for an item without '='.
std::vector<std::pair<std::string, std::string>> name_pairs(const std::vector<std::string>& items,
                                                            const std::string& flag, const std::string& example) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw UserError("command line", flag, "'" + item + "' is not NAME=COLUMN", "e.g. " + flag + " " + example);
    out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  return out;
}

}  // namespace

void add_import_results_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string file, out, lr, loss, param = "imported", param_column, seed_column, source, format;
    std::vector<std::string> scales, hparams, units;
    bool append = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("import-results",
                                 "Import sweep results produced elsewhere (CSV, JSON lines) into a sweep store that "
                                 "predict and transfer-report read");
  reads(cmd->add_option("FILE", o->file, "the runs: a CSV with a header line, or JSON lines")->required());
  writes(cmd->add_option("--out", o->out, "the store to write (SQLite; written atomically)")->required());
  cmd->add_option("--lr", o->lr, "the column of each run's learning rate")->required();
  cmd->add_option("--loss", o->loss, "the column of each run's final loss (nan/inf: diverged; empty: no result, skipped)")
      ->required();
  cmd->add_option("--scale", o->scales, "NAME=COLUMN: a scale axis (N=N, D=D; width and depth are the store's own)")
      ->required();
  cmd->add_option("--hparam", o->hparams, "NAME=COLUMN: a hyperparameter swept beside the LR (batch_size=bs)");
  cmd->add_option("--unit", o->units, "NAME=UNIT: a scale axis' unit, kept in the store (N=params, D=tokens)");
  auto* param = cmd->add_option("--param", o->param, "the parameterization's name (default: imported)");
  cmd->add_option("--param-column", o->param_column, "the column naming each run's parameterization")->excludes(param);
  cmd->add_option("--seed-column", o->seed_column, "the column of each run's seed (default: every run seed 0)");
  cmd->add_option("--source", o->source, "where the results come from (URL, commit), kept in the store's meta");
  cmd->add_option("--format", o->format, "csv or jsonl (default: from the extension; .jsonl/.ndjson/.json: JSON lines)");
  cmd->add_flag("--append", o->append, "add the rows to an imported store of the same axes (not a point already there)");
  cmd->callback([o, &exit_code] {
    ImportMapping m;
    m.lr = o->lr;
    m.loss = o->loss;
    m.scales = name_pairs(o->scales, "--scale", "N=N");
    m.hparams = name_pairs(o->hparams, "--hparam", "batch_size=bs");
    for (const auto& [axis, unit] : name_pairs(o->units, "--unit", "N=params")) m.units[axis] = unit;
    m.param = o->param_column.empty() ? o->param : "";
    m.param_column = o->param_column;
    m.seed_column = o->seed_column;
    m.source = o->source;
    m.append = o->append;
    const ResultTable table = read_result_table(o->file, o->format);
    const ImportSummary s = import_results(table, m, o->out);
    std::fputs(import_summary_text(s).c_str(), stdout);
    exit_code = 0;
  });
}

}  // namespace scaleinv
