// Data-parallel training on c10d (see dist.h): TCPStore rendezvous, ProcessGroupGloo collectives
// (and ProcessGroupNCCL for the gradients, one GPU per rank), bucketed gradient all-reduce launched
// from backward hooks, and lost-rank diagnosis.
#include "engine/dist/dist.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "brain/util/errors.h"
#include "brain/util/stable_hash.h"
#include "engine/runtime/torch_compat.h"
#include "engine/dist/c10d_compat.h"

namespace scaleinv {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const char* kEnvWhere = "environment";

// ---- environment ------------------------------------------------------------------------------

bool env_int(const char* name, int lo, int hi, int* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi)
    throw UserError(kEnvWhere, name, fmt::format("must be an integer in [{}, {}], got '{}'", lo, hi, v),
                    "docs/distributed.md lists the variables every process needs");
  *out = static_cast<int>(x);
  return true;
}

// ---- messages ---------------------------------------------------------------------------------

// One line out of a c10d / Gloo exception: no backtrace, no source location prefix.
std::string one_line(std::exception_ptr ep) {
  std::string s;
  try {
    std::rethrow_exception(ep);
  } catch (const c10::Error& e) {
    s = e.what_without_backtrace();
  } catch (const std::exception& e) {
    s = e.what();
  } catch (...) {
    s = "unknown error";
  }
  if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  while (!s.empty() && s.front() == '[') {  // "[../gloo/transport/tcp/pair.cc:598] Connection closed"
    auto close = s.find("] ");
    if (close == std::string::npos) break;
    s = s.substr(close + 2);
  }
  return s;
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

// The first differing field of two configs, as "optim.lr: 0.02 here, 0.01 on rank 0".
std::string first_difference(const nlohmann::json& mine, const nlohmann::json& root) {
  nlohmann::json patch = nlohmann::json::diff(root, mine);
  if (patch.empty()) return "";
  const auto& op = patch.front();
  std::string path = op.value("path", "");
  nlohmann::json::json_pointer ptr(path);
  std::string field = path.empty() ? "(root)" : path.substr(1);
  for (auto& c : field)
    if (c == '/') c = '.';
  auto at = [&](const nlohmann::json& j) { return j.contains(ptr) ? j.at(ptr).dump() : std::string("(absent)"); };
  return fmt::format("{} = {} vs {} on rank 0", field, at(mine), at(root));
}

// The local address this machine uses to reach `host` (no packet is sent: a UDP connect only
// picks the route). Gloo binds there, so peers on other machines can reach it even when the
// hostname resolves to 127.0.1.1, as it does on a stock Debian install.
std::string route_local_address(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return "";
  std::string out;
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    char buf[INET_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf))
      out = buf;
  }
  if (fd >= 0) ::close(fd);
  freeaddrinfo(res);
  return out;
}

BucketSettings bucket_settings_from_env() {
  BucketSettings b;
  double mb = 25;
  int overlap = 1;
  if (const char* v = std::getenv("SCALEINV_DIST_BUCKET_MB"); v && *v) {
    char* end = nullptr;
    mb = std::strtod(v, &end);
    if (*end != '\0' || !(mb > 0))
      throw UserError(kEnvWhere, "SCALEINV_DIST_BUCKET_MB", fmt::format("must be a positive number, got '{}'", v),
                      "e.g. SCALEINV_DIST_BUCKET_MB=25");
  }
  env_int("SCALEINV_DIST_OVERLAP", 0, 1, &overlap);
  b.bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(mb * 1048576.0));
  b.overlap = overlap != 0;
  return b;
}

}  // namespace

DistEnv dist_env_from_environment() {
  DistEnv e;
  const bool has_world = env_int("WORLD_SIZE", 1, 1 << 20, &e.world);
  const bool has_rank = env_int("RANK", 0, (1 << 20) - 1, &e.rank);
  e.launched = has_world && has_rank;
  if (e.world > 1 && !has_rank)
    throw UserError(kEnvWhere, "RANK", fmt::format("WORLD_SIZE is {} but RANK is not set", e.world),
                    fmt::format("set RANK (0..{}) for every process, or start them with `scaleinv launch`",
                                e.world - 1));
  if (e.rank >= e.world)
    throw UserError(kEnvWhere, "RANK", fmt::format("RANK {} is not below WORLD_SIZE {}", e.rank, e.world),
                    "ranks are numbered 0..WORLD_SIZE-1");
  env_int("LOCAL_RANK", 0, (1 << 20) - 1, &e.local_rank);
  env_int("LOCAL_WORLD_SIZE", 1, 1 << 20, &e.local_world);
  env_int("MASTER_PORT", 1, 65535, &e.master_port);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
  return e;
}

