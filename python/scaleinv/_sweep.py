"""Sweeps and searches of your own model (issue 41): the CLI's sweep and search machinery, trained by
your function, into the CLI's store.

    def make_model(width, depth=2): ...                   # called with the scale axes the space sets
    def train(model, opt, hp, steps): ...; return losses  # the final loss, or the loss curve

    r = scaleinv.sweep(make_model, train, db="runs/sweeps/mine.db", space={
        "fixed": {"param": "mup", "steps": 300},
        "grid": {"width": [64, 128, 256], "lr_log2": {"from": -10, "to": -5}, "seed": [0, 1]}})
    print(scaleinv.report(r.db))                          # or: scaleinv transfer-report --db ...

The space is a sweep file's grammar ([fixed], [grid], [search]; src/brain/sweep/user_space.h) as a dict
or a TOML file's path. The C++ core draws the points exactly as `scaleinv sweep` does (the same
grid expansion, Halton trials, halving rungs and hyperband brackets, point ids and fingerprint),
calls back for each point not yet in the store, and writes each result in its own transaction
(src/brain/sweep/user_sweep.h). This module builds each point's model and optimizer and calls `train`.
"""
import inspect
import json
import math
import os
import time

import _scaleinv

from ._core import UserError, _integer, report


class SweepResult(dict):
    """What a sweep or search did: db, points, run, skipped, diverged, failed, wall_s, train_s (the
    time inside your training function), ranking (a search: every trial, best first per group);
    str() is the summary table the CLI prints."""

    @property
    def db(self):
        return self["db"]

    @property
    def ranking(self):
        return self.get("ranking", [])

    def best(self, group=None):
        """The best trial's values of a search (of `group` when the grid has several)."""
        for t in self.ranking:
            if (group is None or t["group"] == group) and t["status"] == "ok":
                return t["values"]
        return None

    def report(self, bootstrap=200):
        """transfer-report's analysis of the store (scaleinv.report)."""
        return report(self.db, bootstrap)

    def __str__(self):
        return self["text"]


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _check_integers(v, path):
    """Every int of a space dict fits the C++ core's int64 (a larger one wrapped to -2^63 there)."""
    if isinstance(v, bool):
        return
    if isinstance(v, int) and not _INT64[0] <= v <= _INT64[1]:
        raise UserError(f"python: space: field '{path}': {v} is past a 64-bit integer (from -2^63 to 2^63-1) "
                        "(fix: give a smaller integer)")
    if isinstance(v, dict):
        for k, x in v.items():
            _check_integers(x, f"{path}.{k}" if path else str(k))
    elif isinstance(v, (list, tuple)):
        for x in v:
            _check_integers(x, path)


def _space(space, caller, db=None):
    """(the space as _scaleinv.UserSweep, where) of a space given as a dict or a TOML file's path; a
    dict's sweep is named after the store's stem unless it names itself. A dict crosses to the C++
    brain once, as values (no JSON or TOML text in between)."""
    if isinstance(space, dict):
        _check_integers(space, "")
        if db is not None and "name" not in space.get("sweep", {}):
            space = dict(space, sweep=dict(space.get("sweep", {}), name=os.path.splitext(os.path.basename(os.fspath(db)))[0]))
        return _scaleinv.UserSweep.from_dict(space, "python: space", caller), "python: space"
    if isinstance(space, (str, os.PathLike)):
        path = os.fspath(space)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise UserError(f"{path}: space: cannot read it ({e.strerror}) (fix: give a TOML file's path or a dict)") from None
        return _scaleinv.UserSweep.from_toml(text, path, caller), path
    raise UserError(f"python: space: {type(space).__name__} is not a dict or a path "
                    "(fix: space={'fixed': {...}, 'grid': {...}} or space='my_sweep.toml')")


def _shard(shard):
    """'i/N' from None, (i, N), 'i/N' or 'env' (SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT)."""
    if shard is None:
        return "0/1"
    if shard == "env":
        idx, cnt = os.environ.get("SLURM_ARRAY_TASK_ID"), os.environ.get("SLURM_ARRAY_TASK_COUNT")
        if idx is None or cnt is None:
            raise UserError("python: shard: 'env' needs SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT in the "
                            "environment (fix: shard=(i, n))")
        try:
            shard = (int(idx), int(cnt))
        except ValueError:
            raise UserError(f"python: shard: 'env' reads SLURM_ARRAY_TASK_ID={idx!r} and SLURM_ARRAY_TASK_COUNT="
                            f"{cnt!r}, which are not integers (fix: run it as a SLURM array task, or give "
                            "shard=(i, n))") from None
    if isinstance(shard, str):
        return shard  # parsed (and refused in one line) by the core's parse_shard
    if not isinstance(shard, (tuple, list)) or len(shard) != 2:
        raise UserError(f"python: shard: {shard!r} is not (i, n) (fix: shard=(0, 4) .. shard=(3, 4))")
    n = _integer("shard[1]", shard[1], "shard=(i, n) with n >= 1", 1, 1 << 20)
    i = _integer("shard[0]", shard[0], "shard=(i, n) with 0 <= i < n", 0, n - 1)
    return f"{i}/{n}"


