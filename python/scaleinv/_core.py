"""The C++ core's functions with Python values (the core speaks JSON text). No torch here: the
table, the presets, the theory, and the analysis of sweep stores work in a Python without torch."""
import json
import math
import os

import _scaleinv
from _scaleinv import UserError


def presets():
    """The preset parameterizations' names (param/presets.cpp)."""
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
            near_optimal=0, hparam=None):
    """The optimal LR at a target scale from one or more sweep stores, with its 90% interval
    (src/report/predict.h: a power law per axis, declined past max_extrapolation doublings).
    near_optimal=PCT: each scale's optimum is the centre of the LRs within PCT% of its best loss
    (every near-optimal run counts), not the parabola vertex.
    hparam=KEY: predict that swept hyperparameter's optimum (a grid key such as "hp.branch_mult",
    swept beside the LR and a scale; the LR re-tuned at each of its values) instead of the LR's;
    each prediction's "value" and "value_log2" hold it.

        p = scaleinv.predict("runs/sweeps/width.db", at={"width": 2048})
        p = scaleinv.predict("runs/sweeps/width.db", holdout=True, fit_upto=512)
    """
    at = {} if at is None else at
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


def report(db, bootstrap=200):
    """transfer-report's analysis of one or more sweep stores as Python data (its transfer.json):
    per axis group and parameterization, the optimum at every scale with its interval, the drift,
    the verdict and the regrets."""
    bootstrap = _bootstrap("scaleinv.report", bootstrap)
    return json.loads(_scaleinv.report(_db_list("scaleinv.report", db), bootstrap))
