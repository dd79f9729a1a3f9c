// Sweep results produced elsewhere, imported into a sweep store (see import_results.h).
#include "brain/sweep/import_results.h"

#include <csv.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "brain/util/atomic_file.h"
#include "brain/util/errors.h"
#include "brain/util/sha256.h"
#include "brain/util/sqlite_db.h"
#include "brain/util/stable_hash.h"
#include "brain/util/writer_lock.h"
#include "brain/sweep/sweep_store.h"

namespace scaleinv {

namespace {

using nlohmann::json;
using Cell = std::optional<std::string>;

// ---- Readers -------------------------------------------------------------------------------------

// libcsv calls back per field and per record (C callbacks: nothing may throw through them, so a
// problem is kept in `error` and parsing stops).
struct CsvState {
  ResultTable* table = nullptr;
  std::vector<Cell> record;
  bool header_done = false;
  std::string error;
};

void csv_on_field(void* s, size_t len, void* data) {
  auto* st = static_cast<CsvState*>(data);
  if (!st->error.empty()) return;
  st->record.push_back(len == 0 ? Cell() : Cell(std::string(static_cast<const char*>(s), len)));
}

void csv_on_record(int, void* data) {
  auto* st = static_cast<CsvState*>(data);
  if (!st->error.empty()) return;
  ResultTable& t = *st->table;
  if (!st->header_done) {
    std::set<std::string> seen;
    for (size_t i = 0; i < st->record.size(); ++i) {
      const std::string name = st->record[i].value_or("");
      if (name.empty()) st->error = fmt::format("the header's column {} has no name", i + 1);
      else if (!seen.insert(name).second) st->error = fmt::format("the header names column '{}' twice", name);
      if (!st->error.empty()) break;
      t.columns.push_back(name);
    }
    st->header_done = true;
  } else if (st->record.size() > t.columns.size()) {
    st->error = fmt::format("data row {} has {} fields, the header {} columns", t.rows.size() + 1, st->record.size(),
                            t.columns.size());
  } else {
    st->record.resize(t.columns.size());  // a short row: its missing fields are missing cells
    t.rows.push_back(std::move(st->record));
  }
  st->record.clear();
}

std::string read_input_file(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    throw UserError(path, "FILE", "no such file", "give the CSV or JSON lines file of the runs to import");
  return read_file(path);
}

std::string ext_of(const std::string& path) {
  std::string e = std::filesystem::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e;
}

// A JSON value as a cell's text (see read_jsonl_table).
Cell json_cell(const json& v) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>().empty() ? Cell() : Cell(v.get<std::string>());
  return v.dump();
}

// ---- Numbers and points -------------------------------------------------------------------------

// The whole text as a number (strtod: "2.15e9", "nan", "inf" too); nullopt when it is not one.
std::optional<double> number_of(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0') return std::nullopt;
  return v;
}

// A number in its shortest round-trip form: the point id's spelling, so "2.15e9" and "2150000000"
// are one point.
std::string canonical(double v) { return fmt::format("{}", v); }

constexpr double kMaxWhole = 9007199254740992.0;  // 2^53: every whole number below is exact

bool is_reserved_axis(const std::string& name) {
  // The points' own columns, and the grid keys read_sweep_rows reads as coordinates (it would drop
  // an axis of that name) or refuses (search.trial).
  static const std::set<std::string> s = {"param", "param.name", "model.width", "model.depth", "lr", "lr_log2",
                                          "optim.lr", "seed", "train.seed", "data.seed", "search.trial"};
  return s.count(name) > 0;
}

struct ImportedPoint {
  std::string id, param;
  int64_t seed = 0, width = 0, depth = 0, row = 0;
  double lr = 0, loss = 0;
  bool diverged = false;
  json axes = json::object();            // axis -> text as written
  std::map<std::string, std::string> key;  // axis -> canonical text (the id's input; width/depth too)
};

// Column indexes of the mapping in the table.
struct Columns {
  size_t lr = 0, loss = 0;
  std::vector<std::pair<std::string, size_t>> scales, hparams;
  std::optional<size_t> param, seed;
};

std::string column_list(const ResultTable& t) {
  std::string s;
  for (const auto& c : t.columns) s += (s.empty() ? "" : ", ") + c;
  return s;
}

size_t require_column(const ResultTable& t, const std::string& flag, const std::string& column,
                      const std::string& example) {
  const auto it = std::find(t.columns.begin(), t.columns.end(), column);
  if (it == t.columns.end())
    throw UserError(t.file, flag, fmt::format("names column '{}', which is not in the table (its columns: {})", column,
                                              column_list(t)),
                    "name one of its columns, e.g. " + example);
  return static_cast<size_t>(it - t.columns.begin());
}

// The mapping's own checks (before any cell is read).
void check_mapping_names(const ImportMapping& m) {
  if (m.lr.empty())
    throw UserError("command line", "--lr", "missing: the column of each run's learning rate", input_name("--lr lr"));
  if (m.loss.empty())
    throw UserError("command line", "--loss", "missing: the column of each run's final loss", input_name("--loss loss"));
  if (m.scales.empty())
    throw UserError("command line", "--scale", "missing: at least one scale axis and its column",
                    input_name("--scale N=N (repeat for each axis: --scale D=D)"));
  std::set<std::string> names;
  for (const auto* list : {&m.scales, &m.hparams})
    for (const auto& [name, column] : *list) {
      const std::string flag = list == &m.scales ? "--scale" : "--hparam";
      if (name.empty() || column.empty())
        throw UserError("command line", flag, fmt::format("'{}={}' is not NAME=COLUMN", name, column),
                        input_name(flag == "--scale" ? "--scale N=N" : "--hparam batch_size=bs"));
      if (is_reserved_axis(name))
        throw UserError("command line", flag, fmt::format("'{}' is a point's own field, not an axis name", name),
                        fmt::format("give the axis another name (the LR is {}, the seed {}, the parameterization {} "
                                    "or {})",
                                    input_name("--lr"), input_name("--seed-column"), input_name("--param"),
                                    input_name("--param-column")));
      if (!names.insert(name).second)
        throw UserError("command line", flag, fmt::format("axis '{}' is named twice", name), "name each axis once");
    }
  for (const auto& [axis, unit] : m.units)
    if (std::none_of(m.scales.begin(), m.scales.end(), [&](const auto& s) { return s.first == axis; }))
      throw UserError("command line", "--unit", fmt::format("'{}' is not one of the scale axes", axis),
                      input_name("--unit N=params (for --scale N=COLUMN)"));
  if (m.param.empty() && m.param_column.empty())
    throw UserError("command line", "--param", "an empty name", input_name("--param standard"));
}

Columns resolve_columns(const ResultTable& t, const ImportMapping& m) {
  check_mapping_names(m);
  if (t.columns.empty())
    throw UserError(t.file, "FILE", "holds no columns (an empty file)",
                    "give a table whose first line names the columns, e.g. N,D,lr,bs,loss");
  Columns c;
  c.lr = require_column(t, "--lr", m.lr, input_name("--lr lr"));
  c.loss = require_column(t, "--loss", m.loss, input_name("--loss loss"));
  for (const auto& [name, column] : m.scales)
    c.scales.emplace_back(name, require_column(t, "--scale", column, input_name("--scale N=N")));
  for (const auto& [name, column] : m.hparams)
    c.hparams.emplace_back(name, require_column(t, "--hparam", column, input_name("--hparam batch_size=bs")));
  if (!m.param_column.empty()) c.param = require_column(t, "--param-column", m.param_column, input_name("--param-column param"));
  if (!m.seed_column.empty()) c.seed = require_column(t, "--seed-column", m.seed_column, input_name("--seed-column seed"));
  return c;
}

// A positive number from a cell (the LR, a scale); `whole`: a whole number up to 2^53 (width, depth).
double positive_cell(const ResultTable& t, const Cell& cell, int64_t row, const std::string& flag,
                     const std::string& column, const std::string& what, bool whole) {
  const std::optional<double> v = cell ? number_of(*cell) : std::nullopt;
  const bool ok = v && std::isfinite(*v) && *v > 0 && (!whole || (*v <= kMaxWhole && *v == std::floor(*v)));
  if (!ok)
    throw UserError(t.file, flag,
                    fmt::format("data row {}: column '{}' holds {}: {} must be a {}", row, column,
                                cell ? "'" + *cell + "'" : std::string("nothing"), what,
                                whole ? "whole number from 1 to 2^53" : "positive finite number"),
                    fmt::format("correct or drop the row (data row 1 is the first after the header), or map {} to "
                                "another column",
                                what));
  return *v;
}

// One row as a point (nullopt: its loss cell is empty, a run without a result).
std::optional<ImportedPoint> row_point(const ResultTable& t, const ImportMapping& m, const Columns& c, size_t i) {
  const auto& cells = t.rows[i];
  const int64_t row = static_cast<int64_t>(i) + 1;
  if (!cells[c.loss]) return std::nullopt;
  ImportedPoint p;
  p.row = row;
  const std::optional<double> loss = number_of(*cells[c.loss]);
  if (!loss)
    throw UserError(t.file, "--loss",
                    fmt::format("data row {}: column '{}' holds '{}', not a number", row, m.loss, *cells[c.loss]),
                    "map the loss to a column of numbers (nan or inf marks a diverged run; an empty cell, a run "
                    "without a result)");
  p.diverged = !std::isfinite(*loss);
  p.loss = *loss;
  p.lr = positive_cell(t, cells[c.lr], row, "--lr", m.lr, "the LR", false);
  p.key["lr"] = canonical(p.lr);
  for (const auto& [name, col] : c.scales) {
    const bool whole = name == "width" || name == "depth";
    const double v = positive_cell(t, cells[col], row, "--scale", t.columns[col], "scale " + name, whole);
    if (name == "width") p.width = static_cast<int64_t>(v);
    else if (name == "depth") p.depth = static_cast<int64_t>(v);
    else p.axes[name] = *cells[col];
    p.key[name] = canonical(v);
  }
  for (const auto& [name, col] : c.hparams) {
    if (!cells[col])
      throw UserError(t.file, "--hparam", fmt::format("data row {}: column '{}' (axis {}) is empty", row, t.columns[col], name),
                      "fill it in or drop the row (data row 1 is the first after the header)");
    p.axes[name] = *cells[col];
    const std::optional<double> v = number_of(*cells[col]);
    p.key[name] = v && std::isfinite(*v) ? canonical(*v) : *cells[col];
  }
  p.param = m.param;
  if (c.param) {
    if (!cells[*c.param])
      throw UserError(t.file, "--param-column", fmt::format("data row {}: column '{}' is empty", row, m.param_column),
                      "fill in the parameterization's name or drop the row");
    p.param = *cells[*c.param];
  }
  if (c.seed) {
    const std::optional<double> s = cells[*c.seed] ? number_of(*cells[*c.seed]) : std::nullopt;
    if (!s || !std::isfinite(*s) || *s != std::floor(*s) || std::fabs(*s) > kMaxWhole)
      throw UserError(t.file, "--seed-column",
                      fmt::format("data row {}: column '{}' holds {}, not a whole number", row, m.seed_column,
                                  cells[*c.seed] ? "'" + *cells[*c.seed] + "'" : std::string("nothing")),
                      "map the seed to a column of whole numbers, or leave --seed-column out (every run seed 0)");
    p.seed = static_cast<int64_t>(*s);
  }
  std::string id_text = fmt::format("imported|{}|seed={}", p.param, p.seed);
  for (const auto& [k, v] : p.key) id_text += "|" + k + "=" + v;
  p.id = stable_hash(id_text);
  return p;
}

std::string point_text(const ImportedPoint& p) {
  std::string s = fmt::format("param {}, seed {}", p.param, p.seed);
  for (const auto& [k, v] : p.key) s += fmt::format(", {} {}", k, v);
  return s;
}

struct ParsedTable {
  std::vector<ImportedPoint> points;
  int64_t skipped = 0;
};

ParsedTable parse_points(const ResultTable& t, const ImportMapping& m) {
  const Columns c = resolve_columns(t, m);
  ParsedTable out;
  std::map<std::string, int64_t> first_row;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    std::optional<ImportedPoint> p = row_point(t, m, c, i);
    if (!p) {
      ++out.skipped;
      continue;
    }
    const auto [it, fresh] = first_row.emplace(p->id, p->row);
    if (!fresh)
      throw UserError(t.file, "rows",
                      fmt::format("data rows {} and {} are one point ({}): a point is one run", it->second, p->row,
                                  point_text(*p)),
                      fmt::format("drop one of them, or map the column that tells them apart ({}, or {})",
                                  input_name("--seed-column"), input_name("--hparam NAME=COLUMN")));
    out.points.push_back(std::move(*p));
  }
  if (out.points.empty())
    throw UserError(t.file, "FILE",
                    t.rows.empty() ? std::string("holds no data rows")
                                   : fmt::format("none of its {} rows has a loss in column '{}'", t.rows.size(), m.loss),
                    "give a table with one row per run (data row 1 is the first after the header)");
  return out;
}

