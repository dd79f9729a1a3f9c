#include "brain/util/toml_reader.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in ranges.h since fmt 11, which pip's libtorch ships)

#include "brain/util/errors.h"
#include "brain/util/fraction.h"

namespace scaleinv {

namespace {
const toml::table kEmpty;
}

TomlReader::TomlReader(const toml::table& table, std::string where, std::string prefix)
    : table_(&table), where_(std::move(where)), prefix_(std::move(prefix)) {}

const toml::node* TomlReader::node(const char* key) const {
  seen_.insert(key);
  return table_->get(key);
}

void TomlReader::fail(const char* key, const std::string& problem, const std::string& fix) const {
  throw UserError(where_, prefix_ + key, problem, fix);
}

void TomlReader::get(const char* key, int64_t* dst) const {
  const toml::node* n = node(key);
  if (!n) return;
  if (auto v = n->value_exact<int64_t>()) {
    *dst = *v;
    return;
  }
  // A float that is a whole number within int64's range (2^63 itself is not).
  if (auto d = n->value_exact<double>(); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18 && *d == std::trunc(*d)) {
    *dst = static_cast<int64_t>(*d);
    return;
  }
  fail(key, "expected an integer", fmt::format("write e.g. {} = {}", key, *dst));
}

void TomlReader::get(const char* key, int* dst) const {
  int64_t v = *dst;
  get(key, &v);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    fail(key, fmt::format("value {} does not fit a 32-bit integer", v),
         fmt::format("use a value from {} to {}", std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  *dst = static_cast<int>(v);
}

void TomlReader::get(const char* key, double* dst) const {
  const toml::node* n = node(key);
  if (!n) return;
  if (auto v = n->value<double>()) {
    if (!std::isfinite(*v)) fail(key, fmt::format("value {} is not a finite number", *v), "use a finite number");
    *dst = *v;
    return;
  }
  fail(key, "expected a number", fmt::format("write e.g. {} = {}", key, *dst));
}

void TomlReader::get(const char* key, bool* dst) const {
  const toml::node* n = node(key);
  if (!n) return;
  if (auto v = n->value_exact<bool>()) {
    *dst = *v;
    return;
  }
  fail(key, "expected true or false", fmt::format("write e.g. {} = true", key));
}

void TomlReader::get(const char* key, std::string* dst) const {
  const toml::node* n = node(key);
  if (!n) return;
  if (auto v = n->value_exact<std::string>()) {
    *dst = *v;
    return;
  }
  fail(key, "expected a string", fmt::format("write e.g. {} = \"{}\"", key, *dst));
}

void TomlReader::get_exponent(const char* key, double* dst) const {
  const toml::node* n = node(key);
  if (!n) return;
  double v = 0;
  if (auto d = n->value<double>()) {
    if (!std::isfinite(*d)) fail(key, fmt::format("exponent {} is not a finite number", *d), "use a finite number such as 0.5 or \"-1/2\"");
    v = *d;
  } else if (auto str = n->value_exact<std::string>(); !str || !parse_fraction(*str, &v)) {
    fail(key, "expected a finite number (or a fraction such as \"-1/2\")", fmt::format("write e.g. {} = 0.5", key));
  }
  if (std::fabs(v) > kMaxExponent)
    fail(key, fmt::format("exponent {} is out of range", v),
         fmt::format("use an exponent between -{0} and {0} (published parameterizations stay within 2)", kMaxExponent));
  *dst = v;
}

TomlReader TomlReader::sub(const char* key) const {
  const toml::node* n = node(key);
  if (!n) return TomlReader(kEmpty, where_, prefix_ + key + ".");
  const toml::table* t = n->as_table();
  if (!t) fail(key, "expected a table", fmt::format("write it as a [{}{}] section", prefix_, key));
  return TomlReader(*t, where_, prefix_ + key + ".");
}

void TomlReader::reject_unknown() const {
  for (auto&& [k, v] : *table_) {
    std::string key(k.str());
    if (seen_.count(key)) continue;
    throw UserError(where_, prefix_ + key, "unknown field", fmt::format("known fields here: {}", fmt::join(seen_, ", ")));
  }
}

void TomlReader::expect_keys(const std::vector<std::string>& keys) const {
  seen_.insert(keys.begin(), keys.end());
  reject_unknown();
}

toml::table parse_toml(const std::string& text, const std::string& where) {
  try {
    return toml::parse(text, where);
  } catch (const toml::parse_error& e) {
    throw UserError(fmt::format("{}:{}", where, e.source().begin.line), "", std::string(e.description()),
                    "fix the TOML syntax");
  }
}

void merge_toml(toml::table& root, const toml::table& overlay) {
  for (const auto& [key, node] : overlay) {
    const toml::table* sub = node.as_table();
    toml::table* into = root.get_as<toml::table>(key);
    if (sub && into) {
      merge_toml(*into, *sub);
    } else {
      root.insert_or_assign(key, node);
    }
  }
}

void apply_override(toml::table& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UserError("command line", "--set", fmt::format("cannot read '{}'", assignment),
                    "write --set section.key=value, e.g. --set optim.lr=0.01");
  const std::string path = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", value}};  // a bare word: take it as a string
  }
  toml::table* t = &root;
  size_t start = 0;
  for (;;) {
    const auto dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty())
      throw UserError("command line", "--set " + path, "empty key", "write --set section.key=value");
    if (dot == std::string::npos) {
      t->insert_or_assign(part, *parsed.get("v"));
      return;
    }
    if (!t->contains(part)) t->insert(part, toml::table{});
    toml::table* next = (*t)[part].as_table();
    if (!next) throw UserError("command line", "--set " + path, "'" + part + "' is not a section", "check the key");
    t = next;
    start = dot + 1;
  }
}

}  // namespace scaleinv
