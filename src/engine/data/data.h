#pragma once
// Data sources (docs/design.md "Dependencies": the data packages). Batches are a pure function of
// (seed, split, step), so a resumed run sees exactly the batches the uninterrupted one saw, and a
// data-parallel rank takes its slice of the same global batch.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "brain/data/data_config.h"

namespace scaleinv {

enum class Split { Train, Val };

struct Batch {
  torch::Tensor x;  // [B, T] int64 tokens, [B, D] float features, or [B, C, H, W] float images
  torch::Tensor y;  // [B, T] or [B] int64 targets
};


class DataSource {
 public:
  virtual ~DataSource() = default;
  // The global batch of `step` for `split`, restricted to this rank's rows
  // [rank * B / world, (rank + 1) * B / world). Deterministic in (config seed, split, step): the
  // global batch is B independent uniform draws (windows or images, with replacement) from a
  // counter-based generator keyed by (seed, split, step), the same on every platform and build.
  // UserError (field "train.batch_size") when B < 1 or B is not divisible by world.
  virtual Batch batch(Split split, int64_t step, int64_t batch_size, int rank = 0, int world = 1) const = 0;
  virtual std::string describe() const = 0;   // one line: what, how big
  virtual bool is_language() const = 0;
  // Unigram entropy of the training split in nats per token (language sources), for judging loss.
  virtual double unigram_entropy() const { return 0.0; }
  // Number of target classes: the vocabulary of a language source, 10 for Fashion-MNIST (0: unknown).
  virtual int num_classes() const { return 0; }
  // The lowest loss any model can reach in nats per token, where the source knows it (markov: the
  // chain's entropy rate); 0 when unknown.
  virtual double entropy_rate() const { return 0.0; }
};

// Builds a source; missing files or programs throw UserError naming the file and the fix.
std::unique_ptr<DataSource> make_data(const DataConfig& cfg);
// Creates the on-disk cache a source needs (the KJV text) if it is missing, so that commands
// which then build the source on several threads (sweep workers) only read it. Safe to call from
// several processes at once (each writes a whole file under a unique temporary name and renames).
void prepare_data(const DataConfig& cfg);

// Where the KJV text is cached ($SCALEINV_DATA_DIR or ~/.cache/scaleinv, then kjv.txt); created
// on first use from Debian's bible-kjv (`bible -f 'Gen1:1-Rev22:21'`), written atomically under a
// writer-unique temporary name (brain/util/atomic_file.h), so concurrent first uses all succeed.
std::string kjv_cache_path();
std::string ensure_kjv_text(const std::string& path);  // returns the path it ensured

}  // namespace scaleinv