// The table as JSON (records_table's input shape): the digest of Python records.
json table_json(const ResultTable& t) {
  json rows = json::array();
  for (const auto& r : t.rows) {
    json row = json::array();
    for (const Cell& c : r) row.push_back(c ? json(*c) : json());
    rows.push_back(std::move(row));
  }
  return {{"columns", t.columns}, {"rows", rows}};
}

// ---- The store -----------------------------------------------------------------------------------

json mapping_json(const ImportMapping& m) {
  json scales = json::array(), hparams = json::array();
  for (const auto& [n, c] : m.scales) scales.push_back({n, c});
  for (const auto& [n, c] : m.hparams) hparams.push_back({n, c});
  return {{"lr", m.lr},           {"loss", m.loss},         {"scales", scales},
          {"hparams", hparams},   {"units", m.units},       {"param", m.param_column.empty() ? m.param : ""},
          {"param_column", m.param_column}, {"seed_column", m.seed_column}};
}

// The store's layout: what its points hold (axis names, units, where param comes from), not the
// data nor the columns they came from. Imports of one layout merge and append.
std::string layout_fingerprint(const ImportMapping& m) {
  std::set<std::string> scales, hparams;
  for (const auto& [n, c] : m.scales) scales.insert(n);
  for (const auto& [n, c] : m.hparams) hparams.insert(n);
  const json layout = {{"imported", 1}, {"scales", scales}, {"hparams", hparams}, {"units", m.units},
                       {"param", m.param_column.empty() ? "constant" : "column"}};
  return stable_hash(layout.dump());
}

