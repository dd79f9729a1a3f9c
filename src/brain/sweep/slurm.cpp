// A Slurm cluster through its client programs (see slurm.h).
#include "brain/sweep/slurm.h"

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "brain/util/subprocess.h"

namespace scaleinv {

namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

SlurmClient::SlurmClient(double timeout_s) : timeout_s_(timeout_s) {}

void SlurmClient::check_reachable() const {
  for (const char* prog : {"sbatch", "squeue", "sinfo", "scancel"})
    if (!program_on_path(prog))
      throw UserError("command line", "--slurm", fmt::format("no scheduler reachable: `{}` is not on PATH", prog),
                      "run it on a Slurm login node (or load the cluster's slurm module); " +
                          input_name("without Slurm, shard by hand with scaleinv sweep --shard i/N"));
  // A SLURM_CONF naming no file: the clients would retry reading it for a minute before failing.
  if (const char* conf = std::getenv("SLURM_CONF"); conf && *conf && !std::filesystem::exists(conf))
    throw UserError("command line", "--slurm",
                    fmt::format("no scheduler reachable: SLURM_CONF names {}, which does not exist", conf),
                    "point SLURM_CONF at the cluster's slurm.conf, or unset it to use the default");
  const ProcessResult r = run_process({"sinfo", "-h", "-o", "%P"}, timeout_s_);
  if (!r.ok())
    throw UserError("command line", "--slurm",
                    fmt::format("no scheduler reachable: sinfo {}: {}",
                                r.timed_out ? fmt::format("had no answer within {:.0f} s", timeout_s_) : "failed",
                                r.first_line()),
                    "check that slurmctld runs and SLURM_CONF names its slurm.conf (scontrol ping says)");
}

std::vector<std::string> SlurmClient::partitions() const {
  const ProcessResult r = run_process({"sinfo", "-h", "-o", "%P"}, timeout_s_);
  std::vector<std::string> out;
  std::istringstream in(r.out);
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty()) continue;
    if (line.back() == '*') {
      line.pop_back();
      out.insert(out.begin(), line);
    } else {
      out.push_back(line);
    }
  }
  return out;
}

void SlurmClient::check_partition(const std::string& partition) const {
  if (partition.empty()) return;
  const std::vector<std::string> have = partitions();
  for (const std::string& p : have)
    if (p == partition) return;
  std::string list;
  for (const std::string& p : have) list += (list.empty() ? "" : ", ") + p;
  throw UserError("command line", "--partition",
                  fmt::format("the cluster has no partition \"{}\"", partition),
                  fmt::format("give one of: {} (sinfo lists them)", list.empty() ? "(none)" : list));
}

std::string SlurmClient::submit(const std::string& script, const std::vector<std::string>& args,
                                const std::vector<std::string>& script_args) const {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(script);
  argv.insert(argv.end(), script_args.begin(), script_args.end());
  const ProcessResult r = run_process(argv, timeout_s_);
  if (!r.ok())
    throw UserError("command line", "--slurm", fmt::format("sbatch refused the job: {}", r.first_line()),
                    input_name("fix the sbatch options given after --") + " (sbatch --help lists them)");
  std::string id = trim(r.out);
  if (const auto semi = id.find(';'); semi != std::string::npos) id = id.substr(0, semi);  // "id;cluster"
  return id;
}

std::map<int, std::string> SlurmClient::live_tasks(const std::string& job_id) const {
  // -r: one line per array task; %K: the task's index ("N/A" for a job that is no array); states
  // of jobs that ended are not listed by default.
  const ProcessResult r = run_process({"squeue", "-h", "-r", "-j", job_id, "-o", "%K %T"}, timeout_s_);
  std::map<int, std::string> out;
  if (!r.ok()) {
    // An id the controller has purged is "Invalid job id specified": the job has ended.
    if (r.started && !r.timed_out && r.err.find("Invalid job id") != std::string::npos) return out;
    throw std::runtime_error("squeue -j " + job_id + " failed: " + r.first_line());
  }
  std::istringstream in(r.out);
  std::string idx, state;
  while (in >> idx >> state) {
    int i = -1;
    try {
      i = std::stoi(idx);
    } catch (...) {
      i = -1;
    }
    out[i] = state;
  }
  return out;
}

void SlurmClient::cancel(const std::vector<std::string>& job_ids) const {
  if (job_ids.empty()) return;
  std::vector<std::string> argv = {"scancel"};
  argv.insert(argv.end(), job_ids.begin(), job_ids.end());
  (void)run_process(argv, timeout_s_);
}

std::string partition_in_args(const std::vector<std::string>& a) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].rfind("--partition=", 0) == 0) return a[i].substr(12);
    if ((a[i] == "--partition" || a[i] == "-p") && i + 1 < a.size()) return a[i + 1];
    if (a[i].size() > 2 && a[i].rfind("-p", 0) == 0 && a[i][2] != '-') return a[i].substr(2);
  }
  return "";
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace scaleinv
