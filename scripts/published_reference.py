#!/usr/bin/env python3
"""Reference evaluation of LR / batch-size scaling laws on published sweep data.

Plain numpy + the csv module; no pandas, no scipy. This script is the
independent reference that scaleinv's C++ joint-law fit (`predict`) is tested
against, so every definition is spelled out here.

Data (docs/results/data/published/, provenance in README.md there):
  steplaw_dense  steplaw_dense.csv: Step Law dense runs (Li et al. 2025), scale
                 axes N (parameters) and D (tokens).
                 Split: fit on N < 1e9 (214M..537M, 15 cells); hold out the three
                 N = 1,073,741,824 cells (D = 2e10, 5.69e10, 1e11).
  steplaw_moe    steplaw_moe.csv: Step Law MoE runs. Every model has ~2.15e9
                 total parameters, so the model-scale axis is Na (activated
                 parameters, column Na); it plays the role of N below.
                 Split: fit on Na < 1e9 (188M, 233M, 590M; 12 cells); hold out
                 the four Na = 1,241,270,272 cells (D = 2e9, 4e9, 8e9, 2e10).

Definitions (all logs base 2; "doublings" = units of log2):
  run        one CSV row: scale axes (N, D), lr, bs (sequences of 2048 tokens),
             smooth_loss (the loss every statistic here uses).
  B          batch size in tokens = bs * 2048.
  cell       the runs sharing one (N, D).
  best       a cell's minimum smooth_loss.
  argmin     the cell's run with the minimum smooth_loss (ties, which do not
             occur in these files, go to the smaller lr, then the smaller bs).
  near-opt   the cell's runs with smooth_loss <= best * (1 + eps), eps = 0.0025
             by default (--eps). The argmin run is always one of them. (Step
             Law's own code keeps |loss/best - 1| < eps, strict; no run in
             these files lies exactly at the boundary, so both agree.)
  LR profile for each distinct lr measured in a cell: the minimum smooth_loss
             over the batch sizes measured at that lr. Only measured lrs are
             profile points (a cell may lack some grid values).
  B profile  the same with the roles swapped: for each distinct bs, the minimum
             over lrs.
  fits       ordinary least squares of y = log2 LR (or log2 B) on
             x = [1, log2 N, log2 D] (LR, and B "in (N, D)") or
             x = [1, log2 D] (B "in D"), using only the fitted cells:
               argmin    one point per cell: the argmin run's log2 lr (log2 B);
               nearopt   one point per near-optimal run (Step Law's way);
               nearmean  one point per cell: the mean of log2 lr (log2 B)
                         over the cell's near-optimal runs.
  interval   90% two-sided prediction interval of an OLS fit at x0:
               yhat(x0) +- t_{0.95, n-p} * s * sqrt(1 + x0' (X'X)^-1 x0),
             s^2 = RSS / (n - p), n points, p coefficients. For `nearopt`
             the points are not independent (several per cell), so its
             interval is nominal only; it is reported as computed.
  error      at a held-out cell: predicted log2 LR - the argmin run's log2 lr
             (doublings). Same for B with the argmin run's log2 B.
  covered    the held-out argmin log2 lr (log2 B) lies inside the interval
             (closed).
  regret     at a held-out cell: linearly interpolate the LR profile (loss
             against log2 lr, between the two measured neighbours) at the
             predicted log2 LR; regret = 100 * (interp / best - 1), in percent.
             NaN when the prediction lies outside [min, max] of the cell's
             measured lrs. B regret: the same on the B profile (log2 B).
  baselines  paper:   Step Law's published law, LR* = 1.79 N^-0.713 D^0.307 and
                      B* = 0.58 D^0.571 (B in tokens), i.e.
                      log2 LR* = log2(1.79) - 0.713 log2 N + 0.307 log2 D and
                      log2 B* = log2(0.58) + 0.571 log2 D. For the MoE set it
                      is applied with N = Na (this script's choice).
             carried: the argmin lr (and argmin B) of one fitted cell: among
                      the fitted cells with the largest N, the one whose log2 D
                      is nearest the held-out cell's (a tie goes to the larger
                      D). No interval.
  summary    per method: mean |error| over held-out cells; mean regret over the
             cells where it is not NaN (with the count); coverage k/n.

Usage:
  published_reference.py [--eps 0.0025] [--json] [--set steplaw_dense ...]
Without --json a markdown report is printed; with --json one JSON object
(every number above, per set) goes to stdout.
"""

import argparse
import csv
import json
import math
import os
import sys

import numpy as np