// What OUT holds now (read-only).
struct OutState {
  int64_t points = 0;
  std::string name, fingerprint;
  json imports = json::array();  // the `imported` records; empty when not an imported store
  bool imported = false;
  std::set<std::string> ids;
};

OutState read_out_state(const std::string& out) {
  OutState s;
  if (!std::filesystem::exists(out)) return s;
  std::error_code ec;
  if (std::filesystem::file_size(out + "-wal", ec) > 0 && !ec)
    throw UserError(out, "--out", "has a -wal file: the store is open in another process, or was not closed",
                    "wait for that process, or give another --out");
  SqliteDb db(out, SqliteDb::Mode::ReadOnly);
  db.check_integrity();
  if (!db.has_table("points"))  // another program's database: never replaced
    throw UserError(out, "--out", "is a SQLite database but not a sweep store (no points table)",
                    "give another " + input_name("--out"));
  for (const auto& r : db.query("SELECT id FROM points")) s.ids.insert(sql_text(r[0], out, "points.id"));
  s.points = static_cast<int64_t>(s.ids.size());
  if (!db.has_table("meta")) return s;
  for (const auto& r : db.query("SELECT key, value FROM meta WHERE key IN ('name', 'fingerprint', 'imported')")) {
    const std::string k = sql_text(r[0], out, "meta.key"), v = sql_text(r[1], out, "meta." + k);
    if (k == "name") s.name = v;
    if (k == "fingerprint") s.fingerprint = v;
    if (k == "imported") {
      s.imports = json::parse(v, nullptr, false);
      s.imported = s.imports.is_array();
      if (!s.imported) s.imports = json::array();
    }
  }
  return s;
}