// ---- the group --------------------------------------------------------------------------------

struct DataParallel::Impl {
  DistEnv env;
  milliseconds timeout{60000};
  milliseconds grace{1000};  // how long a failure waits for the other ranks to answer
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::Collectives> pg;       // Gloo: start-up checks, the loss, files
  c10::intrusive_ptr<compat::Collectives> grad_pg;  // the gradients: pg, or a NCCL group
  bool nccl = false;                                 // grad_pg is a NCCL group
  torch::Device bucket_device = torch::kCPU;        // where the buckets live (the GPU under NCCL)
  bool failed = false;
  BucketSettings settings;

  // Gradient buckets. Parameters are laid out in reverse order (backward produces the last
  // layers' gradients first), each bucket one flat CPU buffer of one dtype.
  struct Slot {
    torch::Tensor param;
    int bucket = 0;
    int64_t offset = 0, numel = 0;
    bool ready = false;  // its gradient of this backward is in the bucket
    unsigned hook = 0;
  };
  struct Bucket {
    torch::Tensor flat;
    std::vector<int> slots;
    int pending = 0;
    bool launched = false;
    bool from_hook = false;
    c10::intrusive_ptr<c10d::Work> work;
  };
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  int next_launch = 0;
  std::mutex mu;  // hooks may run on autograd's device threads

  // -- collectives with failure handling --

