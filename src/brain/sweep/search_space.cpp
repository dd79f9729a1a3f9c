// Search spaces, quasi-random trials and successive-halving rungs (see search_space.h).
#include "brain/sweep/search_space.h"

#include <algorithm>
#include <cmath>
#include <ranges>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/util/errors.h"
#include "brain/util/toml_json.h"
#include "brain/util/toml_reader.h"

namespace scaleinv {

namespace {

// The first primes: one Halton base per dimension.
constexpr int kPrimes[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71};
constexpr int kMaxDims = static_cast<int>(sizeof(kPrimes) / sizeof(kPrimes[0]));
constexpr int kMaxTrials = 100000;

// Radical inverse of i in base b: the Halton coordinate.
double radical_inverse(uint64_t i, int b) {
  double f = 1, r = 0;
  while (i > 0) {
    f /= b;
    r += f * static_cast<double>(i % static_cast<uint64_t>(b));
    i /= static_cast<uint64_t>(b);
  }
  return r;
}

// splitmix64 -> [0, 1): the per-dimension shift (Cranley-Patterson rotation) from the seed.
double unit_from(uint64_t seed, int dim) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(dim + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}


// The search methods: a row per method, not a branch per method.
struct Method {
  const char* name;
  bool rungs;               // trials are pruned on rungs below train.steps (eta, min_steps)
  bool brackets;            // hyperband's brackets (search_space.h)
  const char* fingerprint;  // the method as the fingerprint's [search] text writes it
};
constexpr Method kMethods[] = {
    {"random", false, false, "random"},
    {"halving", true, false, "halving"},
    // Hyperband's first bracket is halving with the same trials and rungs (the same point ids), so
    // a hyperband file fingerprints as its halving file: either resumes the other's store, and a
    // finished halving search grows into hyperband without retraining.
    {"hyperband", true, true, "halving"},
};

const Method* find_method(const std::string& name) {
  for (const Method& m : kMethods)
    if (name == m.name) return &m;
  return nullptr;
}

// parse_search names an unknown method to the user; a SearchSpec built in code with one is a bug.
const Method& method_of(const SearchSpec& s) {
  const Method* m = find_method(s.method);
  if (!m) throw std::logic_error("search method '" + s.method + "' is not a row of kMethods");
  return *m;
}

// Flattens [search.space] (nested tables are dotted keys; {from, to[, log]} is a range).
void flatten_space(const toml::table& t, const std::string& prefix, const std::string& where,
                   const SearchKeyCheck& check, std::vector<SearchDim>& dims) {
  for (auto&& [k, v] : t) {
    const std::string key = prefix + std::string(k.str());
    const std::string field = "search.space." + key;
    SearchDim d;
    d.key = key;
    if (const toml::table* sub = v.as_table()) {
      if (!sub->contains("from") && !sub->contains("to")) {
        flatten_space(*sub, key + ".", where, check, dims);
        continue;
      }
      TomlReader r(*sub, where, field + ".");
      r.expect_keys({"from", "to", "log"});
      r.require("from", &d.lo);
      r.require("to", &d.hi);
      r.get("log", &d.log);
      if (!(d.hi > d.lo)) r.fail("to", fmt::format("{} is not above from = {}", d.hi, d.lo), "write {from = LOW, to = HIGH}");
      if (d.log && !(d.lo > 0)) r.fail("from", "a log range needs from > 0", "write e.g. {from = 0.25, to = 4, log = true}");
      std::vector<nlohmann::json> probe = {nlohmann::json(d.lo), nlohmann::json(d.hi)};
      check(key, field, &d.integer, probe);
    } else if (const toml::array* arr = v.as_array()) {
      auto choices = toml_scalar_array_json(*arr);
      if (!choices)
        throw UserError(where, field, "choices must be numbers, strings or booleans",
                        fmt::format("write {} = [value1, value2]", key));
      d.choices = std::move(*choices);
      if (d.choices.size() < 2)
        throw UserError(where, field, "a choice needs at least two values", "fix the value in [grid] instead");
      check(key, field, &d.integer, d.choices);
    } else {
      throw UserError(where, field, "expected a range or an array of choices",
                      fmt::format("write {} = {{from = LOW, to = HIGH}} or {} = [a, b, c]", key, key));
    }
    if (key == "seed" || key == "train.seed" || key == "data.seed")
      throw UserError(where, field, "seeds are not searched", "put seed = [0, 1] in [grid]");
    if (key == "train.steps" || key == "optim.total_steps")
      throw UserError(where, field, "the budget is the search's own (train.steps in the base config, rungs below it)",
                      "set train.steps in the base config; use a horizon grid sweep to study steps");
    dims.push_back(std::move(d));
  }
}

}  // namespace

SearchSpec parse_search(const toml::table& t, const std::string& where, const SearchKeyCheck& check,
                        int64_t full_steps) {
  SearchSpec s;
  TomlReader r(t, where, "search.");
  r.expect_keys({"method", "trials", "seed", "eta", "min_steps", "space"});
  r.get("method", &s.method);
  r.require("trials", &s.trials);
  int64_t seed = 0;
  r.get("seed", &seed);
  s.seed = static_cast<uint64_t>(seed);
  r.get("eta", &s.eta);
  r.get("min_steps", &s.min_steps);
  if (!find_method(s.method)) {
    auto quoted = kMethods | std::views::transform([](const Method& m) { return fmt::format("\"{}\"", m.name); });
    r.fail("method", fmt::format("unknown method '{}'", s.method),
           fmt::format("use one of {}", fmt::join(quoted, ", ")));
  }
  if (s.trials < 1 || s.trials > kMaxTrials)
    r.fail("trials", fmt::format("{} is not in 1..{}", s.trials, kMaxTrials), "e.g. trials = 27");
  if (method_of(s).rungs) {
    if (s.eta < 2) r.fail("eta", fmt::format("{} is below 2", s.eta), "e.g. eta = 3");
    if (s.min_steps < 1 || s.min_steps > full_steps / s.eta)
      r.fail("min_steps",
             fmt::format("{} leaves no rung below train.steps = {} (at most train.steps / eta = {})", s.min_steps,
                         full_steps, full_steps / s.eta),
             fmt::format("e.g. min_steps = {}", std::max<int64_t>(1, full_steps / (s.eta * s.eta))));
  } else if (r.has("eta") || r.has("min_steps")) {
    r.fail(r.has("eta") ? "eta" : "min_steps", "only for method = \"halving\" or \"hyperband\"",
           "remove it, or set method = \"halving\"");
  }
  if (!t.contains("space") || !t["space"].is_table())
    r.fail("space", "missing", "add [search.space] with e.g. lr_log2 = {from = -12, to = -4}");
  flatten_space(*t["space"].as_table(), "", where, check, s.dims);
  if (s.dims.empty()) r.fail("space", "no dimension", "add e.g. lr_log2 = {from = -12, to = -4}");
  if (static_cast<int>(s.dims.size()) > kMaxDims)
    r.fail("space", fmt::format("{} dimensions, more than {}", s.dims.size(), kMaxDims), "search fewer hyperparameters");
  // The fingerprint's text, with the method as kMethods writes it there.
  toml::table fp = t;
  if (s.method != method_of(s).fingerprint) fp.insert_or_assign("method", method_of(s).fingerprint);
  std::ostringstream os;
  os << toml::toml_formatter(fp);
  s.text = os.str();
  return s;
}

nlohmann::json sample_trial(const SearchSpec& s, int trial) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t d = 0; d < s.dims.size(); ++d) {
    const SearchDim& dim = s.dims[d];
    // Halton index trial + 1 (index 0 is the origin in every base), rotated by the seed's shift.
    double u = radical_inverse(static_cast<uint64_t>(trial) + 1, kPrimes[d]) + unit_from(s.seed, static_cast<int>(d));
    u -= std::floor(u);
    if (!dim.choices.empty()) {
      const size_t i = std::min(dim.choices.size() - 1, static_cast<size_t>(u * static_cast<double>(dim.choices.size())));
      out[dim.key] = dim.choices[i];
      continue;
    }
    double v = dim.log ? std::exp2(std::log2(dim.lo) + u * (std::log2(dim.hi) - std::log2(dim.lo)))
                       : dim.lo + u * (dim.hi - dim.lo);
    if (dim.integer) out[dim.key] = static_cast<int64_t>(std::llround(v));
    else  // six decimals, readable in ids and reports; six significant digits below 0.1 (an eps range stays > 0)
      out[dim.key] = std::fabs(v) >= 0.1 ? std::round(v * 1e6) / 1e6 : std::stod(fmt::format("{:.6g}", v));
  }
  return out;
}