// Whether OUT is rebuilt from this import alone (false: the points are added to it); UserError
// when it may not be written (see the header comment).
bool rebuild_out(const OutState& s, const std::string& out, const ImportMapping& m, const std::string& sha,
                 const std::vector<ImportedPoint>& points) {
  if (s.points == 0) return true;
  const std::string holds = s.imported ? fmt::format("{} points imported from {}", s.points,
                                                     s.imports.empty() ? "?" : s.imports.back().value("file", "?"))
                                       : fmt::format("{} points of sweep '{}'", s.points, s.name);
  if (!m.append) {
    const bool same = s.imported && s.imports.size() == 1 && s.imports[0].value("sha256", "") == sha &&
                      s.imports[0].value("mapping", json()) == mapping_json(m);
    if (same) return true;  // the same import again: written anew, the same points
    throw UserError(out, "--out", "already holds " + holds,
                    fmt::format("give another {}, or add {} to add these rows to its points", input_name("--out"),
                                input_name("--append")));
  }
  if (!s.imported || s.fingerprint != layout_fingerprint(m))
    throw UserError(out, "--append",
                    fmt::format("holds {}, {}", holds,
                                s.imported ? "imported with other axes, units or param" : "not imported results"),
                    fmt::format("append only to a store imported with the same axes; or give another {} and read "
                                "both with --db A --db B",
                                input_name("--out")));
  for (const auto& rec : s.imports)
    if (rec.value("sha256", "") == sha)
      throw UserError(out, "--append",
                      fmt::format("already holds this table (sha256 {}, imported {})", sha, rec.value("time", "?")),
                      "nothing to add");
  for (const auto& p : points)
    if (s.ids.count(p.id))
      throw UserError(out, "--append",
                      fmt::format("already holds the point of data row {} ({})", p.row, point_text(p)),
                      fmt::format("drop the row, or import into another {} and read both with --db A --db B (a "
                                  "point in both is read once, from the first)",
                                  input_name("--out")));
  return false;
}