SEQ_LEN = 2048
HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "..", "docs", "results", "data", "published")

PAPER_LR = (1.79, -0.713, 0.307)  # LR* = c N^a D^b
PAPER_B = (0.58, 0.571)           # B*  = c D^b  (tokens)

SETS = {
    "steplaw_dense": dict(file="steplaw_dense.csv", n_col="N", n_name="N",
                          fit_max_n=1e9),
    "steplaw_moe": dict(file="steplaw_moe.csv", n_col="Na", n_name="Na",
                        fit_max_n=1e9),
}


# ---------------------------------------------------------------- statistics

def t_quantile(p, df):
    """Quantile of Student's t with df degrees of freedom (p > 0.5).

    CDF by Simpson integration of the density from 0 (exact to ~1e-12 for the
    range used), quantile by bisection."""
    if df <= 0:
        return float("nan")
    logc = (math.lgamma((df + 1) / 2.0) - math.lgamma(df / 2.0)
            - 0.5 * math.log(df * math.pi))

    def cdf(x):
        m = 4000
        xs = np.linspace(0.0, x, m + 1)
        f = np.exp(logc - (df + 1) / 2.0 * np.log1p(xs * xs / df))
        h = x / m
        integral = h / 3.0 * (f[0] + f[-1] + 4.0 * f[1:-1:2].sum() + 2.0 * f[2:-1:2].sum())
        return 0.5 + integral

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def ols(X, y):
    """OLS fit. Returns dict with coefficients, their SEs, s, df, (X'X)^-1."""
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    n, p = X.shape
    xtx_inv = np.linalg.inv(X.T @ X)
    beta = xtx_inv @ X.T @ y
    resid = y - X @ beta
    df = n - p
    s = math.sqrt(float(resid @ resid) / df) if df > 0 else float("nan")
    se = np.sqrt(np.diag(xtx_inv)) * s
    return dict(beta=beta, se=se, s=s, df=df, n=n, xtx_inv=xtx_inv)


def predict(fit, x0, level=0.90):
    x0 = np.asarray(x0, float)
    yhat = float(x0 @ fit["beta"])
    t = t_quantile(0.5 + level / 2.0, fit["df"])
    half = t * fit["s"] * math.sqrt(1.0 + float(x0 @ fit["xtx_inv"] @ x0))
    return yhat, half


# ---------------------------------------------------------------- data

def load(set_name):
    spec = SETS[set_name]
    path = os.path.join(DATA_DIR, spec["file"])
    runs = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            runs.append(dict(N=float(row[spec["n_col"]]), D=float(row["D"]),
                             lr=float(row["lr"]), bs=float(row["bs"]),
                             loss=float(row["smooth_loss"])))
    return runs


def cells_of(runs, eps):
    by = {}
    for r in runs:
        by.setdefault((r["N"], r["D"]), []).append(r)
    cells = []
    for (N, D), rs in sorted(by.items()):
        best_run = min(rs, key=lambda r: (r["loss"], r["lr"], r["bs"]))
        best = best_run["loss"]
        near = [r for r in rs if r["loss"] <= best * (1.0 + eps)]
        lr_prof = {}
        b_prof = {}
        for r in rs:
            lr_prof[r["lr"]] = min(lr_prof.get(r["lr"], math.inf), r["loss"])
            b_prof[r["bs"]] = min(b_prof.get(r["bs"], math.inf), r["loss"])
        cells.append(dict(
            N=N, D=D, runs=len(rs), best=best,
            argmin_lr=best_run["lr"], argmin_bs=best_run["bs"],
            log2_lr=math.log2(best_run["lr"]),
            log2_B=math.log2(best_run["bs"] * SEQ_LEN),
            near=[(math.log2(r["lr"]), math.log2(r["bs"] * SEQ_LEN)) for r in near],
            lr_profile=sorted((math.log2(k), v) for k, v in lr_prof.items()),
            B_profile=sorted((math.log2(k * SEQ_LEN), v) for k, v in b_prof.items()),
        ))
    return cells


def regret(profile, best, x):
    xs = [p[0] for p in profile]
    if not (xs[0] <= x <= xs[-1]):
        return float("nan")
    for (x0, l0), (x1, l1) in zip(profile, profile[1:]):
        if x0 <= x <= x1:
            w = 0.0 if x1 == x0 else (x - x0) / (x1 - x0)
            return 100.0 * ((l0 + w * (l1 - l0)) / best - 1.0)
    # x equals the only grid point
    return 100.0 * (profile[0][1] / best - 1.0)


# ---------------------------------------------------------------- evaluation

