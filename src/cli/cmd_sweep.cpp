// `scaleinv sweep --config SWEEP.toml [--out DB] [--shard i/N] [--resume] [--no-batch] [--quiet]`
// `scaleinv sweep merge OUT.db IN1.db IN2.db ...`
// Runs a hyperparameter sweep into a SQLite store (issue 8; sweep/*.h), or merges shard stores.
// --shard i/N is 0-based: shards 0/N .. N-1/N together run the grid exactly once.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/cli_options.h"
#include "cli/commands.h"
#include "brain/util/errors.h"
#include "brain/util/stop_signal.h"
#include "brain/report/cell_ranking.h"
#include "brain/sweep/import_results.h"
#include "engine/sweep/search_runner.h"
#include "brain/sweep/shard.h"
#include "engine/sweep/sweep_runner.h"
#include "brain/sweep/sweep_spec.h"
#include "brain/sweep/sweep_store.h"
#include "brain/sweep/user_sweep.h"

namespace scaleinv {

void add_sweep_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string config, out, shard = "0/1", batch = "auto", rung_db;
    bool resume = false, quiet = false, no_batch = false;
    int jobs = 0, top = 3, rung = -1;
    std::vector<std::string> merge_paths;
  };
  auto o = std::make_shared<Opts>();
  auto* sweep = app.add_subcommand("sweep", "Run a hyperparameter sweep (grid over LR, width, depth, param, seed...) "
                                            "into a resumable SQLite store; `sweep merge` combines shards");
  reads(sweep->add_option("--config", o->config, "sweep TOML (examples/sweeps/)"));
  writes(sweep->add_option("--out", o->out, "SQLite database (default: [sweep] db, or runs/sweeps/NAME.db)"));
  sweep->add_option("--shard", o->shard, "run shard i of N, 0-based: 0/N .. N-1/N (default 0/1: everything)");
  sweep->add_flag("--resume", o->resume, "skip the points already in the database");
  sweep->add_option("--batch", o->batch,
                    "auto (default: batched ensembles on a GPU, one point at a time on a CPU, where batching measured "
                    "slower), on, or off");
  sweep->add_flag("--no-batch", o->no_batch, "the same as --batch off");
  sweep->add_option("--jobs", o->jobs,
                    "chunks trained at once, one core each (0-1024; default: on CUDA 4, each on a stream of its own; on a CPU 1 when chunks batch, else one per core)")
      ->check(CLI::Range(0, 1024));
  sweep->add_flag("--quiet", o->quiet, "no progress bar");
  sweep->add_option("--rung", o->rung, "a search: run only rung K (0-based), planned from --rung-db's earlier rungs "
                                       "(what a task of `sweep submit` runs)")
      ->check(CLI::Range(0, 1000));
  reads(sweep->add_option("--rung-db", o->rung_db, "with --rung: the store holding the rungs before it"));
  sweep->require_subcommand(0, 1);
  add_sweep_cluster_commands(sweep, exit_code);
  auto* merge = sweep->add_subcommand("merge", "Combine shard databases of one sweep: merge OUT.db IN1.db IN2.db ...");
  merge->add_option("paths", o->merge_paths, "OUT.db followed by the input databases")->required();

  merge->callback([o, &exit_code] {
    if (o->merge_paths.size() < 2)
      throw UserError("command line", "sweep merge", "needs OUT.db and at least one input",
                      "write scaleinv sweep merge OUT.db IN1.db IN2.db ...");
    const std::string out = o->merge_paths.front();
    std::vector<std::string> ins(o->merge_paths.begin() + 1, o->merge_paths.end());
    MergeSummary m = merge_sweep_dbs(out, ins);
    std::printf("merged %zu databases into %s: %lld rows read, %lld added, %lld in total\n", ins.size(), out.c_str(),
                static_cast<long long>(m.rows_read), static_cast<long long>(m.rows_added),
                static_cast<long long>(m.total));
    exit_code = 0;
  });

  auto* rank = sweep->add_subcommand("rank", "Rank the trials of a [search] sweep from its database (e.g. after merging shards)");
  reads(rank->add_option("--config", o->config, "the search's sweep TOML (a Python search of your model: read from the database when left out)"));
  reads(rank->add_option("--db", o->out, "its database (merged shards, or a partial one; an imported store: each cell's best runs)")->required());
  rank->add_option("--top", o->top, "an imported store: runs shown per cell (default 3)");
  rank->callback([o, &exit_code] {
    if (!std::filesystem::exists(o->out))
      throw UserError(o->out, "--db", "no such database", "give the file written by scaleinv sweep (--out)");
    if (is_imported_store(o->out)) {  // a grid of results from elsewhere: each cell's best runs
      if (!o->config.empty())
        throw UserError("command line", "--config", "an imported store has no sweep file", "leave --config out");
      std::fputs(rank_cells_markdown(read_sweep_rows(o->out), o->top).c_str(), stdout);
      exit_code = 0;
      return;
    }
    SweepSpec spec = o->config.empty() ? stored_user_sweep(o->out) : load_sweep(o->config);
    if (const std::string fp = sweep_db_fingerprint(o->out); fp != spec.fingerprint)
      throw UserError(o->out, "meta.fingerprint",
                      fmt::format("holds another sweep or grid (fingerprint {}; {} has {})", fp, o->config,
                                  spec.fingerprint),
                      "rank a database with the sweep file that wrote it");
    SearchRunSummary s;
    s.ranking = rank_search(spec, o->out);
    s.json_path = "(not written by rank)";
    std::fputs(render_search_summary(spec, s).c_str(), stdout);
    exit_code = 0;
  });
  sweep->callback([o, sweep, &exit_code] {
    if (!sweep->get_subcommands().empty()) return;  // merge, rank, submit, status, collect, drive
    if (o->config.empty())
      throw UserError("command line", "--config", "missing", "write scaleinv sweep --config SWEEP.toml");
    const Shard shard = parse_shard(o->shard);
    SweepSpec spec = load_sweep(o->config);
    if (spec.user_model)
      throw UserError(o->config, "sweep.target",
                      "is \"python\": a sweep of your own model, which only your training function can train",
                      "run it from Python with scaleinv.sweep(make_model, train, space=\"" + o->config +
                          "\", db=...); scaleinv sweep rank/merge and transfer-report read its store");
    SweepRunOptions ro;
    ro.shard = shard;
    ro.db_path = o->out.empty() ? default_db_path(spec, shard) : o->out;
    ro.resume = o->resume;
    ro.show_progress = !o->quiet;
    const std::map<std::string, Batching> modes = {{"auto", Batching::Auto}, {"on", Batching::On}, {"off", Batching::Off}};
    if (!modes.count(o->batch))
      throw UserError("command line", "--batch", "is \"" + o->batch + "\"", "write --batch auto, on or off");
    ro.batching = o->no_batch ? Batching::Off : modes.at(o->batch);
    ro.jobs = o->jobs;
    install_stop_handlers();  // Ctrl-C or SIGTERM: the chunks in flight are stored, then it stops
    int stopped_by = 0;
    if (o->rung >= 0 || !o->rung_db.empty()) {  // one rung of a search, planned from the rungs before it
      if (o->rung < 0 || o->rung_db.empty())
        throw UserError("command line", o->rung < 0 ? "--rung" : "--rung-db", "is missing: --rung and --rung-db go together",
                        "give both: --rung K --rung-db DB (the store holding the rungs before K)");
      SweepRunSummary s = run_sweep(search_rung_spec(spec, o->rung_db, o->rung), ro);
      std::fputs(render_sweep_summary(s).c_str(), stdout);
      stopped_by = s.stopped_by;
    } else if (spec.search) {
      SearchRunSummary s = run_search(spec, ro);
      std::fputs(render_search_summary(spec, s).c_str(), stdout);
      stopped_by = s.rungs.empty() ? 0 : s.rungs.back().stopped_by;
    } else {
      SweepRunSummary s = run_sweep(spec, ro);
      std::fputs(render_sweep_summary(s).c_str(), stdout);
      stopped_by = s.stopped_by;
    }
    exit_code = 0;
    if (stopped_by) {
      exit_code = 128 + stopped_by;
      std::fprintf(stderr, "stopped by %s: every finished point is in %s (fix: run the same command again with --resume to go on)\n",
                   stop_signal_name(stopped_by).c_str(), ro.db_path.c_str());
    }
  });
}

}  // namespace scaleinv