// The temporary store: removed (with SQLite's side files) unless kept.
struct TempStore {
  std::string path;
  bool keep = false;
  ~TempStore() {
    if (keep) return;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) ::unlink((path + suffix).c_str());
  }
};

void insert_points(SqliteDb& db, const std::string& name, const std::vector<ImportedPoint>& points) {
  const std::string now = utc_now();
  const std::string sql =
      "INSERT INTO points (id, sweep, param, width, depth, lr, lr_log2, seed, axes, config, final_loss, "
      "final_val_loss, min_loss, diverged, diverged_step, steps_done, wall_s, items_per_s, unigram_entropy, curve, "
      "shard, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '{}', ?, NULL, ?, ?, -1, 0, NULL, NULL, NULL, '[]', '', ?)";
  for (const auto& p : points) {
    const SqlValue loss = p.diverged ? SqlValue(nullptr) : SqlValue(p.loss);
    db.run(sql, {p.id, name, p.param, p.width, p.depth, p.lr, std::log2(p.lr), p.seed, p.axes.dump(), loss, loss,
                 static_cast<int64_t>(p.diverged ? 1 : 0), now});
  }
}

// Every axis of the store's points and its distinct values (meta.grid).
json grid_of(SqliteDb& db) {
  // axis -> (value, text) ordered by value; text (an hparam such as a schedule's name) after numbers
  std::map<std::string, std::set<std::pair<double, std::string>>> values;
  for (const auto& r : db.query("SELECT width, depth, axes FROM points")) {
    for (int i = 0; i < 2; ++i)
      if (const auto* v = std::get_if<int64_t>(&r[i]); v && *v > 0)
        values[i == 0 ? "width" : "depth"].emplace(static_cast<double>(*v), std::to_string(*v));
    const json axes = json::parse(sql_text(r[2], db.path(), "points.axes"), nullptr, false);
    if (axes.is_object())
      for (const auto& [k, v] : axes.items()) {
        const std::string text = v.is_string() ? v.get<std::string>() : v.dump();
        const std::optional<double> x = number_of(text);
        values[k].emplace(x ? *x : HUGE_VAL, text);
      }
  }
  json axes = json::array();
  for (const auto& [k, vals] : values) {
    json list = json::array();
    for (const auto& [x, text] : vals) list.push_back(text);
    axes.push_back({{"key", k}, {"values", list}});
  }
  return axes;
}

