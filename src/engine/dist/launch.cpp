// The local rank supervisor of `scaleinv launch` (see launch.h).
#include "engine/dist/launch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "brain/util/errors.h"
#include "engine/dist/dist.h"

extern char** environ;

namespace scaleinv {

namespace {

volatile sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

// A port nobody listens on right now (the kernel's pick for port 0).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  if (port == 0) throw UserError("command line", "--master-port", "cannot find a free port", "pass --master-port");
  return port;
}

// Forwards a child's output line by line with a prefix.
struct Stream {
  int fd = -1;
  FILE* to = nullptr;
  std::string prefix, pending;
  void feed(const char* data, size_t n) {
    pending.append(data, n);
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      std::fprintf(to, "%s%.*s\n", prefix.c_str(), static_cast<int>(nl), pending.data());
      pending.erase(0, nl + 1);
    }
    std::fflush(to);
  }
  void flush() {
    if (!pending.empty()) feed("\n", 1);
  }
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int code = 0;
};

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

// `exe --threads T COMMAND...`, what every rank runs.
std::vector<std::string> rank_argv(const std::string& exe, int threads, const std::vector<std::string>& command) {
  std::vector<std::string> argv_s{exe, "--threads", std::to_string(threads)};
  argv_s.insert(argv_s.end(), command.begin(), command.end());
  return argv_s;
}

