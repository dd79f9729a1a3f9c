#pragma once
// Typed, validated reads from a TOML table: unknown keys, wrong types and bad values become
// UserErrors naming the file, the dotted field and the fix. Used by every config reader.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <toml++/toml.h>

namespace scaleinv {

class TomlReader {
 public:
  // where: the file name (or "command line"); prefix: dotted path of `table`, e.g. "model.".
  TomlReader(const toml::table& table, std::string where, std::string prefix);

  // Each reads `key` into *dst when present (keeping the default when absent); a wrong type is an error.
  void get(const char* key, int* dst) const;
  void get(const char* key, int64_t* dst) const;
  void get(const char* key, double* dst) const;
  void get(const char* key, bool* dst) const;
  void get(const char* key, std::string* dst) const;
  // An exponent: a number, or a fraction written as a string ("-1/2").
  void get_exponent(const char* key, double* dst) const;
  // Like get, but a missing key is an error telling the user to add it.
  template <class T>
  void require(const char* key, T* dst) const {
    if (!has(key)) fail(key, "missing", std::string("add ") + key + " = <value>");
    get(key, dst);
  }
  void require_exponent(const char* key, double* dst) const {
    if (!has(key)) fail(key, "missing", std::string("add ") + key + " = <exponent>");
    get_exponent(key, dst);
  }
  // A sub-table reader (an empty table when absent); a non-table value is an error.
  TomlReader sub(const char* key) const;
  // Every key present must have been read through this reader (call last).
  void reject_unknown() const;
  // Declares the keys this table may hold and rejects any other right away.
  void expect_keys(const std::vector<std::string>& keys) const;
  // A UserError for `key` of this table.
  [[noreturn]] void fail(const char* key, const std::string& problem, const std::string& fix) const;
  bool has(const char* key) const { return table_->contains(key); }

 private:
  const toml::node* node(const char* key) const;
  const toml::table* table_;
  std::string where_, prefix_;
  mutable std::set<std::string> seen_;
};

// Parses TOML text, turning syntax errors into UserError "FILE:LINE: ... (fix: ...)".
toml::table parse_toml(const std::string& text, const std::string& where);
// Applies `key.path=value` overrides (the value parsed as TOML, or taken as a string when it is
// not valid TOML), creating tables as needed.
void apply_override(toml::table& root, const std::string& assignment);
// Merges `overlay` into `root` key by key: a table merges into the table of the same key
// (created when absent), any other value replaces root's. Keys with dots stay single keys
// ("model.width" in a [grid]). Throws nothing.
void merge_toml(toml::table& root, const toml::table& overlay);

}  // namespace scaleinv