def _result(out, wall_s):
    """What train returned as the store's JSON: a number (the final loss), a list of losses (the
    curve), or a dict {"loss" or "losses", "val_loss", "items_per_s"}."""
    def num(v, what):
        if isinstance(v, bool):  # float(True) is 1.0: a flag is no loss
            raise UserError(f"python: train: returned {what} bool ({v}), not a number (fix: return the final loss as a "
                            "float, or the loss curve as a list of floats)")
        try:
            v = float(v)  # a number, a 0-d tensor, numpy's scalars
        except (TypeError, ValueError):
            raise UserError(f"python: train: returned {what} {type(v).__name__}, not a number (fix: return the final "
                            "loss as a float, or the loss curve as a list of floats)") from None
        return v if math.isfinite(v) else None

    res = {"wall_s": wall_s}
    if isinstance(out, dict):
        if "losses" in out:
            losses = out["losses"]
        elif "loss" in out:
            losses = [out["loss"]]
        else:
            raise UserError("python: train: returned a dict without 'loss' or 'losses' (fix: return "
                            "{'loss': final_loss} or {'losses': curve, 'val_loss': v})")
        if out.get("val_loss") is not None:
            res["val_loss"] = num(out["val_loss"], "val_loss")
        if out.get("items_per_s") is not None:
            res["items_per_s"] = num(out["items_per_s"], "items_per_s")
    elif isinstance(out, (list, tuple)):
        losses = out
    else:
        losses = [out]
    if len(losses) == 0:
        raise UserError("python: train: returned no loss (fix: return the final loss, or the loss curve)")
    res["losses"] = [num(v, "a loss of") for v in losses]
    return res


def _describe(e):
    """'Type: message' of an exception, also where its __str__ itself raises."""
    try:
        msg = str(e)
    except Exception as inner:  # noqa: BLE001 (the user's __str__ may raise anything)
        msg = f"<its message could not be read: {type(inner).__name__}>"
    return f"{type(e).__name__}: {msg}"


def sweep(make_model, train, space, db, *, optimizer="adamw", base=None, overrides=None, shard=None,
          resume=False, progress=True, executor=None, executor_options=None):
    """Run a grid or a search of your model into a sweep store; returns a SweepResult.

    make_model(width=..., depth=...): your model at a scale (called with the scale axes the space
        sets: width always, depth when the space sets it), under torch.manual_seed(hp["seed"]).
    train(model, optimizer, hp, steps): trains it and returns the final loss (a float), the loss
        curve (a list) or {"losses"/"loss", "val_loss"}; a NaN is a divergence. hp has param, width,
        depth, lr, seed, steps and every other name of the space (your own hyperparameters).
        An exception is recorded as a failed run with its message (the store's failures table) and
        the sweep goes on; KeyboardInterrupt stops it, every finished run stored (resume=True goes on).
    space: a dict or a TOML file's path: [fixed] (param, steps and any value every run takes),
        [grid] (lists, {from, to, step} ranges), [search] (method, trials, eta, min_steps, [search.space]).
    db: the store; with shard=(i, n) (or 'i/n', or 'env' for a SLURM array) and n > 1 the shard
        writes STEM.shard-i-of-n.db beside it (merge with `scaleinv sweep merge`).
    optimizer: "adamw", "adam" or "sgd": the model goes through scaleinv.apply(model, base, delta,
        param=hp["param"], optimizer=..., lr=hp["lr"], weight_decay=hp.get("weight_decay", 0));
        or a callable(model, hp) returning your own optimizer.
    base: {"width": w, "depth": d}, the shape the LR is tuned at (default: the space's smallest);
        delta is built at twice its width.
    resume: continue a store that holds points of this space (a changed space is refused).
    executor: None or "local" trains here, one point after another; "ray" sends each rung's pending
        points to a Ray cluster, one task each (python/scaleinv/_ray.py), and records each as it
        finishes (a worker that dies mid-point is retried once, then recorded as failed with the
        reason). executor_options (ray): address ('auto', 'HOST:PORT'; default Ray's own: RAY_ADDRESS
        or a local instance; an initialized Ray is used as it is), num_cpus (1) and num_gpus (0) per
        point, max_in_flight (default: what the cluster holds at once), connect_timeout_s (10),
        runtime_env (Ray's, for each point's task: how workers find a module your functions are from).
        "slurm" sends each rung's pending points as one Slurm job array, a task each
        (python/scaleinv/_slurm.py; the nodes must see the job folder, which a probe job checks); a
        task that ends without a result is submitted again once, then its point recorded as failed
        with the reason. executor_options (slurm): folder (default STEM.pyslurm/ beside the store),
        partition, sbatch_args (a list), cpus_per_task (1), max_retries (1), poll_s (2), python (the
        tasks' interpreter; default this one), probe_timeout_s (300).
    """
    return _sweep(make_model, train, space, db, optimizer, base, overrides, shard, resume, progress, executor,
                  executor_options, "scaleinv.sweep")


