#pragma once
// Sweep results produced elsewhere, imported into a sweep store (issue 60, "Import"; docs/predict.md
// "Importing results from elsewhere"): a table of runs (a published CSV such as Step Law's dense
// runs, JSON lines, a Python list of dicts or DataFrame) and a mapping of its columns become the
// points of a SQLite store with the schema SweepStore writes (sweep_store.h), which
// read_sweep_rows (brain/report/transfer.h), `scaleinv predict`, `transfer-report` and `sweep merge` read.
// Torch-free (the brain): the CLI's `scaleinv import-results` and Python's
// scaleinv.store.from_records both call import_results, so the two write the same points.
//
// What a point holds (one table row is one point; a grid point no row holds is simply absent):
//  - lr, lr_log2: the LR column (a positive finite number); param: the constant name (default
//    "imported": nothing is claimed about how the runs were parameterized; give "standard" when
//    the runs were, and transfer-report then judges the others against them) or the param column;
//    seed: the seed column (a whole number), else 0;
//  - width, depth: the scale axes named width / depth (positive whole numbers), else 0: the store's
//    meta holds `imported`, and read_sweep_rows accepts width 0 there only (reports then leave the
//    axis out of their titles, as for a Python sweep that never set depth);
//  - axes (JSON): every other scale axis and every hyperparameter axis, name -> the cell's text as
//    written (a JSON string: "2.15e9" stays "2.15e9" and reads back as that text);
//  - final_loss, min_loss: the loss column; NaN, inf or -inf (any spelling strtod takes) is a
//    diverged run: diverged 1, final_loss NULL, diverged_step -1. A row whose loss cell is empty
//    (missing) is a run without a result: skipped and counted (ImportSummary::skipped), never
//    stored as diverged. (A DataFrame writes a missing cell as NaN: drop such rows first.)
//  - config: "{}": an imported run has no resolved config, and the source lives in meta, so two
//    imports of one mapping from different sources (a paper's CSV and a file holding one more
//    cell) read as one sweep with --db a --db b;
//  - id: stable_hash (brain/util/stable_hash.h) of param, seed, the LR and every axis value, numbers in
//    their shortest round-trip form ("2.15e9" and "2150000000" are one point), so the same run
//    imported twice is one point, read once.
// Meta: schema, name (the file's stem), fingerprint (the stable hash of the store's layout: axis
// names, units and param; not of the data, so two imports of one layout merge and append), grid
// (JSON: each axis and its distinct values), window "1", units (JSON axis -> unit), scales and
// hparams (JSON lists of the axis names: which grid axes are scales, which hyperparameters), and `imported`:
// a JSON list with one record per import {file, sha256, source, format, mapping, rows, points,
// diverged, time (UTC)}.
//
// Writes are atomic: the store is built in a temporary file beside OUT (brain/util/atomic_file.h's
// unique_temp_path), switched out of WAL (one self-contained file) and renamed over OUT; on any
// error the temporary file is removed and OUT is as it was (no file when it did not exist).
//
// Throws UserError (brain/util/errors.h; file: the table's file, or "command line" for the mapping;
// field: the flag as the CLI spells it, renamed through InputNames for Python), before anything is
// written, for: a mapped column the table does not have (the columns it has listed); no lr, loss
// or scale mapping; an axis named twice or a reserved name (param, seed, lr); a table with no
// columns or no data rows with a loss; a loss cell that is not a number (naming the row and the
// value); an LR or scale cell that is empty, not a number,
// zero or negative (width/depth: not a whole number); a seed that is not a whole number; two rows
// of one point (naming both rows: data row 1 is the first after the header); OUT holding points
// that are not this same import without `append`, or with `append`: OUT not an imported store of
// the same layout (fingerprint), the same file already imported into it, or a point already there.
// OUT with a -wal file (a store open in another process, or not closed) is refused too.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace scaleinv {

// A table of runs: column names and rows of cells (text as written; nullopt: missing, e.g. an empty
// CSV field or a JSON null).
struct ResultTable {
  std::string file;    // where it came from, for errors and the store's meta ("python records")
  std::string format;  // "csv", "jsonl", "records"
  std::string sha256;  // the file's digest ("": import_results takes that of the table as JSON)
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> rows;  // each as long as columns
};

// Reads an RFC 4180 CSV file through libcsv (strict quoting; the first record is the header, the
// fields are kept as written but for the spaces around an unquoted field; empty lines are skipped).
// UserError naming the file: unreadable, malformed quoting (naming the data row), a header with an
// empty or repeated column name, a row with more fields than the header (a shorter row's missing
// fields are missing cells).
ResultTable read_csv_table(const std::string& path);
// Reads JSON lines: one object per non-empty line; the columns are the keys in order of first
// appearance; a string is its text, a number its JSON text (an integer exactly, a float in
// nlohmann's shortest round-trip form), true/false their names, null a missing cell. UserError
// naming the file and line for a line that is not a JSON object.
ResultTable read_jsonl_table(const std::string& path);
// The table of a file by format ("csv", "jsonl", or "" to take it from the extension: .jsonl,
// .ndjson and .json read as JSON lines, anything else as CSV). UserError (field --format) for
// another format.
ResultTable read_result_table(const std::string& path, const std::string& format);
// Python's records (scaleinv.store.from_records) as a table: JSON text {"columns": [names],
// "rows": [[cell, ...], ...]}, a cell a string or null (the Python side writes numbers with str()).
// UserError (field "records") when it is not that shape.
ResultTable records_table(const std::string& json_text);

struct ImportMapping {
  std::string lr, loss;                                     // column names (required)
  std::vector<std::pair<std::string, std::string>> scales;  // axis name -> column, as given (>= 1)
  std::vector<std::pair<std::string, std::string>> hparams; // axis name -> column (grid axes)
  std::map<std::string, std::string> units;                 // scale axis -> unit ("params", "tokens")
  std::string param = "imported";                           // the constant parameterization name
  std::string param_column, seed_column;                    // "" when not mapped
  std::string source;                                       // free text: URL, commit (meta only)
  bool append = false;                                      // add to an imported store of the same layout
};

struct ImportSummary {
  std::string out;
  int64_t rows = 0, points = 0, diverged = 0;  // table rows; points written (this import); of them diverged
  int64_t skipped = 0;                         // rows with an empty loss cell (not stored)
  int64_t total = 0;                           // points in OUT afterwards
  // Per scale axis (mapping order): value (as first written) -> rows, by increasing value.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, int64_t>>>> cells;
  std::map<std::string, std::string> units;    // the mapping's
  std::string fingerprint, sha256;
};

// Writes the table's rows into the store OUT (see the header comment); returns what it wrote.
ImportSummary import_results(const ResultTable& table, const ImportMapping& mapping, const std::string& out);

// The summary as the CLI prints it: rows and points, then per scale axis its values and their rows.
std::string import_summary_text(const ImportSummary& s);

// Whether PATH is a store import_results wrote (its meta holds `imported`); false for a file that
// is not a sweep store. Read-only.
bool is_imported_store(const std::string& path);

}  // namespace scaleinv
