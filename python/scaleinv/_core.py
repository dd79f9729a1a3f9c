"""The C++ core's functions with Python values (the core speaks JSON text). No torch here: the
table, the presets, the theory, and the analysis of sweep stores work in a Python without torch."""
import json
import math
import os

import _scaleinv
from _scaleinv import UserError


def _import_or_refuse(module, what):
    """The module, or one UserError line: `what` (the caller and why it needs it) and `pip install`."""
    import importlib
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        raise UserError(f"{what} (fix: pip install {module})") from None


def presets():
    """The preset parameterizations' names (brain/param/presets.cpp)."""
    return list(_scaleinv.presets())


def table(name):
    """A preset or TOML file as a dict: the same JSON as the CLI writes (`scaleinv param --json`)."""
    return json.loads(_scaleinv.table(name))


class Theory(dict):
    """The theory's prediction (the CLI's `theory --json`); str() is the CLI's printed table."""

    def __init__(self, data, text):
        super().__init__(data)
        self.text = text

    def __str__(self):
        return self.text


def theory(param, optimizer="adam", depth=3, muon_scale="spectral", rmsnorm=False):
    """How activations, gradients and updates scale with width and depth (seed 000, seed 004)."""
    _name("param", param, "param='mup' (scaleinv.presets() lists them)")
    _name("optimizer", optimizer, "optimizer='adam'")
    _name("muon_scale", muon_scale, "muon_scale='spectral' or 'rms'")
    depth = _integer("depth", depth, "depth=3 (the number of residual blocks)", 1, 1 << 20)
    data, text = _scaleinv.theory(param, optimizer, depth, muon_scale, bool(rmsnorm))
    return Theory(json.loads(data), text)


def _db_list(caller, db):
    """A store path, or a list of them, as a list of str (UserError naming db otherwise: an empty
    path too, which the core would otherwise look up as a file)."""
    items = list(db) if isinstance(db, (list, tuple)) else [db]
    if not items or not all(isinstance(d, (str, os.PathLike)) and os.fspath(d) for d in items):
        raise UserError(f"{caller}: field 'db': {db!r} is not a path or a list of paths "
                        "(fix: db='runs/sweeps/NAME.db')")
    return [os.fspath(d) for d in items]


def _bootstrap(caller, n):
    """The resample count as an int the core takes (its 64 bits: a larger Python int is refused here
    with the core's words, not as pybind11's TypeError); the core checks the cap itself."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise UserError(f"{caller}: field 'bootstrap': {n!r} is not an integer (fix: bootstrap=200)")
    if not -(1 << 63) <= n < (1 << 63):
        raise UserError(f"{caller}: field 'bootstrap': {n} resamples: must be from 0 to {_scaleinv.max_bootstrap} "
                        "(fix: e.g. bootstrap=200 (the default; 2000 for tighter intervals))")
    return n


def _finite(v):
    """Whether a number is finite as a float (an int past 1.8e308, 10**400, is not: math.isfinite
    raises OverflowError there)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _number(field, v, fix, lo=None, hi=None, lo_open=False, hi_open=False):
    """v as a float when it is a finite real number inside the bounds (bool is no number);
    UserError naming `field` and `fix` otherwise. Every argument is checked before anything is
    touched, so a refused call changes nothing."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not _finite(v):
        raise UserError(f"python: {field}: {v!r} is not a finite number (fix: {fix})")
    v = float(v)
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise UserError(f"python: {field}: {v!r} must be {'>' if lo_open else '>='} {lo:g} (fix: {fix})")
    if hi is not None and (v > hi or (hi_open and v == hi)):
        raise UserError(f"python: {field}: {v!r} must be {'<' if hi_open else '<='} {hi:g} (fix: {fix})")
    return v


def _integer(field, v, fix, lo, hi):
    """v as an int when it is an integer (a float with an integral value counts) in [lo, hi]."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise UserError(f"python: {field}: {v!r} is not an integer (fix: {fix})")
    v = int(v)
    if not lo <= v <= hi:
        raise UserError(f"python: {field}: {v} is outside {lo}..{hi} (fix: {fix})")
    return v


def _name(field, v, fix):
    if not isinstance(v, str) or not v:
        raise UserError(f"python: {field}: {v!r} is not a name (fix: {fix})")
    return v


class Prediction(dict):
    """`scaleinv predict`'s result (its --json); str() is the printed tables; .predictions the list."""

    def __init__(self, data, text):
        super().__init__(data)
        self.text = text

    @property
    def predictions(self):
        return self["predictions"]

    def __str__(self):
        return self.text


