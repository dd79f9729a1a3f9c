// Data sources: batches are a pure function of (seed, split, step); rank slices; text windows;
// the real KJV text and Fashion-MNIST; the Markov chain; errors that name the file and field.
#include <gtest/gtest.h>

#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "cli_util.h"
#include "brain/util/errors.h"
#include "engine/data/data.h"
#include "brain/util/atomic_file.h"

using namespace scaleinv;
using scaleinv::testing::ScopedEnv;
namespace fs = std::filesystem;

namespace {

std::string write_bytes(const std::string& dir, const std::string& name, const std::function<uint8_t(int64_t)>& f,
                        int64_t n) {
  const std::string path = dir + "/" + name;
  std::string s(static_cast<size_t>(n), '\0');
  for (int64_t i = 0; i < n; ++i) s[static_cast<size_t>(i)] = static_cast<char>(f(i));
  std::ofstream(path, std::ios::binary) << s;
  return path;
}

uint64_t hash64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

// 20000 bytes: the first 90% below 128, the last 10% (validation) at or above 128.
std::string split_marked_file(const std::string& dir) {
  return write_bytes(dir, "marked.bin", [](int64_t i) {
    const uint8_t r = static_cast<uint8_t>(hash64(static_cast<uint64_t>(i)) % 128);
    return static_cast<uint8_t>(i < 18000 ? r : 128 + r);
  }, 20000);
}

DataConfig text_cfg(const std::string& path) {
  DataConfig c;
  c.source = "text";
  c.path = path;
  c.seq_len = 16;
  c.val_fraction = 0.1;
  c.seed = 1;
  return c;
}

void expect_user_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected a UserError";
  } catch (const UserError& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

}  // namespace

