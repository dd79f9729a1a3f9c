// Token windows over a sequence (byte-level text; the Markov source reuses them) and the `text`
// source: any file, read as bytes (vocab 256), the last val_fraction of it validation.
#include <filesystem>

#include <fmt/format.h>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "engine/data/data_detail.h"

namespace scaleinv::data_detail {

// The context length is model.seq_len (the config copies it into DataConfig::seq_len). Splits too
// short for one window are named by the caller: `field` and `fix` say what to change (a text's
// length and val_fraction, the Markov chain's markov_length).
void check_windows(const std::string& where, int64_t n_train, int64_t n_val, int seq_len, const std::string& field,
                   const std::string& fix) {
  if (seq_len < 1)
    throw UserError("config", "model.seq_len", fmt::format("value {} is below 1", seq_len), "use a positive context length");
  const int64_t need = static_cast<int64_t>(seq_len) + 1;
  if (n_train < need || n_val < need)
    throw UserError(where, field,
                    fmt::format("each split needs at least seq_len + 1 = {} tokens, but train has {} and val {}", need,
                                n_train, n_val),
                    fix);
}

template <class Tok>
TokenWindows<Tok>::TokenWindows(std::string what, std::vector<Tok> train, std::vector<Tok> val, int vocab,
                                const DataConfig& cfg, double entropy_rate)
    : what_(std::move(what)),
      train_(std::move(train)),
      val_(std::move(val)),
      vocab_(vocab),
      seq_len_(cfg.seq_len),
      seed_(cfg.seed),
      entropy_rate_(entropy_rate) {
  std::vector<int64_t> counts(static_cast<size_t>(vocab_), 0);
  for (Tok t : train_) ++counts[static_cast<size_t>(t)];
  unigram_ = entropy_nats(counts);
}

template <class Tok>
Batch TokenWindows<Tok>::batch(Split split, int64_t step, int64_t batch_size, int rank, int world) const {
  const auto [lo, hi] = rank_rows(batch_size, rank, world);
  const std::vector<Tok>& seq = split == Split::Train ? train_ : val_;
  const int64_t T = seq_len_;
  const uint64_t starts = static_cast<uint64_t>(static_cast<int64_t>(seq.size()) - T);  // i + T + 1 <= n
  Batch b;
  b.x = torch::empty({hi - lo, T}, torch::kInt64);
  b.y = torch::empty({hi - lo, T}, torch::kInt64);
  int64_t* xp = b.x.data_ptr<int64_t>();
  int64_t* yp = b.y.data_ptr<int64_t>();
  Rng rng(mix_key(seed_, split_stream(split), step));
  for (int64_t j = 0; j < hi; ++j) {
    const uint64_t i = rng.below(starts);
    if (j < lo) continue;
    const Tok* src = seq.data() + i;
    int64_t* xr = xp + (j - lo) * T;
    int64_t* yr = yp + (j - lo) * T;
    for (int64_t t = 0; t < T; ++t) {
      xr[t] = static_cast<int64_t>(src[t]);
      yr[t] = static_cast<int64_t>(src[t + 1]);
    }
  }
  return b;
}

template <class Tok>
std::string TokenWindows<Tok>::describe() const {
  return fmt::format("{}: {} tokens (train {}, val {}), vocab {}, seq_len {}, unigram entropy {:.3f} nats", what_,
                     train_.size() + val_.size(), train_.size(), val_.size(), vocab_, seq_len_, unigram_);
}

template class TokenWindows<uint8_t>;
template class TokenWindows<int32_t>;

std::unique_ptr<DataSource> make_byte_source(const std::string& what, const std::string& where,
                                             const std::string& bytes, const DataConfig& cfg) {
  if (!(cfg.val_fraction > 0 && cfg.val_fraction < 1))
    throw UserError("config", "data.val_fraction", fmt::format("value {} is outside (0, 1)", cfg.val_fraction),
                    "use a fraction such as 0.1");
  const int64_t n = static_cast<int64_t>(bytes.size());
  const int64_t n_val = static_cast<int64_t>(std::floor(static_cast<double>(n) * cfg.val_fraction));
  const int64_t n_train = n - n_val;
  check_windows(where, n_train, n_val, cfg.seq_len, "model.seq_len",
                "use a longer text, a smaller model.seq_len, or adjust data.val_fraction");
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  std::vector<uint8_t> train(p, p + n_train), val(p + n_train, p + n);
  return std::make_unique<TokenWindows<uint8_t>>(what, std::move(train), std::move(val), 256, cfg);
}

std::unique_ptr<DataSource> make_text(const DataConfig& cfg) {
  if (cfg.path.empty())
    throw UserError("config", "data.path", "the text source needs a file", "set data.path to a text file");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(cfg.path, ec))
    throw UserError(cfg.path, "data.path", "text file not found", "set data.path to an existing file");
  const std::string bytes = read_file(cfg.path);
  return make_byte_source("text " + cfg.path, cfg.path, bytes, cfg);
}

}  // namespace scaleinv::data_detail