void write_meta(SqliteDb& db, const std::string& name, const ImportMapping& m, const json& imports) {
  auto put = [&](const std::string& k, const std::string& v) {
    db.run("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", {k, v});
  };
  const int64_t total = sql_int(db.query("SELECT COUNT(*) FROM points")[0][0], db.path(), "points");
  put("schema", "1");
  put("name", name);
  put("fingerprint", layout_fingerprint(m));
  put("grid", json({{"axes", grid_of(db)}, {"points", total}}).dump());
  put("window", "1");
  put("units", json(m.units).dump());
  // Which grid axes are scales and which hyperparameters (re-tuned at every cell, not fitted as
  // a scale): read by predict's joint laws (brain/report/joint_law.h).
  std::set<std::string> scales, hparams;
  for (const auto& [n, c] : m.scales) scales.insert(n);
  for (const auto& [n, c] : m.hparams) hparams.insert(n);
  put("scales", json(scales).dump());
  put("hparams", json(hparams).dump());
  put("imported", imports.dump());
  put("points_written", std::to_string(total));
}

ImportSummary summarize(const ResultTable& t, const ImportMapping& m, const ParsedTable& parsed) {
  ImportSummary s;
  s.rows = static_cast<int64_t>(t.rows.size());
  s.points = static_cast<int64_t>(parsed.points.size());
  s.skipped = parsed.skipped;
  for (const auto& p : parsed.points) s.diverged += p.diverged ? 1 : 0;
  for (const auto& [axis, column] : m.scales) {
    std::map<double, std::pair<std::string, int64_t>> by_value;
    for (const auto& p : parsed.points) {
      const double v = std::strtod(p.key.at(axis).c_str(), nullptr);
      const std::string text = axis == "width" ? std::to_string(p.width)
                               : axis == "depth" ? std::to_string(p.depth)
                                                 : p.axes.at(axis).get<std::string>();
      auto& e = by_value.emplace(v, std::make_pair(text, int64_t{0})).first->second;
      ++e.second;
    }
    std::vector<std::pair<std::string, int64_t>> cells;
    for (const auto& [v, e] : by_value) cells.push_back(e);
    s.cells.emplace_back(axis, std::move(cells));
  }
  s.fingerprint = layout_fingerprint(m);
  s.units = m.units;
  return s;
}

}  // namespace