std::vector<int64_t> rung_steps(const SearchSpec& s, int64_t full_steps) {
  // From the top: the last rung trains full_steps, each rung before it 1/eta of the next, the
  // first no shorter than min_steps.
  std::vector<int64_t> out = {full_steps};
  if (!method_of(s).rungs) return out;
  for (double b = static_cast<double>(full_steps) / s.eta; std::llround(b) >= s.min_steps; b /= s.eta)
    out.insert(out.begin(), std::llround(b));
  return out;
}

std::vector<Bracket> brackets(const SearchSpec& s, int64_t full_steps) {
  if (!method_of(s).brackets) return {Bracket{0, 0, s.trials}};
  const int K = static_cast<int>(rung_steps(s, full_steps).size()) - 1;
  std::vector<Bracket> out;
  int next = 0;
  for (int sh = K; sh >= 0; --sh) {  // sh halvings: Li et al. 2018 Algorithm 1's s
    // n_s = ceil(trials * (K+1)/(s+1) * eta^(s-K)), in integers: trials (K+1) / ((s+1) eta^(K-s)).
    int64_t den = sh + 1;
    for (int i = 0; i < K - sh; ++i) den *= s.eta;
    const int64_t num = static_cast<int64_t>(s.trials) * (K + 1);
    const int n = static_cast<int>((num + den - 1) / den);
    out.push_back(Bracket{K - sh, next, n});
    next += n;
  }
  return out;
}

int total_trials(const std::vector<Bracket>& b) { return b.empty() ? 0 : b.back().first_trial + b.back().trials; }

int bracket_of(const std::vector<Bracket>& b, int trial) {
  for (size_t i = 0; i < b.size(); ++i)
    if (trial < b[i].first_trial + b[i].trials) return static_cast<int>(i);
  return static_cast<int>(b.size()) - 1;
}

int survivors(const SearchSpec& s, int n) { return std::max(1, n / std::max(1, s.eta)); }

std::vector<nlohmann::json> rung_assignments(const SearchSpec& s, int rung, const std::vector<int>& trials,
                                             int64_t full_steps) {
  const std::vector<int64_t> steps = rung_steps(s, full_steps);
  std::vector<nlohmann::json> out;
  for (int t : trials) {
    nlohmann::json a = sample_trial(s, t);
    a["search.trial"] = t;
    a["search.rung"] = rung;
    if (method_of(s).rungs) {
      a["train.steps"] = steps.at(static_cast<size_t>(rung));
      a["optim.total_steps"] = steps.at(static_cast<size_t>(rung));
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace scaleinv
