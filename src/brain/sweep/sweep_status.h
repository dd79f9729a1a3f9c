#pragma once
// What a sweep's stores hold right now, read from another shell while it runs (issue 61:
// `scaleinv sweep status --db`): every store is opened read-only (SQLite's WAL lets a reader in
// while a writer commits), so looking never blocks or changes a running sweep. Torch-free.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace scaleinv {

// One store's finished points: their ids, how many diverged and how many raised (failures table).
struct StoreCounts {
  bool exists = false;
  std::set<std::string> ids;
  std::set<std::string> diverged, failed;
};

// Read-only; an absent file (or one with no points table yet: a store being created) counts as
// empty. UserError naming the file when it is not a SQLite database.
StoreCounts read_store_counts(const std::string& path);

// One row of the status table: a store (or a shard of a submission) and what it holds.
struct StatusRow {
  std::string what;           // "shard 3/8", "rung 2 shard 0/4", "merged store"
  int64_t expected = -1;      // points it should end with (-1: unknown)
  int64_t done = 0, diverged = 0, failed = 0;
  std::string state;          // "done", "running", "pending", "not started", "incomplete", ...
};

struct SweepStatus {
  std::string name, db;
  int64_t expected = -1;      // points of the whole sweep (-1: unknown, e.g. a search's later rungs)
  int64_t done = 0, diverged = 0, failed = 0, running = 0, pending = 0;
  std::vector<StatusRow> rows;
  std::vector<std::string> notes;  // e.g. "scheduler not reachable: task states unknown"
};

// The table `sweep status` prints: the totals, then a row per store, then what is missing.
std::string render_status(const SweepStatus& s);

// The status of a store alone (no submission beside it): its points against the grid size its
// meta table records. UserError naming --db when the file does not exist or is no sweep store.
SweepStatus store_status(const std::string& db_path);

}  // namespace scaleinv
