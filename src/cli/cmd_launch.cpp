// `scaleinv launch --nproc N [--master-port P] [--grace S] -- train ...`: the command line of
// engine/dist/launch.h's supervisor (what the ranks get, how failures end, the exit codes: see there).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "brain/util/errors.h"
#include "engine/dist/launch.h"
#include "brain/train/config.h"

namespace scaleinv {

void add_launch_command(CLI::App& app, int& exit_code) {
  struct Opts {
    int nproc = 1;
    int port = 0;
    double grace = 5;
    std::vector<std::string> command;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "launch", "Run a command as N local data-parallel ranks (like torchrun): scaleinv launch --nproc 2 -- train ...");
  cmd->add_option("--nproc", o->nproc, "number of ranks (processes) on this machine")
      ->required()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--master-port", o->port, "rendezvous port on 127.0.0.1 (default: a free one)")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--grace", o->grace, "seconds the other ranks get to stop on their own after one fails")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("command", o->command, "the scaleinv command every rank runs, after --: -- train --config ...")
      ->required();
  cmd->callback([cmd, o, &exit_code] {
    if (!std::isfinite(o->grace))  // (CLI::Range lets NaN through)
      throw UserError("command line", "--grace", "is not a number", "give seconds from 0 to 3600, e.g. --grace 5");
    // The ranks share the cores: cores/N each (--threads), unless --threads was given.
    int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / o->nproc);
    if (const CLI::Option* t = cmd->get_parent()->get_option_no_throw("--threads"); t && t->count() > 0)
      threads = t->as<int>();
    if (o->command.front() != "train")
      throw UserError("command line", "launch", fmt::format("'{}' is not a data-parallel command", o->command.front()),
                      "launch runs `train`: scaleinv launch --nproc 2 -- train --config FILE.toml");
    // The train command line is read once here, before any rank starts, with train's own
    // declarations: a mistake in it (an unknown flag, a bad value, the config) is one line, not one
    // per rank with the launcher's own lines around them. The ranks read it again.
    CLI::App train_cmd("train", "train");
    TrainArgs args;
    add_train_options(&train_cmd, &args);
    try {
      train_cmd.parse(std::vector<std::string>(o->command.rbegin(), o->command.rend() - 1));  // (CLI11: reversed)
    } catch (const CLI::CallForHelp&) {
      throw UserError("command line", "train", "--help after -- would print the same help once per rank",
                      "run scaleinv train --help");
    } catch (const CLI::ParseError& e) {
      throw UserError("command line", "train", fmt::format("after --: {}", e.what()),
                      "see scaleinv train --help for the options every rank gets");
    }
    check_train_args(args);
    (void)load_train_config(args.config, args.sets);
    exit_code = launch_local_ranks(
        LaunchOptions().nproc(o->nproc).port(o->port).grace_s(o->grace).threads(threads).command(o->command));
  });
}

}  // namespace scaleinv
