#pragma once
// Running another program and reading what it printed (issue 61: Slurm's sbatch, squeue, sinfo and
// scontrol), without a shell: the arguments go to the program as they are, so a path with spaces or
// quotes needs no escaping. Torch-free.
#include <map>
#include <string>
#include <vector>

namespace scaleinv {

struct ProcessResult {
  bool started = false;    // false: the program was not found on PATH (or could not be executed)
  bool timed_out = false;  // it ran past the limit and was killed (SIGKILL)
  int exit_code = -1;      // its exit status; 128 + N when it ended by signal N; -1 when not started
  std::string out, err;    // everything it wrote to stdout and stderr
  bool ok() const { return started && !timed_out && exit_code == 0; }
  // The first non-empty line of err (else of out), for a one-line message.
  std::string first_line() const;
};

// Runs argv[0] (looked up on PATH) with argv[1..], stdin from /dev/null, and waits at most
// `timeout_s` seconds (<= 0: no limit). `env` entries are set on top of this process's
// environment. Never throws for the program's own failure; std::runtime_error when the pipes or
// the spawn itself fail for lack of resources.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s,
                          const std::map<std::string, std::string>& env = {});

// Whether `program` is an executable file on PATH (or a path to one).
bool program_on_path(const std::string& program);

}  // namespace scaleinv
