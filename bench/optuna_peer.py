"""optuna's TPE with its successive-halving pruner against scaleinv.search's halving and hyperband, on
the same objective with the same budget, on this machine (issue 59).

The objective: examples/python/nanogpt_transfer.py's GPT (byte vocab, 2 blocks, d_head 32) at width 64,
context 32, batch 16, on KJV bytes, trained for 243 steps under mup through scaleinv.apply (AdamW,
betas 0.9/0.95, linear warmup over 10% of the run then cosine decay to 0.1 LR, one CPU thread); the
loss is the held-out loss after the run (128 fixed windows of the last 10% of the bytes). Searched:
lr_log2 in [-12, -4] (uniform, so the LR is log-uniform), init_scale in [0.25, 4] (log; multiplies every
matrix after apply's init) and out_mult in [0.25, 8] (log; multiplies the logits). Every run, whichever
tool asks for it, is built by the same code as scaleinv.search's own (torch.manual_seed(0) for the base
and delta shapes, torch.manual_seed(train seed) for the model, scaleinv.apply, then `train`), on the
same batches (training seed 0 during the searches): the same cost per step and, for the same values
and length, the same loss bit for bit (checked at the end of every run).

The budget is counted in training steps. Rungs are 27, 81 and 243 steps (eta 3):
  - scaleinv halving: 27 trials (27 at 27 steps, 9 at 81, 3 at 243; every rung a fresh run whose
    schedule spans its own length): 2187 steps, 9 full runs' worth;
  - scaleinv hyperband: 9 trials in its first bracket (its three brackets: 17 trials, 2106 steps);
  - optuna: TPESampler(seed=s) and SuccessiveHalvingPruner(min_resource=27, reduction_factor=3), in
    memory; a trial is one 243-step run that reports its held-out loss after steps 27 and 81 and is
    stopped when should_prune() says so (a pruned trial costs what it trained). New trials start
    until the steps spent reach halving's 2187; optuna's result at a budget B is its best completed
    trial among those that had finished when B steps were spent (so it is read at halving's and at
    hyperband's own spend);
  - optuna with RandomSampler(seed=s) and the same pruner: which of optuna's two parts (the sampler
    that learns from the trials so far, or the pruning by continued runs) makes the difference;
  - scaleinv halving whose rung runs keep the full run's schedule (the space's own hyperparameter
    schedule_steps = 243: a 27-step rung is the first 27 steps of the 243-step run, warmup and decay
    as there, not a 27-step run with its own warmup and decay): is it the rungs' measure?
Search seeds 0..4 (scaleinv's search.seed = s; optuna's TPESampler(seed=s)), each (tool, seed) in a
fresh process, timed from the search call. Then every best configuration is retrained at 243 steps on
training seeds 1, 2, 3 (batches and inits the search never saw) and judged by the mean held-out loss:
a best value found on seed 0 alone carries seed 0's luck.

    flock /tmp/scaleinv-pip.lock build/venv/bin/pip install optuna==5.0.0  # SQLAlchemy, alembic,
                                      # colorlog, Mako; --dry-run first: it must not touch torch
    PYTHONPATH=python:build/python build/venv/bin/python bench/optuna_peer.py [--quick] [--seeds 5]
        [--json out.json]
    ... bench/optuna_peer.py --rung-proxy out.json   # what a rung measures, for the winners in out.json
Runs after `bash scripts/setup.sh` (which caches the KJV text). A full run took 16 minutes on two
shared cores (load 2-4); --quick (width 32, rungs 3/9/27, 2 seeds, 1 re-evaluation seed) is about a minute.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SPACE = {"lr_log2": {"from": -12, "to": -4},
         "init_scale": {"from": 0.25, "to": 4, "log": True},
         "out_mult": {"from": 0.25, "to": 8, "log": True}}
TOOLS = ("scaleinv-halving", "scaleinv-hyperband", "scaleinv-halving-prefix", "optuna-tpe-sha", "optuna-random-sha")


def config(quick):
    if quick:
        return {"width": 32, "seq": 32, "batch": 16, "steps": 27, "min_steps": 3, "eta": 3,
                "halving_trials": 9, "hyperband_trials": 3, "eval_windows": 64}
    return {"width": 64, "seq": 32, "batch": 16, "steps": 243, "min_steps": 27, "eta": 3,
            "halving_trials": 27, "hyperband_trials": 9, "eval_windows": 128}


# ------------------------------------------------------------------------------- the objective (worker)
class Objective:
    """The model, the data and one training run, as scaleinv.search builds and trains each point."""

    def __init__(self, cfg):
        import torch
        sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
        import nanogpt_transfer as ng
        self.torch, self.ng, self.cfg = torch, ng, cfg
        torch.set_num_threads(1)
        self.train_bytes, self.heldout = ng.split(ng.load_bytes())
        self.eval_offsets = ng.eval_offsets(len(self.heldout), cfg["seq"], cfg["eval_windows"])
        self.steps_spent = 0
        self.train_s = 0.0  # inside train
        self.run_s = 0.0    # from the model's construction to train's end (apply included): a run's cost
        self._t_build = None

    def make_model(self, width):
        self._t_build = time.perf_counter()
        return self.ng.GPT(width, depth=2, seq_len=self.cfg["seq"])

    def evaluate(self, model):
        return self.ng.evaluate(model, self.heldout, self.eval_offsets, self.cfg["seq"], 64)

    def train(self, model, opt, hp, steps, report=None):
        """One run of `steps` steps; report(step, held-out loss) after each step in hp's rungs (optuna's
        pruning: it returns True to stop). The held-out loss after the run, or nan if it diverged."""
        torch, ng = self.torch, self.ng
        t0 = time.perf_counter()
        try:
            model.set_attn_logit(opt.scaleinv_plan["shifted"]["attn_logit"])
            model.out_mult = hp["out_mult"]
            with torch.no_grad():
                for p in model.parameters():
                    if p.dim() == 2:
                        p.mul_(hp["init_scale"])
            for g in opt.param_groups:
                g["betas"] = (0.9, 0.95)
            span = hp.get("schedule_steps", steps)  # the schedule's length: the run's own, or (prefix) the full run's
            warmup = max(1, round(0.1 * span))
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: ng.lr_factor(s, span, warmup))
            offsets = ng.train_offsets(len(self.train_bytes), self.cfg["seq"], steps, self.cfg["batch"], hp["seed"])
            rungs = set(hp.get("report_at", ()))
            for step in range(steps):
                x, y = ng.windows(self.train_bytes, offsets[step], self.cfg["seq"])
                loss = model(x, y)
                self.steps_spent += 1
                if not math.isfinite(loss.item()):
                    return float("nan")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                if report is not None and step + 1 in rungs and report(step + 1, self.evaluate(model)):
                    return None  # pruned
            return self.evaluate(model)
        finally:
            t1 = time.perf_counter()
            self.train_s += t1 - t0
            self.run_s += t1 - self._t_build

    def shapes(self):
        """scaleinv.sweep's base and delta models: built under torch.manual_seed(0), the base at the
        space's width, the delta at twice it (python/scaleinv/_sweep.py)."""
        torch = self.torch
        with torch.random.fork_rng():
            torch.manual_seed(0)
            w = self.cfg["width"]
            return {"base": self.make_model(w), "delta": self.make_model(2 * w)}

    def run(self, values, seed, steps, report=None, report_at=()):
        """One run as scaleinv.search's train_point makes it: seed, model, scaleinv.apply, train."""
        import scaleinv
        torch = self.torch
        if not hasattr(self, "_shapes"):
            self._shapes = self.shapes()
        hp = dict(values, seed=seed, steps=steps, lr=2.0 ** values["lr_log2"], report_at=report_at)
        torch.manual_seed(seed)
        model = self.make_model(self.cfg["width"])
        opt = scaleinv.apply(model, base=self._shapes["base"], delta=self._shapes["delta"], param="mup",
                             optimizer="adamw", lr=hp["lr"], weight_decay=0.0)
        return self.train(model, opt, hp, steps, report)