FIT_KINDS = ("argmin", "nearopt", "nearmean")


def design(cell, axes):
    row = [1.0]
    if "N" in axes:
        row.append(math.log2(cell["N"]))
    if "D" in axes:
        row.append(math.log2(cell["D"]))
    return row


def fit_points(cells, kind, target, axes):
    """Design matrix and targets for one fit. target: 'lr' or 'B'."""
    idx = 0 if target == "lr" else 1
    key = "log2_lr" if target == "lr" else "log2_B"
    X, y = [], []
    for c in cells:
        x = design(c, axes)
        if kind == "argmin":
            X.append(x)
            y.append(c[key])
        elif kind == "nearopt":
            for pt in c["near"]:
                X.append(x)
                y.append(pt[idx])
        elif kind == "nearmean":
            X.append(x)
            y.append(sum(pt[idx] for pt in c["near"]) / len(c["near"]))
    return X, y


def carried_cell(fitted, held):
    nmax = max(c["N"] for c in fitted)
    cand = [c for c in fitted if c["N"] == nmax]
    ld = math.log2(held["D"])
    return min(cand, key=lambda c: (abs(math.log2(c["D"]) - ld), -c["D"]))


def paper_pred(target, cell, axes):
    if target == "lr":
        c, a, b = PAPER_LR
        return math.log2(c) + a * math.log2(cell["N"]) + b * math.log2(cell["D"])
    c, b = PAPER_B
    return math.log2(c) + b * math.log2(cell["D"])


def evaluate_target(fitted, held, target, axes):
    """All methods for one target ('lr' with axes N,D; 'B' with D or N,D)."""
    key = "log2_lr" if target == "lr" else "log2_B"
    prof = "lr_profile" if target == "lr" else "B_profile"
    methods = {}
    for kind in FIT_KINDS:
        X, y = fit_points(fitted, kind, target, axes)
        f = ols(X, y)
        coef_names = ["a"] + ["b" + ax for ax in axes]
        rows = []
        for c in held:
            yhat, half = predict(f, design(c, axes))
            meas = c[key]
            rows.append(dict(N=c["N"], D=c["D"], predicted=yhat,
                             lo=yhat - half, hi=yhat + half, measured=meas,
                             error=yhat - meas,
                             covered=bool(yhat - half <= meas <= yhat + half),
                             regret_pct=regret(c[prof], c["best"], yhat)))
        methods["fit_" + kind] = dict(
            points=f["n"], df=f["df"], resid_sd=f["s"],
            coef={n: float(v) for n, v in zip(coef_names, f["beta"])},
            coef_se={n: float(v) for n, v in zip(coef_names, f["se"])},
            cells=rows)
    # baselines
    if target == "lr" or axes == ("D",):
        rows = []
        for c in held:
            yhat = paper_pred(target, c, axes)
            rows.append(dict(N=c["N"], D=c["D"], predicted=yhat, measured=c[key],
                             error=yhat - c[key],
                             regret_pct=regret(c[prof], c["best"], yhat)))
        methods["paper"] = dict(cells=rows)
    rows = []
    for c in held:
        src = carried_cell(fitted, c)
        yhat = src[key]
        rows.append(dict(N=c["N"], D=c["D"], predicted=yhat, measured=c[key],
                         error=yhat - c[key], from_N=src["N"], from_D=src["D"],
                         regret_pct=regret(c[prof], c["best"], yhat)))
    methods["carried"] = dict(cells=rows)
    for m in methods.values():
        cs = m["cells"]
        regs = [r["regret_pct"] for r in cs if not math.isnan(r["regret_pct"])]
        m["mean_abs_error"] = sum(abs(r["error"]) for r in cs) / len(cs)
        m["mean_regret_pct"] = sum(regs) / len(regs) if regs else float("nan")
        m["regret_cells"] = len(regs)
        if "covered" in cs[0]:
            m["covered"] = sum(r["covered"] for r in cs)
        m["held_out"] = len(cs)
    return methods


