// The data configuration's own rules (brain/data/data_config.h), torch-free.
#include "brain/data/data_config.h"

#include <fmt/format.h>

#include "brain/util/errors.h"

namespace scaleinv {

void check_markov_vocab(int vocab) {
  if (vocab < 2 || vocab > kMaxMarkovVocab)
    throw UserError("config", "data.vocab", fmt::format("value {} is outside [2, {}]", vocab, kMaxMarkovVocab),
                    fmt::format("use a vocabulary of 2..{} tokens for the markov source", kMaxMarkovVocab));
}

}  // namespace scaleinv
