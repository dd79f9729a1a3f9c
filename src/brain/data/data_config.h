#pragma once
// Where a run's data comes from (DataConfig): plain data, no torch (the torch-free brain reads and
// writes it with the rest of a run's configuration). engine/data/data.h builds sources from it.
#include <cstdint>
#include <string>

namespace scaleinv {

struct DataConfig {
  std::string source = "kjv";     // kjv | text (any file) | fashion_mnist | markov
  std::string path;               // text: the file; kjv: the cache file (default: see kjv_cache_path)
  double val_fraction = 0.1;      // text sources: the last fraction of the bytes is validation
  int seq_len = 64;               // language sources
  int vocab = 256;                // markov
  double markov_temperature = 1.0;
  int64_t markov_length = 1 << 20;  // markov: tokens generated per split
  std::string fashion_dir = "/usr/share/datasets/fashion-mnist";
  bool flatten = false;           // fashion_mnist: [B, 784] instead of [B, 1, 28, 28]
  int64_t seed = 0;               // data seed (which windows / images a step sees)
};

// The Markov source's vocabulary rule (make_data applies it; the config applies it before it
// copies data.vocab into model.vocab): UserError (file "config", field data.vocab) outside
// [2, 2048], the transition matrix being vocab^2 doubles.
inline constexpr int kMaxMarkovVocab = 2048;  // the transition matrix is vocab^2 doubles
void check_markov_vocab(int vocab);

}  // namespace scaleinv
