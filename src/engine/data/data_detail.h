#pragma once
// Shared pieces of the data sources (not part of the public API): a small counter-based random
// generator (identical on every platform and libtorch build), batch-slice checks, token windows.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/data.h"

namespace scaleinv::data_detail {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A key from (seed, stream, step): streams separate train/val batches, the Markov chain, etc.
inline uint64_t mix_key(int64_t seed, uint64_t stream, int64_t step) {
  uint64_t k = splitmix64(static_cast<uint64_t>(seed) ^ 0x5CA1E1Bu);
  k = splitmix64(k ^ stream);
  return splitmix64(k ^ static_cast<uint64_t>(step));
}
constexpr uint64_t kStreamTrain = 0x7121A1Au, kStreamVal = 0x7A1u, kStreamChain = 0xC4A1u,
                   kStreamSeqTrain = 0x5E0711u, kStreamSeqVal = 0x5E07A1u;
inline uint64_t split_stream(Split s) { return s == Split::Train ? kStreamTrain : kStreamVal; }

class Rng {
 public:
  explicit Rng(uint64_t key) : state_(key) {}
  uint64_t next() { return splitmix64(state_++); }
  // Uniform in [0, n) (Lemire's multiply-shift; bias below 2^-64 * n, irrelevant here).
  uint64_t below(uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {                                                            // Box-Muller
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t state_;
};

// Checks (batch_size, rank, world) and returns this rank's rows [lo, hi) of the global batch.
std::pair<int64_t, int64_t> rank_rows(int64_t batch_size, int rank, int world);

// Entropy in nats of a histogram.
double entropy_nats(const std::vector<int64_t>& counts);

// Windows x = tok[i : i+T], y = tok[i+1 : i+T+1] over two token sequences (train, val).
template <class Tok>
class TokenWindows : public DataSource {
 public:
  TokenWindows(std::string what, std::vector<Tok> train, std::vector<Tok> val, int vocab, const DataConfig& cfg,
               double entropy_rate = 0.0);
  Batch batch(Split split, int64_t step, int64_t batch_size, int rank = 0, int world = 1) const override;
  std::string describe() const override;
  bool is_language() const override { return true; }
  double unigram_entropy() const override { return unigram_; }
  int num_classes() const override { return vocab_; }
  double entropy_rate() const override { return entropy_rate_; }

 private:
  std::string what_;
  std::vector<Tok> train_, val_;
  int vocab_;
  int seq_len_;
  int64_t seed_;
  double unigram_ = 0, entropy_rate_ = 0;
};

// Validates seq_len (UserError naming model.seq_len) and split sizes against the sequences
// (UserError naming `where` and `field`, with `fix`).
void check_windows(const std::string& where, int64_t n_train, int64_t n_val, int seq_len, const std::string& field,
                   const std::string& fix);

std::unique_ptr<DataSource> make_text(const DataConfig& cfg);           // text_data.cpp
std::unique_ptr<DataSource> make_kjv(const DataConfig& cfg);            // kjv.cpp
std::unique_ptr<DataSource> make_fashion_mnist(const DataConfig& cfg);  // fashion_mnist.cpp
std::unique_ptr<DataSource> make_markov(const DataConfig& cfg);         // markov.cpp
// A byte-level source over `bytes` (text and kjv): the last val_fraction is validation.
std::unique_ptr<DataSource> make_byte_source(const std::string& what, const std::string& where,
                                             const std::string& bytes, const DataConfig& cfg);

}  // namespace scaleinv::data_detail