def scaleinv_search(cfg, method, seed):
    import scaleinv
    obj = Objective(cfg)
    prefix = method.endswith("-prefix")
    method = method.split("-")[0]
    trials = cfg["halving_trials"] if method == "halving" else cfg["hyperband_trials"]
    fixed = {"param": "mup", "steps": cfg["steps"], "width": cfg["width"], "seed": 0}
    if prefix:  # every rung's run is the first `steps` steps of the full run's schedule
        fixed["schedule_steps"] = cfg["steps"]
    space = {"fixed": fixed,
             "search": {"method": method, "trials": trials, "eta": cfg["eta"], "min_steps": cfg["min_steps"],
                        "seed": seed, "space": SPACE}}

    def train(model, opt, hp, steps):
        return {"loss": obj.train(model, opt, hp, steps)}

    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        r = scaleinv.search(obj.make_model, train, space, db=os.path.join(d, "s.db"), progress=False)
        wall = time.perf_counter() - t0
    best = next(t for t in r.ranking if t["status"] == "ok")
    assert best["steps"] == cfg["steps"], best
    return {"best_loss": best["mean_loss"], "best": {k: best["values"][k] for k in SPACE},
            "steps": obj.steps_spent, "runs": r["run"], "trials": len(r.ranking), "wall_s": wall,
            "train_s": obj.train_s, "run_s": obj.run_s, "diverged": r["diverged"]}


