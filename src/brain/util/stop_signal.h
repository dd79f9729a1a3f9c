#pragma once
// Ctrl-C (SIGINT) and SIGTERM as a request to stop at the next safe point (issue 38): a command
// that can stop cleanly (train: after the current step, with a checkpoint; sweep and search: once
// the chunks in flight are stored) installs the handlers, its work polls stop_requested(), and it
// ends with one line saying how to resume and exit code 128 + the signal's number (130 for SIGINT,
// 143 for SIGTERM, the shell's convention). A second signal ends the process at once, as the
// signal's default action would: what kill -9 guarantees (a resume loses nothing finished) holds.
#include <string>

namespace scaleinv {

// Installs the handlers for SIGINT and SIGTERM in this process (idempotent).
void install_stop_handlers();

// The first stop signal received since the handlers were installed (0: none).
int stop_requested();

// "SIGINT", "SIGTERM", else "signal N".
std::string stop_signal_name(int sig);

}  // namespace scaleinv
