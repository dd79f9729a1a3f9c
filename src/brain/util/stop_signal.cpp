// Stop requests from SIGINT and SIGTERM (see stop_signal.h).
#include "brain/util/stop_signal.h"

#include <signal.h>

#include <fmt/format.h>

namespace scaleinv {

namespace {

volatile sig_atomic_t g_stop = 0;

void on_stop(int sig) {
  if (g_stop != 0) {  // the second: the default action, now
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_stop = sig;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read or write in progress goes on; the work polls the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_requested() { return static_cast<int>(g_stop); }

std::string stop_signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return fmt::format("signal {}", sig);
}

}  // namespace scaleinv
