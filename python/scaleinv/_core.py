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
    data, text = _scaleinv.theory(param, optimizer, int(depth), muon_scale, bool(rmsnorm))
    return Theory(json.loads(data), text)


def _db_list(db):
    """A store path, or a list of them, as a list of str (UserError otherwise)."""
    items = list(db) if isinstance(db, (list, tuple)) else [db]
    if not items or not all(isinstance(d, (str, os.PathLike)) for d in items):
        raise UserError(f"db: {db!r} is not a path or a list of paths (fix: db='runs/sweeps/NAME.db')")
    return [os.fspath(d) for d in items]


def _number(field, v, fix):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise UserError(f"{field}: {v!r} is not a finite number (fix: {fix})")
    return float(v)


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


def predict(db, at=None, holdout=False, fit_upto=None, param=None, max_extrapolation=3, bootstrap=200):
    """The optimal LR at a target scale from one or more sweep stores, with its 90% interval
    (src/report/predict.h: a power law per axis, declined past max_extrapolation doublings).

        p = scaleinv.predict("runs/sweeps/width.db", at={"width": 2048})
        p = scaleinv.predict("runs/sweeps/width.db", holdout=True, fit_upto=512)
    """
    at = {} if at is None else at
    if not isinstance(at, dict) or not all(isinstance(k, str) for k in at):
        raise UserError(f"at: {at!r} is not a dict of axis name -> value (fix: at={{'width': 2048}})")
    at = {k: _number(f"at[{k!r}]", v, "at={'width': 2048}") for k, v in at.items()}
    if not isinstance(holdout, bool):
        raise UserError(f"holdout: {holdout!r} is not True or False")
    fit = 0.0 if fit_upto is None else _number("fit_upto", fit_upto, "fit_upto=512")
    if param is not None and not isinstance(param, str):
        raise UserError(f"param: {param!r} is not a parameterization name (fix: param='mup')")
    ext = _number("max_extrapolation", max_extrapolation, "max_extrapolation=3")
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, int):
        raise UserError(f"bootstrap: {bootstrap!r} is not an integer (fix: bootstrap=200)")
    data, text = _scaleinv.predict(_db_list(db), at, holdout, fit, param or "", ext, bootstrap)
    return Prediction(json.loads(data), text)


def report(db, bootstrap=200):
    """transfer-report's analysis of one or more sweep stores as Python data (its transfer.json):
    per axis group and parameterization, the optimum at every scale with its interval, the drift,
    the verdict and the regrets."""
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, int):
        raise UserError(f"bootstrap: {bootstrap!r} is not an integer (fix: bootstrap=200)")
    return json.loads(_scaleinv.report(_db_list(db), bootstrap))