TEST(DataText, BatchesArePureFunctionsOfSeedSplitStep) {
  const std::string dir = scaleinv::testing::temp_dir("data_det");
  const DataConfig cfg = text_cfg(split_marked_file(dir));
  auto a = make_data(cfg), b = make_data(cfg);
  EXPECT_TRUE(a->is_language());
  EXPECT_EQ(a->num_classes(), 256);
  const Batch x0 = a->batch(Split::Train, 5, 8), x1 = b->batch(Split::Train, 5, 8);
  EXPECT_EQ(x0.x.sizes(), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(x0.x.scalar_type(), torch::kInt64);
  EXPECT_EQ(x0.y.scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::equal(x0.x, x1.x));
  EXPECT_TRUE(torch::equal(x0.y, x1.y));
  EXPECT_TRUE(torch::equal(a->batch(Split::Val, 3, 4).x, b->batch(Split::Val, 3, 4).x));
  EXPECT_FALSE(torch::equal(x0.x, a->batch(Split::Train, 6, 8).x));
  DataConfig other = cfg;
  other.seed = 2;
  EXPECT_FALSE(torch::equal(x0.x, make_data(other)->batch(Split::Train, 5, 8).x));
}

TEST(DataText, RankSlicesConcatenateToTheGlobalBatch) {
  const std::string dir = scaleinv::testing::temp_dir("data_rank");
  auto d = make_data(text_cfg(split_marked_file(dir)));
  for (Split split : {Split::Train, Split::Val}) {
    const Batch global = d->batch(split, 17, 12);
    for (int world : {2, 3, 4}) {
      std::vector<torch::Tensor> xs, ys;
      for (int r = 0; r < world; ++r) {
        const Batch part = d->batch(split, 17, 12, r, world);
        EXPECT_EQ(part.x.size(0), 12 / world);
        xs.push_back(part.x);
        ys.push_back(part.y);
      }
      EXPECT_TRUE(torch::equal(torch::cat(xs), global.x)) << world;
      EXPECT_TRUE(torch::equal(torch::cat(ys), global.y)) << world;
    }
  }
  expect_user_error([&] { d->batch(Split::Train, 0, 12, 0, 5); }, {"train.batch_size"});
  expect_user_error([&] { d->batch(Split::Train, 0, 0); }, {"train.batch_size"});
}

TEST(DataText, TargetsAreInputsShiftedByOne) {
  const std::string dir = scaleinv::testing::temp_dir("data_shift");
  // byte(i) = 7 i mod 256, so the byte after b is always b + 7.
  DataConfig cfg = text_cfg(write_bytes(dir, "pattern.bin", [](int64_t i) { return static_cast<uint8_t>(7 * i); }, 5000));
  cfg.seq_len = 32;
  auto d = make_data(cfg);
  for (Split split : {Split::Train, Split::Val}) {
    const Batch b = d->batch(split, 3, 16);
    EXPECT_EQ(b.y.sizes(), (std::vector<int64_t>{16, 32}));
    EXPECT_TRUE(torch::equal(b.y, (b.x + 7).remainder(256)));
    EXPECT_TRUE(torch::equal(b.x.slice(1, 1), b.y.slice(1, 0, 31)));
  }
}

// unigram_entropy is the byte entropy of the train split (the first 1 - val_fraction of the file),
// in nats: 20000 bytes with val_fraction 0.1 leave 18000 train bytes, a multiple of 4. Each of 4
// values equally often gives ln 4; 'a' once in 4 and 'b' otherwise gives
// -(1/4 ln 1/4 + 3/4 ln 3/4). A split taken from the wrong end (the val bytes are 'z') or counted
// over the whole file would miss both by more than 1e-3.
TEST(DataText, UnigramEntropyIsTheTrainSplitsByteEntropy) {
  const std::string dir = scaleinv::testing::temp_dir("data_entropy");
  auto four = make_data(text_cfg(write_bytes(dir, "four.bin", [](int64_t i) {
    return static_cast<uint8_t>(i < 18000 ? 'a' + i % 4 : 'z');
  }, 20000)));
  EXPECT_NEAR(four->unigram_entropy(), std::log(4.0), 1e-12);
  auto skew = make_data(text_cfg(write_bytes(dir, "skew.bin", [](int64_t i) {
    return static_cast<uint8_t>(i < 18000 ? (i % 4 == 0 ? 'a' : 'b') : 'z');
  }, 20000)));
  EXPECT_NEAR(skew->unigram_entropy(), -(0.25 * std::log(0.25) + 0.75 * std::log(0.75)), 1e-12);
}

TEST(DataText, TrainAndValAreDisjoint) {
  const std::string dir = scaleinv::testing::temp_dir("data_split");
  auto d = make_data(text_cfg(split_marked_file(dir)));
  for (int step = 0; step < 20; ++step) {
    const Batch t = d->batch(Split::Train, step, 32), v = d->batch(Split::Val, step, 32);
    EXPECT_LT(torch::max(torch::max(t.x), torch::max(t.y)).item<int64_t>(), 128);
    EXPECT_GE(torch::min(torch::min(v.x), torch::min(v.y)).item<int64_t>(), 128);
  }
}

TEST(DataText, BadInputNamesFileAndField) {
  const std::string dir = scaleinv::testing::temp_dir("data_bad");
  const std::string missing = dir + "/no_such_file.txt";
  expect_user_error([&] { make_data(text_cfg(missing)); }, {missing, "data.path"});
  expect_user_error([&] { make_data(text_cfg("")); }, {"data.path"});
  DataConfig c = text_cfg(split_marked_file(dir));
  c.source = "imagenet";
  expect_user_error([&] { make_data(c); }, {"data.source", "imagenet"});
  c = text_cfg(split_marked_file(dir));
  c.val_fraction = 0;
  expect_user_error([&] { make_data(c); }, {"data.val_fraction"});
  const std::string tiny = write_bytes(dir, "tiny.txt", [](int64_t) { return uint8_t('a'); }, 40);
  expect_user_error([&] { make_data(text_cfg(tiny)); }, {tiny, "model.seq_len"});
}

TEST(DataKjv, LoadsTheRealTextIntoTheCache) {
  if (std::system("command -v bible >/dev/null 2>&1") != 0) GTEST_SKIP() << "bible-kjv is not installed";
  const std::string dir = scaleinv::testing::temp_dir("data_kjv");
  ScopedEnv env("SCALEINV_DATA_DIR", dir);
  EXPECT_EQ(kjv_cache_path(), dir + "/kjv.txt");
  DataConfig cfg;
  cfg.source = "kjv";
  cfg.seq_len = 64;
  auto d = make_data(cfg);
  ASSERT_TRUE(fs::exists(dir + "/kjv.txt"));
  const auto size = fs::file_size(dir + "/kjv.txt");
  EXPECT_GT(size, 4'300'000u);
  EXPECT_LT(size, 4'500'000u);
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "kjv.txt");  // no temp left
  // The entropy of the cached text's train part, counted here from the file (3.1498 nats over 73
  // distinct bytes: letters, punctuation, verse labels).
  std::vector<int64_t> counts(256, 0);
  {
    std::ifstream in(dir + "/kjv.txt", std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t n_train = text.size() - static_cast<size_t>(std::floor(static_cast<double>(text.size()) * cfg.val_fraction));
    for (size_t i = 0; i < n_train; ++i) ++counts[static_cast<unsigned char>(text[i])];
    std::set<unsigned char> distinct(text.begin(), text.end());
    EXPECT_EQ(distinct.size(), 73u);  // docs/training.md, Data: "4,404,412 bytes, 73 distinct"
  }
  double h_file = 0, total = 0;
  for (int64_t c : counts) total += static_cast<double>(c);
  for (int64_t c : counts)
    if (c > 0) h_file -= static_cast<double>(c) / total * std::log(static_cast<double>(c) / total);
  const double h = d->unigram_entropy();
  EXPECT_NEAR(h, h_file, 1e-9);
  EXPECT_GT(h, 3.10);  // and it is the text it was: 3.1498 when this test was written
  EXPECT_LT(h, 3.20);
  const Batch b = d->batch(Split::Train, 0, 4);
  EXPECT_EQ(b.x.sizes(), (std::vector<int64_t>{4, 64}));
  // A second source reads the cache rather than dumping again.
  const auto mtime = fs::last_write_time(dir + "/kjv.txt");
  auto again = make_data(cfg);
  EXPECT_EQ(fs::last_write_time(dir + "/kjv.txt"), mtime);
  EXPECT_TRUE(torch::equal(again->batch(Split::Val, 9, 4).x, d->batch(Split::Val, 9, 4).x));
  scaleinv::remove_tree(dir);  // 4.4 MB
}

TEST(DataKjv, MissingProgramIsAUserErrorWithTheFix) {
  const std::string dir = scaleinv::testing::temp_dir("data_kjv_missing");
  ScopedEnv path("PATH", dir + "/empty_bin");
  expect_user_error([&] { ensure_kjv_text(dir + "/kjv.txt"); }, {"bible", "scripts/setup.sh", dir + "/kjv.txt"});
}

TEST(DataFashion, ShapesLabelsAndNormalisation) {
  if (!fs::exists(std::string(kFashionDir) + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  DataConfig cfg;
  cfg.source = "fashion_mnist";
  auto d = make_data(cfg);
  EXPECT_FALSE(d->is_language());
  EXPECT_EQ(d->num_classes(), 10);
  for (Split split : {Split::Train, Split::Val}) {
    const Batch b = d->batch(split, 2, 512);
    EXPECT_EQ(b.x.sizes(), (std::vector<int64_t>{512, 1, 28, 28}));
    EXPECT_EQ(b.x.scalar_type(), torch::kFloat32);
    EXPECT_EQ(b.y.sizes(), (std::vector<int64_t>{512}));
    EXPECT_EQ(b.y.scalar_type(), torch::kInt64);
    EXPECT_GE(b.y.min().item<int64_t>(), 0);
    EXPECT_LE(b.y.max().item<int64_t>(), 9);
    EXPECT_EQ(std::get<0>(at::_unique(b.y)).numel(), 10);  // every class shows up in 512 draws
    EXPECT_NEAR(b.x.mean().item<double>(), 0.0, 0.1);       // normalised with the dataset's mean and std
    EXPECT_NEAR(b.x.std().item<double>(), 1.0, 0.1);
    EXPECT_NEAR(b.x.min().item<double>(), -0.2860 / 0.3530, 1e-5);
  }
  cfg.flatten = true;
  auto flat = make_data(cfg);
  const Batch f = flat->batch(Split::Train, 2, 8), g = d->batch(Split::Train, 2, 8);
  EXPECT_EQ(f.x.sizes(), (std::vector<int64_t>{8, 784}));
  EXPECT_TRUE(torch::equal(f.x, g.x.view({8, 784})));
  EXPECT_TRUE(torch::equal(f.y, g.y));
  EXPECT_NE(d->describe().find("60000"), std::string::npos) << d->describe();
}

TEST(DataFashion, MissingOrCorruptFilesNameTheFile) {
  const std::string dir = scaleinv::testing::temp_dir("data_fashion");
  DataConfig cfg;
  cfg.source = "fashion_mnist";
  cfg.fashion_dir = dir + "/nowhere";
  expect_user_error([&] { make_data(cfg); }, {"train-images-idx3-ubyte.gz", "data.fashion_dir"});
  // A labels file where the images should be: wrong magic number.
  const std::string bad = dir + "/train-images-idx3-ubyte.gz";
  gzFile f = gzopen(bad.c_str(), "wb");
  const unsigned char header[8] = {0, 0, 8, 1, 0, 0, 0, 1};  // magic 2049, one item
  gzwrite(f, header, sizeof header);
  gzclose(f);
  cfg.fashion_dir = dir;
  expect_user_error([&] { make_data(cfg); }, {bad, "magic"});
}

TEST(DataMarkov, EntropyBelowLogVocabAndDeterministic) {
  DataConfig cfg;
  cfg.source = "markov";
  cfg.vocab = 32;
  cfg.markov_length = 1 << 15;
  cfg.seq_len = 16;
  cfg.seed = 4;
  auto d = make_data(cfg);
  EXPECT_TRUE(d->is_language());
  EXPECT_EQ(d->num_classes(), 32);
  const double h1 = d->unigram_entropy(), rate = d->entropy_rate();
  EXPECT_LT(h1, std::log(32.0));
  EXPECT_GT(h1, 0.8 * std::log(32.0));
  EXPECT_GT(rate, 0.0);
  EXPECT_LT(rate, h1);  // the chain is more predictable than its unigram statistics
  const Batch b = d->batch(Split::Train, 1, 8);
  EXPECT_GE(b.x.min().item<int64_t>(), 0);
  EXPECT_LT(b.x.max().item<int64_t>(), 32);
  EXPECT_TRUE(torch::equal(b.x.slice(1, 1), b.y.slice(1, 0, 15)));
  auto again = make_data(cfg);
  EXPECT_TRUE(torch::equal(again->batch(Split::Train, 1, 8).y, b.y));
  EXPECT_DOUBLE_EQ(again->unigram_entropy(), h1);
  // Colder chains are more predictable.
  cfg.markov_temperature = 0.25;
  EXPECT_LT(make_data(cfg)->entropy_rate(), rate);
  cfg.vocab = 1;
  expect_user_error([&] { make_data(cfg); }, {"data.vocab"});
}