ResultTable read_csv_table(const std::string& path) {
  std::string text = read_input_file(path);
  ResultTable t;
  t.file = path;
  t.format = "csv";
  t.sha256 = sha256_hex(text);
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // a UTF-8 byte order mark (spreadsheets write one)
  csv_parser parser;
  if (csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI) != 0)
    throw UserError(path, "FILE", "cannot start the CSV parser (out of memory)", "free memory and retry");
  CsvState st;
  st.table = &t;
  const size_t done = csv_parse(&parser, text.data(), text.size(), csv_on_field, csv_on_record, &st);
  const bool parse_failed = done != text.size() || csv_fini(&parser, csv_on_field, csv_on_record, &st) != 0;
  const std::string why = parse_failed ? csv_strerror(csv_error(&parser)) : "";
  csv_free(&parser);
  if (!st.error.empty()) throw UserError(path, "FILE", st.error, "give an RFC 4180 CSV whose first line names the columns");
  if (parse_failed)
    throw UserError(path, "FILE", fmt::format("not a valid CSV near data row {}: {}", t.rows.size() + 1, why),
                    "quote a field holding commas, quotes or line breaks with \"...\", a quote inside as \"\"");
  return t;
}

ResultTable read_jsonl_table(const std::string& path) {
  const std::string text = read_input_file(path);
  ResultTable t;
  t.file = path;
  t.format = "jsonl";
  t.sha256 = sha256_hex(text);
  std::istringstream in(text);
  std::string line;
  std::vector<json> objects;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (!j.is_object())
      throw UserError(path, "FILE", fmt::format("line {} is not a JSON object", n),
                      "write one object per line, e.g. {\"N\": 2.15e9, \"lr\": 0.001, \"loss\": 2.41}");
    for (const auto& [k, v] : j.items())
      if (std::find(t.columns.begin(), t.columns.end(), k) == t.columns.end()) t.columns.push_back(k);
    objects.push_back(std::move(j));
  }
  for (const json& j : objects) {
    std::vector<Cell> row;
    for (const auto& c : t.columns) row.push_back(j.contains(c) ? json_cell(j.at(c)) : Cell());
    t.rows.push_back(std::move(row));
  }
  return t;
}

ResultTable read_result_table(const std::string& path, const std::string& format) {
  const std::string f = format.empty() ? (ext_of(path) == ".jsonl" || ext_of(path) == ".ndjson" || ext_of(path) == ".json"
                                              ? "jsonl"
                                              : "csv")
                                       : format;
  if (f == "csv") return read_csv_table(path);
  if (f == "jsonl") return read_jsonl_table(path);
  throw UserError("command line", "--format", fmt::format("'{}' is not a format read here", format),
                  "use csv or jsonl (Parquet: read it with pandas and call scaleinv.store.from_records)");
}

ResultTable records_table(const std::string& json_text) {
  const json j = json::parse(json_text, nullptr, false);
  const bool shape = j.is_object() && j.contains("columns") && j["columns"].is_array() && j.contains("rows") &&
                     j["rows"].is_array();
  if (!shape) throw UserError("command line", "records", "not a table of columns and rows", "pass a list of dicts or a DataFrame");
  ResultTable t;
  t.file = "command line";  // errors name the caller (scaleinv.store.from_records; brain/util/errors.h InputNames)
  t.format = "records";
  for (const auto& c : j["columns"]) {
    if (!c.is_string()) throw UserError("command line", "records", "a column name is not a string: " + c.dump(), "name columns with strings");
    t.columns.push_back(c.get<std::string>());
  }
  for (const auto& r : j["rows"]) {
    if (!r.is_array() || r.size() != t.columns.size())
      throw UserError("command line", "records", "a row does not hold one cell per column", "pass a list of dicts or a DataFrame");
    std::vector<Cell> row;
    for (const auto& v : r) row.push_back(json_cell(v));
    t.rows.push_back(std::move(row));
  }
  return t;
}