def predict(db, at=None, holdout=False, fit_upto=None, param=None, max_extrapolation=3, bootstrap=200,
            near_optimal=None, hparam=None, joint=None, retune=None, reference_law=None, reference_name="reference law",
            loso=False):
    """The optimal LR at a target scale from one or more sweep stores, with its 90% interval
    (src/brain/report/predict.h: a power law per axis, declined past max_extrapolation doublings).
    near_optimal=PCT: each scale's optimum is the centre of the LRs within PCT% of its best loss
    (every near-optimal run counts), not the parabola vertex.
    hparam=KEY: predict that swept hyperparameter's optimum (a grid key such as "hp.branch_mult",
    swept beside the LR and a scale; the LR re-tuned at each of its values) instead of the LR's;
    each prediction's "value" and "value_log2" hold it.

        p = scaleinv.predict("runs/sweeps/width.db", at={"width": 2048})
        p = scaleinv.predict("runs/sweeps/width.db", holdout=True, fit_upto=512)

    joint=[AXES]: one law in several axes at once, log2 h* = a + sum b_i log2 x_i
    (src/brain/report/joint_law.h; at names every axis, fit_upto is then {axis: largest fitted value});
    retune=[KEYS] re-tuned in every cell besides the LR; reference_law={'c': C, axis: exponent, ...}
    a published law to compare; loso=True adds the interval's leave-one-scale-out coverage.

        p = scaleinv.predict("steplaw.db", joint=["N", "D"], holdout=True, fit_upto={"N": 5.4e8},
                             near_optimal=0.25)
    """
    if joint is not None:
        return _predict_joint(db, joint, at, holdout, fit_upto, param, max_extrapolation, bootstrap, near_optimal,
                              hparam, retune, reference_law, reference_name, loso)
    at = {} if at is None else at
    near_optimal = 0 if near_optimal is None else near_optimal  # (the parabola vertex: the one-axis default)
    if not isinstance(at, dict) or not all(isinstance(k, str) for k in at):
        raise UserError(f"at: {at!r} is not a dict of axis name -> value (fix: at={{'width': 2048}})")
    at = {k: _number(f"at[{k!r}]", v, "at={'width': 2048}", lo=0, lo_open=True) for k, v in at.items()}
    if not isinstance(holdout, bool):
        raise UserError(f"holdout: {holdout!r} is not True or False")
    fit = 0.0 if fit_upto is None else _number("fit_upto", fit_upto, "fit_upto=512", lo=0, lo_open=True)
    if param is not None and not isinstance(param, str):
        raise UserError(f"param: {param!r} is not a parameterization name (fix: param='mup')")
    ext = _number("max_extrapolation", max_extrapolation, "max_extrapolation=3", lo=0)
    bootstrap = _bootstrap("scaleinv.predict", bootstrap)
    near = _number("near_optimal", near_optimal, "near_optimal=0.25 (percent of the best loss), or 0", lo=0, hi=50)
    if hparam is not None and not isinstance(hparam, str):
        raise UserError(f"hparam: {hparam!r} is not a grid key (fix: hparam='hp.branch_mult')")
    data, text = _scaleinv.predict(_db_list("scaleinv.predict", db), at, holdout, fit, param or "", ext, bootstrap, near, hparam or "")
    return Prediction(json.loads(data), text)


def _names(what, v, example):
    if isinstance(v, str) or not all(isinstance(k, str) for k in (v or [])):
        raise UserError(f"{what}: {v!r} is not a list of axis names (fix: {example})")
    return list(v or [])


def _axis_map(what, v, example):
    v = {} if v is None else v
    if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
        raise UserError(f"{what}: {v!r} is not a dict of axis name -> value (fix: {example})")
    return {k: _number(f"{what}[{k!r}]", x, example) for k, x in v.items()}


def _predict_joint(db, joint, at, holdout, fit_upto, param, max_extrapolation, bootstrap, near_optimal, hparam,
                   retune, reference_law, reference_name, loso):
    axes = _names("joint", joint, "joint=['N', 'D']")
    at = _axis_map("at", at, "at={'N': 1e9, 'D': 1e11}")
    if not isinstance(holdout, bool):
        raise UserError(f"holdout: {holdout!r} is not True or False")
    if fit_upto is not None and not isinstance(fit_upto, dict):
        raise UserError(f"fit_upto: {fit_upto!r} is a number; a joint law's holdout names its axis "
                        "(fix: fit_upto={'N': 5.4e8})")
    upto = _axis_map("fit_upto", fit_upto, "fit_upto={'N': 5.4e8}")
    if holdout and not upto:
        raise UserError("fit_upto: a joint law's holdout needs the cells to fit (fix: holdout=True, fit_upto={'N': 5.4e8})")
    if upto and not holdout:
        raise UserError("fit_upto: needs holdout=True (fix: holdout=True, fit_upto={'N': 5.4e8})")
    ref = _axis_map("reference_law", reference_law, "reference_law={'c': 1.79, 'N': -0.713, 'D': 0.307}")
    if param is not None and not isinstance(param, str):
        raise UserError(f"param: {param!r} is not a parameterization name (fix: param='mup')")
    if hparam is not None and not isinstance(hparam, str):
        raise UserError(f"hparam: {hparam!r} is not a grid key (fix: hparam='batch_size')")
    if not isinstance(reference_name, str) or not isinstance(loso, bool):
        raise UserError("reference_name must be a string and loso True or False")
    ext = _number("max_extrapolation", max_extrapolation, "max_extrapolation=3", lo=0)
    bootstrap = _bootstrap("scaleinv.predict", bootstrap)
    near = 0.25 if near_optimal is None else near_optimal  # (every run within 0.25%: the joint law's default)
    near = _number("near_optimal", near, "near_optimal=0.25 (percent of the best loss), or 0", lo=0, hi=50)
    data, text = _scaleinv.predict_joint(_db_list("scaleinv.predict", db), axes, at, upto, param or "", hparam or "",
                                         near, ext, bootstrap, _names("retune", retune, "retune=['batch_size']"), ref,
                                         reference_name, loso)
    return Prediction(json.loads(data), text)


def report(db, bootstrap=200):
    """transfer-report's analysis of one or more sweep stores as Python data (its transfer.json):
    per axis group and parameterization, the optimum at every scale with its interval, the drift,
    the verdict and the regrets."""
    bootstrap = _bootstrap("scaleinv.report", bootstrap)
    return json.loads(_scaleinv.report(_db_list("scaleinv.report", db), bootstrap))