  // Waits for `work`; any error or a stall longer than the timeout becomes RankLost.
  // Gloo's wait(timeout) counts its timeout from the call, so it is waited on in 100 ms slices.
  // NCCL's (`from_nccl`) counts from the collective's launch and, when that runs out, aborts the
  // communicator and throws: a bucket launched early in backward would end the run. A NCCL work is
  // therefore polled (isCompleted: an event query) and, once complete, waited on without a timeout,
  // which only orders the current stream after it.
  void wait(c10::intrusive_ptr<c10d::Work>& work, const char* during, bool from_nccl = false) {
    const auto t0 = Clock::now();
    for (;;) {
      bool done = false;
      if (from_nccl) {
        for (auto slice = Clock::now(); !done && Clock::now() - slice < milliseconds(100);) {
          try {
            done = work->isCompleted();
          } catch (...) {
            fail(during, one_line(std::current_exception()));
          }
          if (!done) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      } else {
        try {
          done = work->wait(milliseconds(100));
        } catch (...) {
          // Either the collective failed, or only this poll interval ran out ("Operation timed
          // out!"), possibly just before the collective completed: ask the work itself.
        }
      }
      if (done || work->isCompleted()) {
        if (work->exception()) fail(during, one_line(work->exception()));
        if (from_nccl) {
          try {
            work->wait();
          } catch (...) {
            fail(during, one_line(std::current_exception()));
          }
        }
        return;
      }
      // Not done yet: has another rank reported a failure, or has this one stalled too long?
      bool abort = false;
      try {
        abort = store->check({"scaleinv/abort"});
      } catch (...) {
        fail(during, "rank 0's rendezvous store stopped answering");
      }
      if (abort) fail(during, "another rank reported a failure");
      if (Clock::now() - t0 > timeout)
        fail(during, fmt::format("no progress for {} s (train.dist_timeout_s)", timeout.count() / 1000.0));
    }
  }

  // Tells the others, finds out who is gone, throws one line naming them.
  [[noreturn]] void fail(const std::string& during, const std::string& cause) {
    failed = true;
    try {
      store->add("scaleinv/abort", 1);
    } catch (...) {
    }
    std::string how;
    std::vector<int> lost = lost_ranks(&how);
    std::string msg;
    if (lost.empty())
      msg = fmt::format("rank {}: {} failed ({}), though every rank answered afterwards", env.rank, during, cause);
    else
      msg = fmt::format("rank {}: lost {} ({}); {} failed: {}", env.rank, rank_list(lost), how, during, cause);
    msg += fmt::format(" (fix: look at {}'s own output for why it stopped; `scaleinv train --resume` continues from "
                       "the last checkpoint with any number of ranks)",
                       lost.empty() ? std::string("each rank") : rank_list(lost));
    throw RankLost(msg, lost);
  }

  // Every surviving rank checks in under scaleinv/alive/<rank>; rank 0 (which hosts the store)
  // waits `grace` for them, publishes the ranks that stayed silent and waits for the survivors
  // to read it before it lets its store go. A rank that cannot reach the store has lost rank 0.
  std::vector<int> lost_ranks(std::string* how) {
    const std::string silent = fmt::format("no answer within {:.1f} s", grace.count() / 1000.0);
    const std::string no_store =
        fmt::format("its rendezvous store at {}:{} is unreachable", env.master_addr, env.master_port);
    try {
      store->setTimeout(grace + milliseconds(2000));
      store->set(fmt::format("scaleinv/alive/{}", env.rank), std::vector<uint8_t>{'1'});
    } catch (...) {
      *how = no_store;
      return {0};
    }
    if (env.rank != 0) {
      try {
        store->wait({"scaleinv/verdict"}, 2 * grace + milliseconds(2000));
        auto v = store->get("scaleinv/verdict");
        store->set(fmt::format("scaleinv/ack/{}", env.rank), std::vector<uint8_t>{'1'});
        std::vector<int> lost;
        for (auto j : nlohmann::json::parse(std::string(v.begin(), v.end()))) lost.push_back(j.get<int>());
        *how = silent;
        return lost;
      } catch (...) {
        *how = no_store;
        return {0};
      }
    }
    auto answered = [&](const char* what) {
      std::vector<int> missing;
      for (int r = 1; r < env.world; ++r)
        if (!store->check({fmt::format("scaleinv/{}/{}", what, r)})) missing.push_back(r);
      return missing;
    };
    std::vector<int> lost;
    for (const auto deadline = Clock::now() + grace; Clock::now() < deadline;) {
      if ((lost = answered("alive")).empty()) break;
      std::this_thread::sleep_for(milliseconds(20));
    }
    store->set("scaleinv/verdict", [&] {
      std::string s = nlohmann::json(lost).dump();
      return std::vector<uint8_t>(s.begin(), s.end());
    }());
    const std::unordered_set<int> gone(lost.begin(), lost.end());
    for (const auto deadline = Clock::now() + grace; Clock::now() < deadline;) {
      bool all = true;
      for (int r : answered("ack")) all = all && gone.count(r);
      if (all) break;
      std::this_thread::sleep_for(milliseconds(20));
    }
    *how = silent;
    return lost;
  }

  void run(c10::intrusive_ptr<c10d::Work> work, const char* during, bool from_nccl = false) {
    wait(work, during, from_nccl);
  }

  // -- buckets --

  void build_buckets(const std::vector<torch::Tensor>& params) {
    std::unordered_set<const void*> seen;
    std::vector<torch::Tensor> order;
    for (auto it = params.rbegin(); it != params.rend(); ++it)
      if (it->requires_grad() && seen.insert(it->unsafeGetTensorImpl()).second) order.push_back(*it);
    // As in torch's DDP, the first bucket (the last layers, whose gradients come first) is kept
    // to 1 MB so that communication starts early in backward; the others hold bucket_bytes.
    const int64_t first_cap = std::min<int64_t>(settings.bucket_bytes, 1 << 20);
    int64_t fill = 0;
    for (const auto& p : order) {
      const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
      const int64_t cap = buckets.size() == 1 ? first_cap : settings.bucket_bytes;
      if (buckets.empty() || buckets.back().flat.scalar_type() != p.scalar_type() ||
          (fill > 0 && fill + bytes > cap)) {
        buckets.emplace_back();
        buckets.back().flat = torch::empty({0}, torch::TensorOptions().dtype(p.scalar_type()).device(bucket_device));
        fill = 0;
      }
      Bucket& b = buckets.back();
      Slot s;
      s.param = p;
      s.bucket = static_cast<int>(buckets.size()) - 1;
      s.offset = b.flat.numel();
      s.numel = p.numel();
      b.flat = torch::empty({s.offset + s.numel}, b.flat.options());
      b.slots.push_back(static_cast<int>(slots.size()));
      slots.push_back(s);
      fill += bytes;
    }
    reset_buckets();
  }

  void reset_buckets() {
    for (auto& b : buckets) {
      b.pending = static_cast<int>(b.slots.size());
      b.launched = false;
      b.from_hook = false;
      b.work.reset();
    }
    for (auto& s : slots) s.ready = false;
    next_launch = 0;
  }

  // Broadcasts rank 0's parameters, bucket by bucket.
  void broadcast_parameters() {
    torch::NoGradGuard ng;
    for (auto& b : buckets) {
      for (int i : b.slots) b.flat.narrow(0, slots[i].offset, slots[i].numel).copy_(slots[i].param.reshape(-1));
      std::vector<at::Tensor> t{b.flat};
      c10d::BroadcastOptions o;
      o.rootRank = 0;
      run(grad_pg->broadcast(t, o), "the start-up broadcast of rank 0's parameters", nccl);
      if (env.rank == 0) continue;
      for (int i : b.slots) slots[i].param.copy_(b.flat.narrow(0, slots[i].offset, slots[i].numel).view_as(slots[i].param));
    }
  }

  // A parameter's gradient arrived (tensor hook, before autograd stores it in .grad).
  void on_grad(int i, const torch::Tensor& g) {
    std::lock_guard<std::mutex> lk(mu);
    Slot& s = slots[i];
    Bucket& b = buckets[s.bucket];
    TORCH_CHECK(!b.launched, "scaleinv dist: a gradient arrived after its bucket was all-reduced");
    auto dst = b.flat.narrow(0, s.offset, s.numel);
    if (s.ready) {
      dst.add_(g.reshape(-1).to(dst.device()));  // a second contribution (host bucket, CUDA gradient: Gloo)
      return;
    }
    dst.copy_(g.reshape(-1));
    s.ready = true;
    if (--b.pending == 0 && settings.overlap) launch_ready(/*from_hook=*/true);
  }

  // Launches the complete buckets in index order (the same order on every rank).
  void launch_ready(bool from_hook) {
    while (next_launch < static_cast<int>(buckets.size()) && buckets[next_launch].pending == 0) {
      Bucket& b = buckets[next_launch++];
      std::vector<at::Tensor> t{b.flat};
      b.work = grad_pg->allreduce(t);  // SUM
      b.launched = true;
      b.from_hook = from_hook;
    }
  }
};

// ---- DataParallel -----------------------------------------------------------------------------

DataParallel::DataParallel(const DistEnv& env, double timeout_s) : env_(env) {
  if (!active()) return;
  if (!(timeout_s > 0))
    throw UserError("config", "train.dist_timeout_s", "must be positive", "e.g. dist_timeout_s = 60");
  ::signal(SIGPIPE, SIG_IGN);  // a peer that dies must not take this process with it mid-write
  impl_ = std::make_shared<Impl>();
  Impl& m = *impl_;
  m.env = env;
  m.timeout = milliseconds(static_cast<int64_t>(timeout_s * 1000));
  m.grace = std::clamp(m.timeout / 4, milliseconds(500), milliseconds(5000));
  m.settings = bucket_settings_from_env();

  // Rendezvous: rank 0 serves the TCPStore, everyone checks in and waits for the others.
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(env.master_port);
  so.isServer = env.rank == 0;
  so.numWorkers = static_cast<size_t>(env.world);
  so.waitWorkers = false;
  so.timeout = m.timeout;
  const std::string where = fmt::format("{}:{}", env.master_addr, env.master_port);
  try {
    m.store = compat::make_tcp_store(env.master_addr, so);
  } catch (...) {
    const std::string why = one_line(std::current_exception());
    if (env.rank == 0)
      throw UserError(kEnvWhere, "MASTER_PORT", fmt::format("rank 0 cannot serve the rendezvous store at {}: {}", where, why),
                      "choose a free MASTER_PORT (`scaleinv launch` picks one unless --master-port is given)");
    throw RankLost(fmt::format("rank {}: cannot reach rank 0's rendezvous store at {} within {} s: {} (fix: start "
                               "rank 0, and check MASTER_ADDR, MASTER_PORT and the firewall)",
                               env.rank, where, timeout_s, why),
                   {0});
  }
  std::vector<std::string> keys;
  for (int r = 0; r < env.world; ++r) keys.push_back(fmt::format("scaleinv/join/{}", r));
  try {
    m.store->set(keys[env.rank], std::vector<uint8_t>{'1'});
    m.store->wait(keys, m.timeout);
  } catch (...) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < env.world; ++r)
        if (!m.store->check({keys[r]})) missing.push_back(r);
    } catch (...) {
      missing = {0};
    }
    m.failed = true;
    throw RankLost(fmt::format("rank {}: {} did not join within {} s (store {}) (fix: start every rank with the same "
                               "WORLD_SIZE, MASTER_ADDR and MASTER_PORT; raise train.dist_timeout_s if they start "
                               "slowly)",
                               env.rank, rank_list(missing), timeout_s, where),
                   missing);
  }

  // The Gloo group, bound to the interface that routes to rank 0 (or GLOO_SOCKET_IFNAME).
  auto opts = c10d::ProcessGroupGloo::Options::create(m.timeout);
  try {
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else {
      const std::string local = route_local_address(env.master_addr, env.master_port);
      opts->devices.push_back(local.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                            : c10d::ProcessGroupGloo::createDeviceForHostname(local));
    }
    m.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("gloo", m.store),
                                                       env.rank, env.world, opts);
  } catch (...) {
    m.failed = true;
    throw RankLost(fmt::format("rank {}: the Gloo group did not connect: {} (fix: check that every machine can reach "
                               "the others on any port; set GLOO_SOCKET_IFNAME to pick the network interface)",
                               env.rank, one_line(std::current_exception())),
                   {});
  }
}