def evaluate(set_name, eps):
    spec = SETS[set_name]
    runs = load(set_name)
    cells = cells_of(runs, eps)
    fitted = [c for c in cells if c["N"] < spec["fit_max_n"]]
    held = [c for c in cells if c["N"] >= spec["fit_max_n"]]
    out = dict(set=set_name, file=spec["file"], n_axis=spec["n_name"], eps=eps,
               runs=len(runs), fit_rule="%s < %g" % (spec["n_name"], spec["fit_max_n"]),
               cells=[dict(N=c["N"], D=c["D"], runs=c["runs"], best=c["best"],
                           argmin_lr=c["argmin_lr"], argmin_bs=c["argmin_bs"],
                           log2_lr=c["log2_lr"], log2_B=c["log2_B"],
                           near_opt=len(c["near"]),
                           near_mean_log2_lr=sum(p[0] for p in c["near"]) / len(c["near"]),
                           near_mean_log2_B=sum(p[1] for p in c["near"]) / len(c["near"]),
                           held_out=c in held)
                      for c in cells],
               lr=evaluate_target(fitted, held, "lr", ("N", "D")),
               B_in_D=evaluate_target(fitted, held, "B", ("D",)),
               B_in_ND=evaluate_target(fitted, held, "B", ("N", "D")))
    return out


# ---------------------------------------------------------------- output

def fmt(x, spec="%+.3f"):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "NaN"
    return spec % x


def sci(x):
    return "%.4g" % x


def markdown(res):
    L = []
    n = res["n_axis"]
    L.append("## %s (%s): %d runs, %d cells, eps = %g, fitted on %s"
             % (res["set"], res["file"], res["runs"], len(res["cells"]), res["eps"],
                res["fit_rule"]))
    L.append("")
    L.append("| %s | D | runs | best smooth loss | argmin lr | argmin bs | log2 lr | log2 B | near-opt runs | near-opt mean log2 lr | held out |" % n)
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in res["cells"]:
        L.append("| %s | %s | %d | %.4f | %s | %d | %.3f | %.3f | %d | %.3f | %s |"
                 % (sci(c["N"]), sci(c["D"]), c["runs"], c["best"], sci(c["argmin_lr"]),
                    c["argmin_bs"], c["log2_lr"], c["log2_B"], c["near_opt"],
                    c["near_mean_log2_lr"], "yes" if c["held_out"] else ""))
    L.append("")
    for tkey, title in (("lr", "log2 LR* in (%s, D)" % n), ("B_in_D", "log2 B* (tokens) in D"),
                        ("B_in_ND", "log2 B* (tokens) in (%s, D)" % n)):
        methods = res[tkey]
        L.append("### %s" % title)
        L.append("")
        L.append("| method | points | coefficients (log2 units) +- SE | resid SD |")
        L.append("|---|---|---|---|")
        for name, m in methods.items():
            if "coef" not in m:
                continue
            co = ", ".join("%s = %+.4f +- %.4f" % (k, v, m["coef_se"][k]) for k, v in m["coef"].items())
            L.append("| %s | %d | %s | %.3f |" % (name, m["points"], co, m["resid_sd"]))
        L.append("")
        L.append("| method | %s | D | predicted [90%%] | measured | error | in interval | regret |" % n)
        L.append("|---|---|---|---|---|---|---|---|")
        for name, m in methods.items():
            for r in m["cells"]:
                pi = (" [%.3f, %.3f]" % (r["lo"], r["hi"])) if "lo" in r else ""
                if "from_N" in r:
                    pi = " (from %s=%s, D=%s)" % (n, sci(r["from_N"]), sci(r["from_D"]))
                cov = ("yes" if r["covered"] else "no") if "covered" in r else ""
                L.append("| %s | %s | %s | %.3f%s | %.3f | %s | %s | %s%% |"
                         % (name, sci(r["N"]), sci(r["D"]), r["predicted"], pi, r["measured"],
                            fmt(r["error"]), cov, fmt(r["regret_pct"], "%.4f")))
        L.append("")
        L.append("| method | mean abs error (doublings) | mean regret | coverage |")
        L.append("|---|---|---|---|")
        for name, m in methods.items():
            cov = "%d/%d" % (m["covered"], m["held_out"]) if "covered" in m else ""
            reg = fmt(m["mean_regret_pct"], "%.4f") + "%"
            if m["regret_cells"] != m["held_out"]:
                reg += " (%d of %d cells)" % (m["regret_cells"], m["held_out"])
            L.append("| %s | %.3f | %s | %s |" % (name, m["mean_abs_error"], reg, cov))
        L.append("")
    return "\n".join(L)


def jsonable(o):
    if isinstance(o, float) and math.isnan(o):
        return None
    if isinstance(o, dict):
        return {k: jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [jsonable(v) for v in o]
    return o


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eps", type=float, default=0.0025)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--set", action="append", choices=sorted(SETS))
    args = ap.parse_args(argv)
    sets = args.set or list(SETS)
    results = [evaluate(s, args.eps) for s in sets]
    if args.json:
        json.dump(jsonable({"sets": results}), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print("\n\n".join(markdown(r) for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
