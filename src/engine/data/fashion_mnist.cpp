// Fashion-MNIST from the IDX .gz files (Debian's dataset-fashion-mnist), read with zlib once per
// process and directory. Train = the 60k training images, Val = the 10k test images.
#include <zlib.h>

#include <array>
#include <filesystem>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "brain/util/errors.h"
#include "engine/data/data_detail.h"

namespace scaleinv::data_detail {
namespace {

constexpr int kSide = 28, kPixels = kSide * kSide, kClasses = 10;
constexpr float kMean = 0.2860f, kStd = 0.3530f;
const char* kFix = "install dataset-fashion-mnist (run scripts/setup.sh) or set data.fashion_dir to the folder "
                   "holding the four IDX .gz files";

struct Idx {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

Idx read_idx(const std::string& path, uint32_t magic, size_t ndims) {
  gzFile f = ::gzopen(path.c_str(), "rb");
  if (f == nullptr) throw UserError(path, "data.fashion_dir", "cannot open the IDX file (missing or unreadable)", kFix);
  auto fail = [&](const std::string& problem) {
    ::gzclose(f);
    return UserError(path, "data.fashion_dir", problem, kFix);
  };
  auto read_u32 = [&](uint32_t* out) {
    unsigned char b[4];
    if (::gzread(f, b, 4) != 4) return false;
    *out = (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
    return true;
  };
  uint32_t m = 0;
  if (!read_u32(&m)) throw fail("not an IDX file (too short, or not gzip)");
  if (m != magic) throw fail(fmt::format("bad magic number {} (expected {})", m, magic));
  Idx idx;
  size_t total = 1;
  for (size_t d = 0; d < ndims; ++d) {
    uint32_t v = 0;
    if (!read_u32(&v)) throw fail("truncated header");
    idx.dims.push_back(v);
    total *= v;
  }
  idx.data.resize(total);
  size_t off = 0;
  while (off < total) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(total - off, 1u << 30));
    const int got = ::gzread(f, idx.data.data() + off, chunk);
    if (got <= 0) throw fail(fmt::format("truncated data ({} of {} bytes)", off, total));
    off += static_cast<size_t>(got);
  }
  ::gzclose(f);
  return idx;
}

struct Part {
  std::vector<uint8_t> images;  // [n, 784]
  std::vector<uint8_t> labels;  // [n]
  int64_t n = 0;
};

Part load_part(const std::filesystem::path& dir, const std::string& prefix, int64_t expected_n) {
  const std::string img = (dir / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string lab = (dir / (prefix + "-labels-idx1-ubyte.gz")).string();
  Idx im = read_idx(img, 2051, 3);
  if (im.dims[1] != kSide || im.dims[2] != kSide)
    throw UserError(img, "data.fashion_dir", fmt::format("images are {}x{}, expected 28x28", im.dims[1], im.dims[2]),
                    kFix);
  if (im.dims[0] != expected_n)
    throw UserError(img, "data.fashion_dir", fmt::format("{} images, expected {}", im.dims[0], expected_n), kFix);
  Idx lb = read_idx(lab, 2049, 1);
  if (lb.dims[0] != im.dims[0])
    throw UserError(lab, "data.fashion_dir", fmt::format("{} labels for {} images", lb.dims[0], im.dims[0]), kFix);
  for (uint8_t l : lb.data)
    if (l >= kClasses) throw UserError(lab, "data.fashion_dir", fmt::format("label {} is not in 0..9", l), kFix);
  Part p;
  p.n = im.dims[0];
  p.images = std::move(im.data);
  p.labels = std::move(lb.data);
  return p;
}

struct FashionSet {
  Part train, test;
};

// Loaded once per directory and kept for the process (55 MB of bytes): sweeps build many sources.
std::shared_ptr<const FashionSet> load_cached(const std::string& dir) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const FashionSet>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dir);
  if (it != cache.end()) return it->second;
  auto set = std::make_shared<FashionSet>();
  set->train = load_part(dir, "train", 60000);
  set->test = load_part(dir, "t10k", 10000);
  cache[dir] = set;
  return set;
}

class FashionMnist final : public DataSource {
 public:
  FashionMnist(const DataConfig& cfg, std::shared_ptr<const FashionSet> set)
      : dir_(cfg.fashion_dir), flatten_(cfg.flatten), seed_(cfg.seed), set_(std::move(set)) {
    for (int v = 0; v < 256; ++v) lut_[v] = (static_cast<float>(v) / 255.0f - kMean) / kStd;
  }

  Batch batch(Split split, int64_t step, int64_t batch_size, int rank, int world) const override {
    const auto [lo, hi] = rank_rows(batch_size, rank, world);
    const Part& part = split == Split::Train ? set_->train : set_->test;
    Batch b;
    b.x = flatten_ ? torch::empty({hi - lo, kPixels}, torch::kFloat32)
                   : torch::empty({hi - lo, 1, kSide, kSide}, torch::kFloat32);
    b.y = torch::empty({hi - lo}, torch::kInt64);
    float* xp = b.x.data_ptr<float>();
    int64_t* yp = b.y.data_ptr<int64_t>();
    Rng rng(mix_key(seed_, split_stream(split), step));
    for (int64_t j = 0; j < hi; ++j) {
      const uint64_t i = rng.below(static_cast<uint64_t>(part.n));
      if (j < lo) continue;
      const uint8_t* src = part.images.data() + i * kPixels;
      float* dst = xp + (j - lo) * kPixels;
      for (int k = 0; k < kPixels; ++k) dst[k] = lut_[src[k]];
      yp[j - lo] = part.labels[i];
    }
    return b;
  }

  std::string describe() const override {
    return fmt::format("fashion_mnist {}: {} train / {} test images, 28x28{}, 10 classes", dir_, set_->train.n,
                       set_->test.n, flatten_ ? " flattened to 784" : "");
  }
  bool is_language() const override { return false; }
  int num_classes() const override { return kClasses; }

 private:
  std::string dir_;
  bool flatten_;
  int64_t seed_;
  std::shared_ptr<const FashionSet> set_;
  std::array<float, 256> lut_{};
};

}  // namespace

std::unique_ptr<DataSource> make_fashion_mnist(const DataConfig& cfg) {
  std::error_code ec;
  std::string dir = cfg.fashion_dir;
  const auto canon = std::filesystem::weakly_canonical(dir, ec);
  if (!ec) dir = canon.string();
  return std::make_unique<FashionMnist>(cfg, load_cached(dir));
}

}  // namespace scaleinv::data_detail
