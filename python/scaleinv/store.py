"""scaleinv.store: sweep results produced elsewhere into a sweep store (no torch).

    import pandas as pd, scaleinv
    df = pd.read_csv("steplaw_dense.csv")            # or pd.read_parquet(...), or a list of dicts
    s = scaleinv.store.from_records(df, "runs/steplaw.db", lr="lr", loss="loss",
                                    scales={"N": "N", "D": "D"}, hparams={"batch_size": "bs"},
                                    units={"N": "params", "D": "tokens"}, source="Step Law @32a8f4c")
    print(s); scaleinv.predict("runs/steplaw.db", holdout=True)

The C++ importer behind `scaleinv import-results` writes the store (src/brain/sweep/import_results.h:
what a point holds, what is refused); this module only turns the records into its table.
"""
import json
import math
import numbers
import os

import _scaleinv
from _scaleinv import UserError

_CALLER = "scaleinv.store.from_records"


class ImportSummary(dict):
    """What from_records wrote: db, rows, points, diverged, skipped (rows with no loss), total
    (points in the store), cells (scale axis -> [[value, rows], ...]), sha256, fingerprint. str()
    is the CLI's printed summary."""

    def __init__(self, data, text):
        super().__init__(data)
        self.text = text

    def __str__(self):
        return self.text


def _cell(v):
    """A value as the importer's cell: None stays missing, a number its str() (a float NaN or inf:
    a diverged run's loss), anything else its text."""
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, numbers.Real) and not isinstance(v, bool):
        return str(v) if not (isinstance(v, float) and math.isnan(v)) else "nan"
    return str(v)


def _table(records):
    """records (a DataFrame, a dict of columns, or an iterable of dicts) as {"columns", "rows"}."""
    if hasattr(records, "to_dict") and hasattr(records, "columns"):  # a pandas DataFrame
        columns = [str(c) for c in records.columns]
        rows = [[_cell(r[c]) for c in records.columns] for r in records.to_dict("records")]
        return {"columns": columns, "rows": rows}
    if isinstance(records, dict):  # columns: name -> values
        columns = [str(c) for c in records]
        values = [list(v) for v in records.values()]
        if len({len(v) for v in values}) > 1:
            raise UserError(f"{_CALLER}: field 'records': its columns have different lengths "
                            "(fix: give every column one value per run)")
        return {"columns": columns, "rows": [[_cell(x) for x in row] for row in zip(*values)]}
    try:
        items = list(records)
    except TypeError:
        items = None
    if items is None or not all(isinstance(r, dict) for r in items):
        raise UserError(f"{_CALLER}: field 'records': {type(records).__name__} is not a list of dicts, "
                        "a dict of columns or a DataFrame (fix: records=df or records=[{'N': ..., 'lr': ..., ...}])")
    columns = []
    for r in items:
        for k in r:
            if str(k) not in columns:
                columns.append(str(k))
    rows = [[_cell({str(k): v for k, v in r.items()}.get(c)) for c in columns] for r in items]
    return {"columns": columns, "rows": rows}


def _pairs(field, value, example):
    """A {name: column} dict (or a list of pairs) as a list of [name, column] strings."""
    if value is None:
        return []
    items = list(value.items()) if isinstance(value, dict) else value
    try:
        pairs = [[k, c] for k, c in items]
    except (TypeError, ValueError):
        pairs = None
    if pairs is None or not all(isinstance(k, str) and isinstance(c, str) for k, c in pairs):
        raise UserError(f"{_CALLER}: field '{field}': {value!r} is not a dict of names to column names "
                        f"(fix: {field}={example})")
    return pairs


def _text(field, value, example, optional=False):
    if (value is None and optional) or isinstance(value, str):
        return value or ""
    raise UserError(f"{_CALLER}: field '{field}': {value!r} is not a string (fix: {field}={example})")


def from_records(records, db, *, lr, loss, scales, hparams=None, param="imported", param_column=None, seed=None,
                 source="", units=None, append=False):
    """Writes `records` (a list of dicts, a dict of columns, or a pandas DataFrame: pd.read_parquet
    for Parquet) into the sweep store `db`, as `scaleinv import-results` does a file: `lr` and `loss`
    name columns, `scales` maps axis names to columns ({"N": "N", "D": "D"}; width and depth are the
    store's own), `hparams` the hyperparameters swept beside the LR ({"batch_size": "bs"}), `units`
    the scale axes' units ({"N": "params"}), `param` the parameterization's name (or `param_column`
    a column of names), `seed` the seed column (default: every run seed 0), `source` free text kept
    in the store's meta; `append` adds to an imported store of the same axes. A NaN or inf loss is a
    diverged run; a None loss, a run without a result (skipped). Returns an ImportSummary;
    bad input raises scaleinv.UserError naming the field, and nothing is written."""
    if not isinstance(db, (str, os.PathLike)) or not os.fspath(db):
        raise UserError(f"{_CALLER}: field 'db': {db!r} is not a path (fix: db='runs/imported.db')")
    mapping = {"lr": _text("lr", lr, "'lr'"), "loss": _text("loss", loss, "'loss'"),
               "scales": _pairs("scales", scales, "{'N': 'N', 'D': 'D'}"),
               "hparams": _pairs("hparams", hparams, "{'batch_size': 'bs'}"),
               "units": dict(_pairs("units", units, "{'N': 'params'}")),
               "param": _text("param", param, "'standard'", optional=param_column is not None),
               "param_column": _text("param_column", param_column, "'param'", optional=True),
               "seed_column": _text("seed", seed, "'seed'", optional=True),
               "source": _text("source", source, "'https://...'", optional=True), "append": bool(append)}
    if mapping["param_column"]:
        mapping["param"] = ""
    data, text = _scaleinv.import_records(json.dumps(_table(records)), json.dumps(mapping), os.fspath(db))
    return ImportSummary(json.loads(data), text)