def optuna_search(cfg, seed, budget, sampler="tpe"):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    obj = Objective(cfg)
    rungs = [cfg["min_steps"] * cfg["eta"] ** k for k in range(10)]
    report_at = [r for r in rungs if r < cfg["steps"]]
    finished = []  # (steps spent when the trial ended, its final loss or None)

    def objective(trial):
        values = {"lr_log2": trial.suggest_float("lr_log2", -12, -4),
                  "init_scale": trial.suggest_float("init_scale", 0.25, 4, log=True),
                  "out_mult": trial.suggest_float("out_mult", 0.25, 8, log=True)}

        def report(step, loss):
            trial.report(loss, step)
            return trial.should_prune()

        loss = obj.run(values, 0, cfg["steps"], report, report_at)
        finished.append((obj.steps_spent, loss))
        if loss is None:
            raise optuna.TrialPruned()
        return loss  # nan: optuna records the trial as failed (diverged)

    def stop(study, trial):
        if obj.steps_spent >= budget:
            study.stop()

    sampler = optuna.samplers.TPESampler(seed=seed) if sampler == "tpe" else optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler,
                                pruner=optuna.pruners.SuccessiveHalvingPruner(
                                    min_resource=cfg["min_steps"], reduction_factor=cfg["eta"],
                                    min_early_stopping_rate=0))
    t0 = time.perf_counter()
    obj._shapes = obj.shapes()  # inside the timed call, as scaleinv.search builds its own
    study.optimize(objective, n_trials=100000, callbacks=[stop])
    wall = time.perf_counter() - t0
    states = [t.state.name for t in study.trials]
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    best = min(complete, key=lambda t: t.value)
    return {"best_loss": best.value, "best": dict(best.params), "steps": obj.steps_spent, "runs": len(study.trials),
            "trials": len(study.trials), "wall_s": wall, "train_s": obj.train_s,
            "run_s": obj.run_s, "complete": states.count("COMPLETE"), "pruned": states.count("PRUNED"), "failed": states.count("FAIL"),
            "finished": finished}


def reevaluate(cfg, configs, seeds):
    """Each configuration retrained at full length on each training seed: the mean held-out loss."""
    obj = Objective(cfg)
    out = []
    for values in configs:
        losses = [obj.run(values, s, cfg["steps"]) for s in seeds]
        out.append({"losses": losses, "mean": statistics.fmean(losses) if all(map(math.isfinite, losses))
                    else float("inf")})
    return out


def check_identical(cfg, values, stored):
    """scaleinv's stored best loss reproduced by the objective optuna calls: the same loss bit for bit."""
    return Objective(cfg).run(values, 0, cfg["steps"]) - stored