// The null-terminated char* array over strings (which must outlive it), as execve takes.
std::vector<char*> c_array(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Our environment less the variables launch sets for each rank.
std::vector<std::string> inherited_env() {
  std::vector<std::string> base_env;
  const char* ours[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT="};
  for (char** e = environ; *e; ++e) {
    bool replaced = false;
    for (const char* k : ours) replaced = replaced || std::strncmp(*e, k, std::strlen(k)) == 0;
    if (!replaced) base_env.emplace_back(*e);
  }
  return base_env;
}

// Rank r's environment: the inherited one and the torchrun-style variables.
std::vector<std::string> rank_env(const std::vector<std::string>& base_env, int r, int nproc, int port) {
  std::vector<std::string> env_s = base_env;
  env_s.push_back(fmt::format("RANK={}", r));
  env_s.push_back(fmt::format("WORLD_SIZE={}", nproc));
  env_s.push_back(fmt::format("LOCAL_RANK={}", r));
  env_s.push_back(fmt::format("LOCAL_WORLD_SIZE={}", nproc));
  env_s.push_back(fmt::format("MASTER_ADDR={}", "127.0.0.1"));
  env_s.push_back(fmt::format("MASTER_PORT={}", port));
  return env_s;
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);  // Ctrl-C reaches the ranks too (same process group); we wait for them
}

// The ranks and their output, and the state of the shutdown: the first failure's code, the
// deadline of the current stage (grace, then SIGTERM's 5 s), and whether a rank was lost.
struct Supervisor {
  using Clock = std::chrono::steady_clock;
  std::vector<Rank> ranks;
  std::vector<Stream> streams;
  int first_failure = 0;
  int own_failure = 0;  // the first code of a rank that ended on its own error (not lost, not signalled)
  bool terminated = false, killed = false, forwarded = false, lost = false;
  Clock::time_point deadline{};

  explicit Supervisor(int nproc) : ranks(nproc) {}

  // Forks rank r and execs `exe argv` with envp in it; ranks 1..N-1 write into pipes read here.
  void spawn(int r, const std::string& exe, std::vector<char*>& argv, std::vector<char*>& envp) {
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (r > 0 && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0))
      throw std::runtime_error(fmt::format("launch: pipe: {}", std::strerror(errno)));
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(fmt::format("launch: fork: {}", std::strerror(errno)));
    if (pid == 0) {
      if (r > 0) {
        dup2(out[1], STDOUT_FILENO);
        dup2(err[1], STDERR_FILENO);
      }
      execve(exe.c_str(), argv.data(), envp.data());
      const char msg[] = "launch: cannot run this scaleinv binary (execve failed)\n";
      (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
      _exit(127);
    }
    ranks[r] = Rank{r, pid, true, 0};
    if (r > 0) {
      close(out[1]);
      close(err[1]);
      streams.push_back(Stream{out[0], stdout, fmt::format("[rank {}] ", r), ""});
      streams.push_back(Stream{err[0], stderr, fmt::format("[rank {}] ", r), ""});
    }
  }

  int running() const {
    int n = 0;
    for (auto& r : ranks) n += r.running;
    return n;
  }
  void signal_all(int sig) const {
    for (auto& r : ranks)
      if (r.running) kill(r.pid, sig);
  }
  int open_streams() const {
    int n = 0;
    for (auto& s : streams) n += s.fd >= 0;
    return n;
  }

  // Output of ranks 1..N-1: waits up to 50 ms, forwards what came, closes what ended.
  void pump_output() {
    std::vector<pollfd> fds;
    std::vector<Stream*> owners;
    for (auto& s : streams)
      if (s.fd >= 0) {
        fds.push_back(pollfd{s.fd, POLLIN, 0});
        owners.push_back(&s);
      }
    if (fds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } else if (poll(fds.data(), fds.size(), 50) > 0) {
      for (size_t i = 0; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[4096];
        const ssize_t n = read(fds[i].fd, buf, sizeof buf);
        if (n > 0) {
          owners[i]->feed(buf, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          owners[i]->flush();
          close(owners[i]->fd);
          owners[i]->fd = -1;
        }
      }
    }
  }

  // Exits: the first failure starts the grace period. A rank that stops on its own error (a
  // mistake in what it was given: 2) makes the others lose it (4), and which of them the launcher
  // reaps first is a race (the rank that failed still tears down its store while the others see
  // the connection go); so a rank's own error is kept apart and outranks a loss (exit_code).
  void reap_exits(double grace_s) {
    for (auto& r : ranks) {
      if (!r.running) continue;
      int status = 0;
      if (waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.running = false;
      r.code = exit_code_of(status);
      const bool rank_lost = (WIFSIGNALED(status) && !terminated) || r.code == RankLost::kExitCode;
      if (rank_lost) lost = true;
      if (!rank_lost && !WIFSIGNALED(status) && !terminated && r.code != 0 && own_failure == 0) own_failure = r.code;
      if (r.code != 0 && first_failure == 0 && !terminated) {
        first_failure = r.code;
        deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
        if (running() > 0)
          std::fprintf(stderr, "launch: rank %d %s; the other ranks get %.0f s to stop on their own\n", r.rank,
                       describe_exit(status).c_str(), grace_s);
      }
    }
  }

  // A stop signal for us: pass it on once.
  void forward_stop_signal() {
    if (g_stop_signal && !forwarded) {
      forwarded = true;
      signal_all(SIGTERM);
      if (first_failure == 0) first_failure = 128 + g_stop_signal;
      deadline = Clock::now() + std::chrono::seconds(5);
      terminated = true;
    }
  }

  // Past the grace period: SIGTERM, then 5 s later SIGKILL.
  void escalate() {
    if (first_failure != 0 && running() > 0 && Clock::now() > deadline) {
      if (!terminated) {
        std::fprintf(stderr, "launch: terminating the remaining ranks\n");
        signal_all(SIGTERM);
        terminated = true;
        deadline = Clock::now() + std::chrono::seconds(5);
      } else if (!killed) {
        signal_all(SIGKILL);
        killed = true;
      }
    }
  }

  // launch's exit code once every rank has ended (see launch.h).
  int exit_code() const {
    if (own_failure != 0 && !g_stop_signal) return own_failure;
    if (lost && !g_stop_signal) {
      std::fprintf(stderr, "launch: a rank was lost; exit code %d\n", RankLost::kExitCode);
      return RankLost::kExitCode;
    }
    return first_failure;
  }
};

}  // namespace

int launch_local_ranks(const LaunchOptions& o) {
  const int nproc = o.nproc();
  int port = o.port();
  const double grace_s = o.grace_s();
  const int threads = o.threads();
  const std::vector<std::string>& command = o.command();
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  if (port <= 0) port = free_port();
  std::fprintf(stderr, "launch: %d ranks on 127.0.0.1:%d, %d core%s each: %s\n", nproc, port, threads,
               threads == 1 ? "" : "s", fmt::format("{}", fmt::join(command, " ")).c_str());

  // argv and environment of every rank, built before fork (the child only execs).
  std::vector<std::string> argv_s = rank_argv(exe, threads, command);
  std::vector<char*> argv = c_array(argv_s);
  const std::vector<std::string> base_env = inherited_env();
  install_stop_handlers();

  Supervisor sv(nproc);
  for (int r = 0; r < nproc; ++r) {
    std::vector<std::string> env_s = rank_env(base_env, r, nproc, port);
    std::vector<char*> envp = c_array(env_s);
    sv.spawn(r, exe, argv, envp);
  }
  while (sv.running() > 0 || sv.open_streams() > 0) {
    sv.pump_output();
    sv.reap_exits(grace_s);
    sv.forward_stop_signal();
    sv.escalate();
  }
  return sv.exit_code();
}


}  // namespace scaleinv