DataParallel::~DataParallel() {
  if (impl_ && !impl_->failed && std::getenv("SCALEINV_DIST_VERBOSE")) {
    std::vector<std::string> sizes;
    for (const auto& b : impl_->buckets) sizes.push_back(fmt::format("{:.2f}", b.flat.nbytes() / 1048576.0));
    std::fprintf(stderr,
                 "rank %d: %zu gradient buckets on %s (MB: %s); all-reduces launched from backward hooks: %lld, after "
                 "backward: %lld; %.3f s waiting for gradients after backward\n",
                 rank(), impl_->buckets.size(), gradient_group_.c_str(), fmt::format("{}", fmt::join(sizes, " ")).c_str(),
                 static_cast<long long>(overlapped_), static_cast<long long>(not_overlapped_), wait_s_);
  }
  for (const auto& f : temp_files_) {
    std::error_code ec;
    std::filesystem::remove(f, ec);
  }
  if (!impl_) return;
  for (auto& s : impl_->slots) {
    try {
      s.param.remove_hook(s.hook);
    } catch (...) {
    }
  }
  if (impl_->failed) {
    // After a failure Gloo's worker threads may still be blocked on a dead peer, and the group's
    // destructor would join them: let the process exit without waiting for that. A NCCL group's
    // communicators are aborted first (its kernels may be waiting on the dead peer).
    if (impl_->nccl) compat::abort_if_nccl(impl_->grad_pg);
    (void)impl_->pg.release();
    (void)impl_->grad_pg.release();
    (void)impl_->store.release();
  } else if (impl_->nccl) {
    compat::shutdown_if_nccl(impl_->grad_pg);  // what its destructor would do, without the warning
  }
}