ImportSummary import_results(const ResultTable& table, const ImportMapping& mapping, const std::string& out) {
  if (out.empty()) throw UserError("command line", "--out", "missing", input_name("--out runs/imported.db"));
  const ParsedTable parsed = parse_points(table, mapping);  // every refusal of the input comes first
  const std::string sha = table.sha256.empty() ? sha256_hex(table_json(table).dump()) : table.sha256;
  refuse_protected_input(out);
  ensure_parent_dir(out, "--out");
  WriterLock lock;  // as a sweep's: one writer of OUT at a time
  if (const auto holder = lock.try_acquire(out + ".lock", "--out"))
    throw UserError(out, "--out", fmt::format("another process{} is writing this store", holder->empty() ? "" : " (" + *holder + ")"),
                    "wait for it to finish, or give another " + input_name("--out"));
  const OutState state = read_out_state(out);
  const bool rebuild = rebuild_out(state, out, mapping, sha, parsed.points);
  json imports = rebuild ? json::array() : state.imports;
  ImportSummary s = summarize(table, mapping, parsed);
  s.out = out;
  s.sha256 = sha;
  imports.push_back({{"file", table.format == "records" ? "records" : table.file}, {"sha256", sha}, {"source", mapping.source}, {"format", table.format},
                     {"mapping", mapping_json(mapping)}, {"rows", s.rows}, {"points", s.points},
                     {"diverged", s.diverged}, {"skipped", s.skipped}, {"time", utc_now()}});
  const std::string name = !rebuild && !state.name.empty()
                               ? state.name
                               : std::filesystem::path(table.format == "records" ? out : table.file).stem().string();
  TempStore tmp{unique_temp_path(out)};
  if (!rebuild) {
    SqliteDb src(out, SqliteDb::Mode::ReadOnly);
    src.run("VACUUM INTO ?", {tmp.path});  // a copy of OUT to add to; OUT stays as it is until the rename
  }
  {
    SweepStore store(tmp.path);  // the sweep store's own schema
    SqliteDb& db = store.db();
    db.begin();
    insert_points(db, name, parsed.points);
    write_meta(db, name, mapping, imports);
    db.commit();
    s.total = sql_int(db.query("SELECT COUNT(*) FROM points")[0][0], tmp.path, "points");
    db.exec("PRAGMA journal_mode=DELETE");  // one self-contained file to rename: no -wal beside it
  }
  if (std::rename(tmp.path.c_str(), out.c_str()) != 0)
    throw UserError(out, "--out", std::string("cannot replace the store: ") + std::strerror(errno),
                    "give a writable " + input_name("--out"));
  tmp.keep = true;
  return s;
}

std::string import_summary_text(const ImportSummary& s) {
  std::string text = fmt::format("{} rows read: {} points written ({} diverged){}; {} points in {}\n", s.rows, s.points,
                                 s.diverged,
                                 s.skipped ? fmt::format(", {} rows with an empty loss skipped", s.skipped) : "",
                                 s.total, s.out);
  text += "\n| scale | values | rows per value |\n|---|---|---|\n";
  for (const auto& [axis, cells] : s.cells) {
    std::string per;
    for (const auto& [v, n] : cells) per += fmt::format("{}{}: {}", per.empty() ? "" : "; ", v, n);
    const auto unit = s.units.find(axis);
    text += fmt::format("| {}{} | {} | {} |\n", axis, unit == s.units.end() ? "" : " (" + unit->second + ")",
                        cells.size(), per);
  }
  return text;
}

bool is_imported_store(const std::string& path) {
  try {
    SqliteDb db(path, SqliteDb::Mode::ReadOnly);
    return db.has_table("meta") && !db.query("SELECT 1 FROM meta WHERE key = 'imported'").empty();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace scaleinv
