#pragma once
// The CLI is a thin layer: each subcommand registers itself on the CLI11 app, parses its options
// and calls into the library. A subcommand's callback stores its exit code in `exit_code`.
// UserError (brain/util/errors.h) thrown anywhere becomes one line on stderr and exit code 2.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace scaleinv {
void add_param_command(CLI::App& app, int& exit_code);     // cmd_param.cpp
void add_theory_command(CLI::App& app, int& exit_code);    // cmd_theory.cpp
void add_train_command(CLI::App& app, int& exit_code);     // cmd_train.cpp (train, sample)
void add_demo_command(CLI::App& app, int& exit_code);      // cmd_demo.cpp
void add_diagnose_command(CLI::App& app, int& exit_code);  // cmd_diagnose.cpp
void add_coordcheck_command(CLI::App& app, int& exit_code);  // cmd_coordcheck.cpp
void add_launch_command(CLI::App& app, int& exit_code);    // cmd_launch.cpp (data-parallel ranks)
void add_bench_command(CLI::App& app, int& exit_code);     // cmd_bench.cpp (speed benchmark)
void add_sweep_command(CLI::App& app, int& exit_code);     // cmd_sweep.cpp (sweep, sweep merge)
// sweep submit, status, collect, drive: a sweep on a cluster (cmd_sweep_cluster.cpp; called by add_sweep_command)
void add_sweep_cluster_commands(CLI::App* sweep, int& exit_code);
void add_transfer_report_command(CLI::App& app, int& exit_code);  // cmd_transfer_report.cpp
void add_predict_command(CLI::App& app, int& exit_code);   // cmd_predict.cpp (optimal LR at a larger scale)
void add_scales_command(CLI::App& app, int& exit_code);    // cmd_scales.cpp (unit scales at init)
void add_precision_command(CLI::App& app, int& exit_code); // cmd_precision.cpp (simulated bf16 / fp8)
void add_weights_commands(CLI::App& app, int& exit_code);  // cmd_weights.cpp (export, import: safetensors)
void add_import_results_command(CLI::App& app, int& exit_code);  // cmd_import.cpp (results from elsewhere into a store)
// train's command line, declared once: train parses it, and launch parses a train command with
// the same declarations before any rank starts, so a mistake in it (an unknown flag, a bad
// --stop-after, the config) is one line, not one per rank (cmd_train.cpp).
struct TrainArgs {
  std::string config;             // --config FILE.toml (sections model, param, hp, optim, data, train)
  std::vector<std::string> sets;  // --set section.key=value (repeatable)
  bool resume = false;            // --resume
  bool quiet = false;             // --quiet
  int64_t stop_after = -1;        // --stop-after N (-1: train to train.steps)
};
void add_train_options(CLI::App* cmd, TrainArgs* args);
// Throws UserError for values the declarations let through (--stop-after below 1).
void check_train_args(const TrainArgs& args);
}  // namespace scaleinv