int DataParallel::num_buckets() const { return impl_ ? static_cast<int>(impl_->buckets.size()) : 0; }

void DataParallel::check_same_run(const nlohmann::json& identity, const std::string& table_fingerprint) {
  if (!active()) return;
  Impl& m = *impl_;
  const std::string text = identity.dump();
  m.store->set(fmt::format("scaleinv/identity/{}", rank()), std::vector<uint8_t>(text.begin(), text.end()));
  auto as_i64 = [](const std::string& hex) { return static_cast<int64_t>(std::stoull(hex, nullptr, 16)); };
  torch::Tensor mine = torch::tensor({as_i64(stable_hash(text)), as_i64(stable_hash(table_fingerprint))});
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < world(); ++r) out[0].push_back(torch::empty_like(mine));
  std::vector<at::Tensor> in{mine};
  m.run(m.pg->allgather(out, in), "the start-up check that every rank trains the same run");
  std::vector<int> differ;
  bool table_differs = false;
  for (int r = 1; r < world(); ++r)
    if (!torch::equal(out[0][r], out[0][0])) {
      differ.push_back(r);
      table_differs = table_differs || out[0][r][1].item<int64_t>() != out[0][0][1].item<int64_t>();
    }
  if (differ.empty()) return;
  // Name the first differing field (of the first differing rank) before anyone leaves.
  auto read = [&](int r) {
    auto v = m.store->get(fmt::format("scaleinv/identity/{}", r));
    return nlohmann::json::parse(std::string(v.begin(), v.end()));
  };
  const std::string diff = first_difference(read(differ.front()), read(0));
  m.run(m.pg->barrier(), "the start-up check that every rank trains the same run");
  throw UserError(
      "data-parallel start-up", table_differs ? "param" : "config",
      fmt::format("{} {} a different run than rank 0 (this is rank {}; first difference, on rank {}: {}); every rank "
                  "must build the same model from the same config, parameterization table and base shapes",
                  rank_list(differ), differ.size() == 1 ? "trains" : "train", rank(), differ.front(), diff),
      "start every rank with the same --config, --set options and param file");
}

