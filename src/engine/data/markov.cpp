// A random first-order Markov chain over `vocab` tokens: transition logits ~ N(0, 1) / temperature
// drawn from the data seed, rows softmaxed; markov_length tokens generated per split; batches are
// windows as for text. The best possible loss is the chain's entropy rate (entropy_rate()).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "engine/data/data_detail.h"

namespace scaleinv::data_detail {
namespace {

constexpr int kMaxVocab = kMaxMarkovVocab;

std::vector<int32_t> generate(const std::vector<double>& cdf, const std::vector<double>& pi_cdf, int V, int64_t n,
                              uint64_t key) {
  Rng rng(key);
  auto draw = [&](const double* row) {
    const double u = rng.uniform();
    const int64_t j = std::upper_bound(row, row + V, u) - row;
    return static_cast<int32_t>(std::min<int64_t>(j, V - 1));
  };
  std::vector<int32_t> seq(static_cast<size_t>(n));
  int32_t cur = draw(pi_cdf.data());  // start in the stationary distribution
  for (int64_t i = 0; i < n; ++i) {
    seq[static_cast<size_t>(i)] = cur;
    cur = draw(cdf.data() + static_cast<size_t>(cur) * V);
  }
  return seq;
}

}  // namespace

std::unique_ptr<DataSource> make_markov(const DataConfig& cfg) {
  const int V = cfg.vocab;
  check_markov_vocab(V);
  if (!(cfg.markov_temperature > 0) || !std::isfinite(cfg.markov_temperature))
    throw UserError("config", "data.markov_temperature", fmt::format("value {} is not positive", cfg.markov_temperature),
                    "use a positive temperature (1 is the default; smaller is more predictable)");
  check_windows("config", cfg.markov_length, cfg.markov_length, cfg.seq_len, "data.markov_length",
                fmt::format("use data.markov_length >= {}", static_cast<int64_t>(cfg.seq_len) + 1));

  // Transition matrix P (row-stochastic) and its row CDFs.
  std::vector<double> P(static_cast<size_t>(V) * V), cdf(P.size());
  Rng rng(mix_key(cfg.seed, kStreamChain, 0));
  for (int i = 0; i < V; ++i) {
    double* row = P.data() + static_cast<size_t>(i) * V;
    double mx = -INFINITY;
    for (int j = 0; j < V; ++j) mx = std::max(mx, row[j] = rng.normal() / cfg.markov_temperature);
    double z = 0;
    for (int j = 0; j < V; ++j) z += (row[j] = std::exp(row[j] - mx));
    double acc = 0;
    for (int j = 0; j < V; ++j) {
      row[j] /= z;
      acc += row[j];
      cdf[static_cast<size_t>(i) * V + j] = acc;
    }
  }
  // Stationary distribution by power iteration (the chain is dense, so it mixes fast).
  std::vector<double> pi(V, 1.0 / V), next(V);
  for (int it = 0; it < 10000; ++it) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int i = 0; i < V; ++i) {
      const double* row = P.data() + static_cast<size_t>(i) * V;
      for (int j = 0; j < V; ++j) next[j] += pi[i] * row[j];
    }
    double diff = 0;
    for (int j = 0; j < V; ++j) diff += std::abs(next[j] - pi[j]);
    pi.swap(next);
    if (diff < 1e-14) break;
  }
  double rate = 0;
  std::vector<double> pi_cdf(V);
  double acc = 0;
  for (int i = 0; i < V; ++i) {
    const double* row = P.data() + static_cast<size_t>(i) * V;
    double h = 0;
    for (int j = 0; j < V; ++j)
      if (row[j] > 0) h -= row[j] * std::log(row[j]);
    rate += pi[i] * h;
    pi_cdf[i] = (acc += pi[i]);
  }
  std::vector<int32_t> train = generate(cdf, pi_cdf, V, cfg.markov_length, mix_key(cfg.seed, kStreamSeqTrain, 0));
  std::vector<int32_t> val = generate(cdf, pi_cdf, V, cfg.markov_length, mix_key(cfg.seed, kStreamSeqVal, 0));
  const std::string what = fmt::format("markov (vocab {}, temperature {}, entropy rate {:.3f} nats)", V,
                                       cfg.markov_temperature, rate);
  return std::make_unique<TokenWindows<int32_t>>(what, std::move(train), std::move(val), V, cfg, rate);
}

}  // namespace scaleinv::data_detail
