#pragma once
// What the transfer analyses share (brain/report/transfer.cpp for the LR, brain/report/choice_transfer.cpp for
// a categorical choice): a loss table per seed and LR grid point, its seed-averaged curve, the
// best point on a curve, regret in percent, the joint seed bootstrap with its percentiles, and how
// a sweep row's keys read (its loss, an axis' value, what it holds fixed). Pure functions; nothing
// is read or written.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "brain/report/transfer.h"

namespace scaleinv::seed_curves {

// The integer key of a log2-LR grid point (micro-doublings), so that grid points compare exactly.
int64_t lr_key(double lr_log2);

// seed -> (lr key -> loss, +inf when diverged), for one curve.
using SeedTable = std::map<int64_t, std::map<int64_t, double>>;

// Every LR key run for any seed of `t`, ascending.
std::vector<int64_t> lr_keys(const SeedTable& t);

// Mean over `seeds` (a draw: repeats count again) per LR grid point in `lrs`; +inf where any of them
// diverged; grid points none of `seeds` ran are left out.
std::vector<LrPoint> mean_curve(const SeedTable& t, const std::vector<int64_t>& seeds, const std::vector<int64_t>& lrs);

// The finite point of least mean loss (nullptr when none).
const LrPoint* best_point(const std::vector<LrPoint>& pts);
// The grid point of `pts` nearest `lr` (ties: the smaller LR); nullptr when `pts` is empty.
const LrPoint* nearest_point(const std::vector<LrPoint>& pts, double lr);

// 100 (loss - best) / |best|; +inf when `loss` is infinite (diverged); NaN when either is NaN.
double regret_pct(double loss, double best);

// The largest of `v` (NaN entries skipped; +inf counts) and its index; {NaN, -1} when none.
std::pair<double, int> worst_of(const std::vector<double>& v);

// The q-quantile of `v` (linear interpolation between order statistics); NaN when empty.
double percentile(std::vector<double> v, double q);

// Draw 0 is `all_seeds` itself (the point estimate); then `bootstrap` resamples with replacement
// from a fixed, platform-independent generator seeded with `rng_seed` (none with one seed).
std::vector<std::vector<int64_t>> seed_draws(const std::vector<int64_t>& all_seeds, int bootstrap, uint64_t rng_seed);

// Paired seeds (two databases with different seed counts): the seeds `t` ran; those of `from` that
// every table of `tables` ran too (`from` itself when `tables` is empty); a draw without the seeds
// outside `keep` (its repeats kept).
std::set<int64_t> seeds_of(const SeedTable& t);
std::set<int64_t> seeds_also_in(std::set<int64_t> from, const std::vector<const SeedTable*>& tables);
std::vector<int64_t> draw_within(const std::vector<int64_t>& draw, const std::set<int64_t>& keep);

// A group's data: param -> axis value -> seed -> lr key -> loss (+inf when diverged).
using GroupData = std::map<std::string, std::map<double, SeedTable>>;

// What a group holds fixed while its axis varies: the scales not analysed and every other grid
// axis (fixed_scales and other_axes below).
struct Part {
  std::string fixed, context;
  bool operator<(const Part& o) const;
};

// One part's rows: the group's data and a row per curve (for the curve's config).
struct PartRows {
  GroupData data;
  std::map<std::string, std::map<double, const SweepRow*>> sample;  // param -> axis value -> a row of that curve
};

// Every seed in a group's data, ascending (the seeds its bootstrap resamples).
std::vector<int64_t> seeds_of(const GroupData& data);

// Whether `r` has a value on `axis` (width and depth: every row).
bool on_axis(const SweepRow& r, const std::string& axis);
// The rows of `table` on `axis`, grouped into curves: part -> param -> axis value -> seed -> LR.
// The rows are referenced, not copied: `table` must outlive the result.
std::map<Part, PartRows> partition_rows(const SweepTable& table, const std::string& axis);

// Whether a grid axis' value is a finite number ("0.1", "64"; not "cosine", not "").
bool is_number(const std::string& v);
// A row's loss for the analyses: final_loss, +inf when the run diverged or has none.
double row_loss(const SweepRow& r);
// The value of `axis` at `r`: its width, its depth, or a numeric grid axis' value.
double axis_value(const SweepRow& r, const std::string& axis);
// The model scales held fixed while `axis` varies: "depth D" (width), "width W" (depth), else
// "width W, depth D"; a scale of 0 (not set by a user model's sweep) is left out.
std::string fixed_scales(const SweepRow& r, const std::string& axis);
// Every grid axis of `r` but `axis`, as "k=v, k=v" ("" when none).
std::string other_axes(const SweepRow& r, const std::string& axis);
// A title's closing parenthesis: " (fixed, context)", " (fixed)", " (context)" or "".
std::string held_text(const std::string& fixed, const std::string& context);

}  // namespace scaleinv::seed_curves