std::string DataParallel::fetch_from_root(const std::string& path) {
  if (!active()) return std::filesystem::exists(path) ? path : "";
  Impl& m = *impl_;
  torch::Tensor size = torch::tensor({int64_t{-1}});
  if (is_root() && std::filesystem::exists(path)) size.fill_(static_cast<int64_t>(std::filesystem::file_size(path)));
  c10d::BroadcastOptions o;
  o.rootRank = 0;
  std::vector<at::Tensor> t{size};
  m.run(m.pg->broadcast(t, o), "sending rank 0's checkpoint");
  const int64_t n = size[0].item<int64_t>();
  if (n < 0) return "";
  torch::Tensor bytes = torch::empty({n}, torch::kUInt8);
  if (is_root()) {
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(bytes.data_ptr<uint8_t>()), n);
    if (in.gcount() != n) throw UserError(path, "", "cannot read the checkpoint", "check the file");
  }
  t = {bytes};
  m.run(m.pg->broadcast(t, o), "sending rank 0's checkpoint");
  if (is_root()) return path;
  const std::string copy = (std::filesystem::temp_directory_path() /
                            fmt::format("scaleinv-rank{}-{}-{}", rank(), ::getpid(),
                                        std::filesystem::path(path).filename().string()))
                               .string();
  std::ofstream(copy, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), n);
  temp_files_.push_back(copy);
  return copy;
}

std::string gradient_backend(bool cuda_params, bool nccl_built, int sharing, const std::string& requested,
                             std::string* why_not_nccl) {
  if (requested != "" && requested != "auto" && requested != "nccl" && requested != "gloo")
    throw UserError(kEnvWhere, "SCALEINV_DIST_BACKEND", fmt::format("unknown backend '{}'", requested),
                    "use auto (the default), nccl or gloo");
  std::string why;
  if (requested == "gloo")
    why = "SCALEINV_DIST_BACKEND=gloo";
  else if (!cuda_params)
    why = "the parameters are not on CUDA";
  else if (!nccl_built)
    why = "this libtorch has no NCCL";
  else if (sharing > 1)
    why = fmt::format("{} ranks share this rank's GPU", sharing);
  if (why_not_nccl) *why_not_nccl = why;
  return why.empty() ? "nccl" : "gloo";
}

int ranks_sharing(const std::vector<std::string>& ids, int rank) {
  const std::string& mine = ids.at(static_cast<size_t>(rank));
  if (mine.empty()) return 1;
  return static_cast<int>(std::count(ids.begin(), ids.end(), mine));
}