def spearman(a, b):
    def ranks(x):
        r = [0] * len(x)
        for k, i in enumerate(sorted(range(len(x)), key=lambda i: x[i])):
            r[i] = k
        return r
    ra, rb, n = ranks(a), ranks(b), len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def rung_proxy(path, quick):
    """What a rung measures: for the best configurations of halving and optuna TPE in a --json file,
    the loss of a complete short run (scaleinv's rung) and the loss at that step of the full run
    (optuna's report), against the full run's loss, as Spearman correlations."""
    cfg = config(quick)
    with open(path) as f:
        res = json.load(f)["results"]
    obj = Objective(cfg)
    rungs = [cfg["min_steps"] * cfg["eta"] ** k for k in range(10)]
    rungs = [r for r in rungs if r < cfg["steps"]]
    rows = []
    for tool in ("scaleinv-halving", "optuna-tpe-sha"):
        for r in res[tool]:
            v = r["best"]
            fresh = [obj.run(v, 0, k) for k in rungs]
            at = {}
            final = obj.run(v, 0, cfg["steps"], lambda k, loss: at.__setitem__(k, loss) or False, rungs)
            rows.append((fresh, [at[k] for k in rungs], final))
            print(f"  {tool:18s} {fmt_values(v):38s} " + " ".join(
                f"{k}: run {f:.4f}, of {cfg['steps']} {p:.4f};" for k, f, p in zip(rungs, fresh, at.values()))
                  + f" full {final:.4f}", flush=True)
    finals = [row[2] for row in rows]
    for i, k in enumerate(rungs):
        print(f"  Spearman with the full run's loss: a {k}-step run {spearman([row[0][i] for row in rows], finals):+.2f}, "
              f"step {k} of the full run {spearman([row[1][i] for row in rows], finals):+.2f}")


def worker(a):
    cfg = config(a.quick)
    if a.worker == "reeval":
        job = json.loads(sys.stdin.read())
        res = {"reeval": reevaluate(cfg, job["configs"], job["seeds"]),
               "identical_diff": check_identical(cfg, job["check"]["values"], job["check"]["loss"])}
    elif a.worker in ("optuna-tpe", "optuna-random"):
        res = optuna_search(cfg, a.seed, a.budget, a.worker[7:])
    else:
        res = scaleinv_search(cfg, a.worker, a.seed)
    print("RESULT " + json.dumps(res))


# --------------------------------------------------------------------------------------------- driver
def spawn(args, stdin=None):
    # the caller's PYTHONPATH when it names scaleinv (e.g. a copy of python/ and build/python/ that a
    # rebuild in this tree cannot replace mid-run), else this tree's
    env = dict(os.environ)
    if not env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), os.path.join(ROOT, "build", "python")])
    p = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, input=stdin, capture_output=True,
                       text=True, env=env)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if p.returncode != 0 or line is None:
        sys.exit(f"optuna_peer: worker {' '.join(args)} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def ms(xs, digits=4):
    xs = [x for x in xs if math.isfinite(x)]
    if not xs:
        return "n/a"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.fmean(xs):.{digits}f} ± {sd:.{digits}f}"