def _import_torch(caller):
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        raise ImportError(f"{caller} needs torch (fix: install torch >= 1.13 into this environment; scaleinv.table, "
                          "theory, presets, predict and report work without it)") from None
    return torch


def _sweep(make_model, train, space, db, optimizer, base, overrides, shard, resume, progress, executor,
           executor_options, caller):
    # Everything is checked, and make_model tried at the base shape, before the store is touched:
    # a refusal leaves no file behind, and an existing store unchanged.
    torch = _import_torch(caller)
    from . import _executors, _ray, _slurm
    executor, executor_options = _executors.check_options(executor, executor_options)
    ray = _ray.import_ray() if executor == "ray" else None
    cloudpickle = _slurm.import_cloudpickle() if executor == "slurm" else None
    from torch import nn
    if not callable(make_model) or not callable(train):
        raise UserError("python: make_model, train: must be callables (fix: sweep(make_model, train, space=..., db=...))")
    # the kinds scaleinv.apply builds a torch optimizer for (src/brain/optim/optimizer_kinds.h: python_class)
    torch_kinds = [r["kind"] for r in json.loads(_scaleinv.optimizer_kinds()) if r["python_class"]]
    if not (isinstance(optimizer, str) and optimizer in torch_kinds) and not callable(optimizer):
        quoted = ", ".join(repr(k) for k in torch_kinds)
        raise UserError(f"python: optimizer: {optimizer!r} (fix: {quoted} or a callable(model, hp))")
    if not isinstance(db, (str, os.PathLike)) or not os.fspath(db):
        raise UserError(f"python: db: {db!r} is not a path (fix: db='runs/sweeps/mine.db')")
    if os.path.isdir(os.fspath(db)):
        raise UserError(f"python: db: {os.fspath(db)!r} is a directory (fix: db='{os.path.join(os.fspath(db), 'mine.db')}')")
    if not isinstance(resume, bool):
        raise UserError(f"python: resume: {resume!r} is not True or False (fix: resume=True continues a store)")
    user_sweep, where = _space(space, caller, db)
    info = user_sweep.info()
    if caller == "scaleinv.search" and not info["search"]:
        raise UserError(f"{where}: search: missing (fix: add a [search] table with method, trials and [search.space], "
                        "or call scaleinv.sweep for a grid)")
    if not info["widths"]:
        raise UserError(f"{where}: width: the space sets no width (fix: add width = N to fixed, or a list to the grid; "
                        "make_model is built at it)")
    shard_text = _shard(shard)
    db_path = _scaleinv.shard_db_path(os.fspath(db), shard_text, caller)
    if not isinstance(space, dict) and os.path.exists(db_path) and os.path.samefile(os.fspath(space), db_path):
        raise UserError(f"python: db: {db_path!r} is the space file this sweep reads (fix: give db another path, "
                        "e.g. runs/sweeps/mine.db)")
    base = dict(base or {})
    unknown = set(base) - {"width", "depth"}
    if unknown:
        raise UserError(f"python: base: unknown key {sorted(unknown)[0]!r} (fix: base={{'width': 64, 'depth': 2}})")
    base_w = _integer("base['width']", base.get("width", info["widths"][0]), "base={'width': 64}", 1, (1 << 31) - 1)
    has_depth = bool(info["depths"])
    base_d = _integer("base['depth']", base.get("depth", info["depths"][0]), "base={'depth': 2}", 1, (1 << 31) - 1) \
        if has_depth else None

    try:  # make_model is called with keywords: one that cannot take them is refused before any run
        inspect.signature(make_model).bind(**({"width": 1, "depth": 1} if has_depth else {"width": 1}))
    except TypeError:
        keys = "width= and depth=" if has_depth else "width="
        raise UserError(f"python: make_model: cannot be called with {keys} as keywords (fix: def make_model(width"
                        f"{', depth' if has_depth else ''}): ...; the space's scale axes are passed by name)") from None
    except ValueError:
        pass  # a builtin or C callable without a signature: called as it is

    def build(width, depth):
        model = make_model(width=width, depth=depth) if has_depth else make_model(width=width)
        if not isinstance(model, nn.Module):
            at = f"width={width}" + (f", depth={depth}" if has_depth else "")
            raise UserError(f"python: make_model: returned {type(model).__name__} at {at}, not a torch.nn.Module "
                            "(fix: return the model it builds)")
        if next(iter(model.parameters()), None) is None:
            raise UserError(f"python: make_model: its {type(model).__name__} has no parameters to train "
                            "(fix: return the model with its layers)")
        return model

    # The base and delta models tell apply the shapes and the init RMS it matches (built once, under
    # a seed of their own, so a point's result does not depend on the caller's RNG state: a shard, a
    # resumed sweep and a second sweep in one process train each point alike); they and a plan of
    # every param the space sets are tried here, before the store is opened.
    with torch.random.fork_rng():
        torch.manual_seed(0)
        shapes = {"base": build(base_w, base_d), "delta": build(2 * base_w, base_d)}
    if shapes["base"] is shapes["delta"]:
        raise UserError("python: make_model: returned the same model object for two widths (fix: build a new model "
                        "in each call)")
    if not callable(optimizer):
        from ._apply import plan
        for param in info["params"]:
            plan(shapes["base"], shapes["base"], shapes["delta"], param, optimizer, 0.0, overrides)
    def train_point(hparams):
        """One point (its values by the space's names, a dict): its model built under its seed, the
        parameterization applied, train called; its result as the store's fields (a dict). Runs
        here, or in a Ray worker or a Slurm task (shipped by cloudpickle)."""
        hp = dict(hparams)
        torch.manual_seed(hp["seed"])
        model = build(hp["width"], hp.get("depth"))
        if callable(optimizer):
            opt = optimizer(model, hp)
        else:
            from ._apply import apply
            opt = apply(model, base=shapes["base"], delta=shapes["delta"], param=hp["param"], optimizer=optimizer,
                        lr=hp["lr"], weight_decay=hp.get("weight_decay", 0.0), overrides=overrides)
        t0 = time.perf_counter()
        try:
            out = train(model, opt, hp, hp["steps"])
        except Exception as e:  # recorded, the sweep goes on (KeyboardInterrupt is no Exception: it stops)
            return {"error": _describe(e)[:2000], "wall_s": time.perf_counter() - t0}
        return dict(_result(out, time.perf_counter() - t0), steps=hp["steps"])

    t0 = time.perf_counter()
    if ray is not None:
        _ray.connect(ray, executor_options)
        runner = _ray.RayExecutor(ray, train_point, executor_options)
        out = user_sweep.run(db_path, shard_text, resume, bool(progress), None, runner)
        train_s = runner.train_s
    elif cloudpickle is not None:
        # The scheduler, the partition, the folder (one driver) and the probe job are checked here,
        # before the store is opened.
        runner = _slurm.SlurmExecutor(_scaleinv.SlurmClient(caller), cloudpickle, train_point, executor_options,
                                      db_path, info["name"], info["fingerprint"], resume)
        completed = False
        try:
            out = user_sweep.run(db_path, shard_text, resume, bool(progress), None, runner)
            completed = True
        finally:
            runner.close(completed)
        train_s = runner.train_s
    else:
        train_s = 0.0

        def run_point(point_id, hparams):
            nonlocal train_s
            res = train_point(hparams)
            train_s += res["wall_s"]
            return res

        out = user_sweep.run(db_path, shard_text, resume, bool(progress), run_point)
    r = SweepResult(out)
    r["train_s"] = train_s
    r["overhead_s"] = (time.perf_counter() - t0) - r["train_s"]
    if progress:
        print(r["text"], end="", flush=True)
    return r


def search(make_model, train, space, db, *, optimizer="adamw", base=None, overrides=None, shard=None,
           resume=False, progress=True, executor=None, executor_options=None):
    """scaleinv.sweep of a space with a [search] (random, halving or hyperband): the same call; a
    space without one is refused, so a typo does not silently run a grid."""
    return _sweep(make_model, train, space, db, optimizer, base, overrides, shard, resume, progress, executor,
                  executor_options, "scaleinv.search")