void DataParallel::replicate(const std::vector<torch::Tensor>& params) {
  if (!active()) return;
  Impl& m = *impl_;
  // The gradients' group: every rank's choice, then NCCL only if all chose it (MIN over ranks).
  torch::Device gpu = torch::kCPU;  // the parameters' GPU, where they are on one
  for (const auto& p : params)
    if (p.is_cuda()) gpu = p.device();
  const char* req = std::getenv("SCALEINV_DIST_BACKEND");
  const std::string requested = req ? req : "";
  // Every rank's GPU identity, through the store (get waits for each key up to the store's timeout).
  const std::string uuid = compat::cuda_device_uuid(gpu);
  m.store->set(fmt::format("scaleinv/gpu/{}", rank()), std::vector<uint8_t>(uuid.begin(), uuid.end()));
  std::vector<std::string> ids;
  for (int r = 0; r < world(); ++r) {
    std::vector<uint8_t> v;
    try {
      v = m.store->get(fmt::format("scaleinv/gpu/{}", r));
    } catch (...) {
      m.fail("the start-up exchange of GPU identities", one_line(std::current_exception()));
    }
    ids.emplace_back(v.begin(), v.end());
  }
  std::string why;
  const bool mine = gradient_backend(gpu.is_cuda(), compat::has_nccl(), ranks_sharing(ids, rank()), requested, &why) == "nccl";
  torch::Tensor all = torch::tensor({int64_t{mine ? 1 : 0}});
  std::vector<at::Tensor> v{all};
  c10d::AllreduceOptions mo;
  mo.reduceOp = c10d::ReduceOp::MIN;
  m.run(m.pg->allreduce(v, mo), "agreeing on the gradients' group");
  const bool nccl = all.item<int64_t>() == 1;
  if (requested == "nccl" && !nccl)
    throw UserError(kEnvWhere, "SCALEINV_DIST_BACKEND",
                    fmt::format("nccl requested, but not every rank can take it{}", mine ? "" : " (this rank: " + why + ")"),
                    "give each rank a GPU of its own on a CUDA build, or unset it (auto)");
  gradient_group_ = nccl ? "nccl" : "gloo";
  m.grad_pg = m.pg;
  if (nccl) {
    m.bucket_device = gpu;
    try {
      m.grad_pg = compat::make_nccl_group(c10::make_intrusive<c10d::PrefixStore>("nccl", m.store), rank(), world(),
                                          m.timeout, m.bucket_device);
      m.nccl = true;
    } catch (...) {
      m.failed = true;
      throw RankLost(fmt::format("rank {}: the NCCL group did not start: {} (fix: SCALEINV_DIST_BACKEND=gloo trains "
                                 "through Gloo instead)",
                                 rank(), one_line(std::current_exception())),
                     {});
    }
  }
  m.build_buckets(params);
  m.broadcast_parameters();
  std::weak_ptr<Impl> weak = impl_;
  for (int i = 0; i < static_cast<int>(m.slots.size()); ++i)
    m.slots[i].hook = m.slots[i].param.register_hook([weak, i](const torch::Tensor& g) {
      if (auto s = weak.lock()) s->on_grad(i, g);
    });
}

void DataParallel::average_gradients() {
  if (!active()) return;
  Impl& m = *impl_;
  const auto t0 = Clock::now();
  {
    std::lock_guard<std::mutex> lk(m.mu);
    // Buckets whose parameters got no gradient this step (unused ones) still take part, as zeros.
    for (auto& b : m.buckets)
      for (int i : b.slots)
        if (!m.slots[i].ready) {
          b.flat.narrow(0, m.slots[i].offset, m.slots[i].numel).zero_();
          --b.pending;
        }
    m.launch_ready(/*from_hook=*/false);
  }
  torch::NoGradGuard ng;
  for (auto& b : m.buckets) {
    m.wait(b.work, "the gradient all-reduce", m.nccl);
    (b.from_hook ? overlapped_ : not_overlapped_) += 1;
    b.flat.div_(static_cast<double>(world()));
    for (int i : b.slots) {
      Impl::Slot& s = m.slots[i];
      torch::Tensor& g = s.param.mutable_grad();
      if (!s.ready || !g.defined()) continue;  // unused here (and, the model being the same, everywhere)
      g.copy_(b.flat.narrow(0, s.offset, s.numel).view_as(g));
    }
  }
  m.reset_buckets();
  wait_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

double DataParallel::mean(double x) { return mean(std::vector<double>{x}).front(); }

std::vector<double> DataParallel::mean(const std::vector<double>& xs) {
  if (!active() || xs.empty()) return xs;
  Impl& m = *impl_;
  torch::Tensor t = torch::tensor(xs, torch::kDouble);
  std::vector<at::Tensor> v{t};
  m.run(m.pg->allreduce(v), "averaging the loss over ranks");
  std::vector<double> out(xs.size());
  const double* sum = t.data_ptr<double>();
  for (size_t i = 0; i < xs.size(); ++i) out[i] = sum[i] / static_cast<double>(world());
  return out;
}

}  // namespace scaleinv