def fmt_values(v):
    return f"lr 2^{v['lr_log2']:.2f}, init {v['init_scale']:.2f}, out {v['out_mult']:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a tiny run (width 32, rungs 3/9/27, 2 seeds)")
    ap.add_argument("--seeds", type=int, default=None, help="search seeds 0..N-1 (default 5; --quick 2)")
    ap.add_argument("--reeval-seeds", default=None, help="training seeds of the re-evaluation (default 1,2,3)")
    ap.add_argument("--json", default=None, help="write every number here")
    ap.add_argument("--rung-proxy", default=None, metavar="JSON",
                    help="from a --json file: what each tool's rungs measure, against the full run (then exit)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--budget", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if a.rung_proxy:
        return rung_proxy(a.rung_proxy, a.quick)
    cfg = config(a.quick)
    seeds = list(range(a.seeds if a.seeds is not None else (2 if a.quick else 5)))
    re_seeds = [int(s) for s in (a.reeval_seeds or ("1" if a.quick else "1,2,3")).split(",")]
    import optuna
    import torch
    q = ["--quick"] if a.quick else []
    print(f"optuna {optuna.__version__}, torch {torch.__version__}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start")
    print(f"objective: GPT width {cfg['width']}, context {cfg['seq']}, batch {cfg['batch']}, {cfg['steps']} steps, "
          f"mup; rungs {cfg['min_steps']}..{cfg['steps']} (eta {cfg['eta']}); search seeds {seeds}; "
          f"re-evaluated on training seeds {re_seeds}", flush=True)
    t_all = time.perf_counter()
    res = {t: [] for t in TOOLS}
    for s in seeds:
        for method in ("halving", "hyperband", "halving-prefix"):
            r = spawn(["--worker", method, "--seed", str(s)] + q)
            res[f"scaleinv-{method}"].append(r)
            print(f"  seed {s} scaleinv {method:14s}: best {r['best_loss']:.4f} ({fmt_values(r['best'])}), "
                  f"{r['steps']} steps, {r['runs']} runs, {r['wall_s']:.1f} s", flush=True)
        budget = res["scaleinv-halving"][-1]["steps"]
        for sampler in ("tpe", "random"):
            r = spawn(["--worker", f"optuna-{sampler}", "--seed", str(s), "--budget", str(budget)] + q)
            for tool in ("scaleinv-halving", "scaleinv-hyperband"):  # optuna's best within each one's spend
                b = res[tool][-1]["steps"]
                done = [loss for at, loss in r["finished"] if at <= b and loss is not None and math.isfinite(loss)]
                r[f"best_at_{tool}"] = min(done) if done else float("inf")
            res[f"optuna-{sampler}-sha"].append(r)
            print(f"  seed {s} optuna {sampler + '+SHA':16s}: best {r['best_loss']:.4f} ({fmt_values(r['best'])}), "
                  f"{r['steps']} steps, {r['trials']} trials ({r['complete']} complete, {r['pruned']} pruned, "
                  f"{r['failed']} failed), {r['wall_s']:.1f} s; within halving's {budget} steps "
                  f"{r['best_at_scaleinv-halving']:.4f}, within hyperband's {res['scaleinv-hyperband'][-1]['steps']} "
                  f"{r['best_at_scaleinv-hyperband']:.4f}", flush=True)

    configs = [r["best"] for t in TOOLS for r in res[t]]
    h0 = res["scaleinv-halving"][0]
    rv = spawn(["--worker", "reeval"] + q, stdin=json.dumps(
        {"configs": configs, "seeds": re_seeds, "check": {"values": h0["best"], "loss": h0["best_loss"]}}))
    it = iter(rv["reeval"])
    for t in TOOLS:
        for r in res[t]:
            r["reeval"] = next(it)
    total = time.perf_counter() - t_all

    print(f"\nper search seed: best loss found (the search's own, training seed 0) / re-evaluated "
          f"(mean held-out loss over training seeds {','.join(map(str, re_seeds))})")
    print("  seed  " + "  ".join(f"{t:>27s}" for t in TOOLS))
    for i, s in enumerate(seeds):
        print(f"  {s:>4d}  " + "  ".join(f"{res[t][i]['best_loss']:>12.4f} / {res[t][i]['reeval']['mean']:<12.4f}"
                                          for t in TOOLS))
    print("\nsummary (mean ± sd over search seeds)")
    print(f"  {'tool':23s} {'best found':>17s} {'re-evaluated':>17s} {'steps spent':>15s} {'runs':>5s} {'configs':>7s} "
          f"{'wall s':>13s} {'in runs s':>9s} {'tool ms/run':>11s}")
    for t in TOOLS:
        rs = res[t]
        per_run = [1000 * (r["wall_s"] - r["run_s"]) / r["runs"] for r in rs]
        print(f"  {t:23s} {ms([r['best_loss'] for r in rs]):>17s} {ms([r['reeval']['mean'] for r in rs]):>17s} "
              f"{statistics.fmean(r['steps'] for r in rs):>15.0f} {statistics.fmean(r['runs'] for r in rs):>5.1f} {statistics.fmean(r['trials'] for r in rs):>7.1f} "
              f"{ms([r['wall_s'] for r in rs], 1):>13s} "
              f"{statistics.fmean(r['run_s'] for r in rs):>9.1f} {statistics.fmean(per_run):>11.1f}")
    for o in ("optuna-tpe-sha", "optuna-random-sha"):
        for tool in ("scaleinv-halving", "scaleinv-hyperband"):
            print(f"  {o} within {tool[9:]}'s spend: best found {ms([r['best_at_' + tool] for r in res[o]])}")
    wins = {t: 0 for t in TOOLS}
    for i in range(len(seeds)):
        wins[min(TOOLS, key=lambda t: res[t][i]["reeval"]["mean"])] += 1
    print("  best re-evaluated config per search seed: " + ", ".join(f"{t} {n}" for t, n in wins.items()))
    print(f"  scaleinv's best config retrained by the objective optuna calls: loss differs by "
          f"{rv['identical_diff']:.3g} (the same objective)")
    print(f"total {total:.0f} s, load {os.getloadavg()[0]:.2f} at the end")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": cfg, "seeds": seeds, "reeval_seeds": re_seeds, "results": res}, f, indent=1)


if __name__ == "__main__":
    main()
