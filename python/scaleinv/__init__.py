"""scaleinv from Python: any parameterization of the table on your own torch model.

    import scaleinv
    opt = scaleinv.apply(model, base=base, delta=delta, param="mup", optimizer="adamw", lr=1e-3)
    r = scaleinv.coordcheck(make_model, widths=[128, 256, 512], batches=[(x, y)], param="mup")
    print(r); assert r.passed
    r = scaleinv.sweep(make_model, train, space={...}, db="runs/sweeps/mine.db")  # or scaleinv.search
    print(scaleinv.predict("runs/sweeps/width.db", at={"width": 2048}))   # the LR there, with its interval
    scaleinv.store.from_records(df, "runs/steplaw.db", lr="lr", loss="loss", scales={"N": "N"})  # results from elsewhere

The C++ core (_scaleinv, torch-free) does the work: roles, the shifted table (seed 000 eq. 28), the
theory and the coordinate check's verdicts; this package measures with torch and builds the torch
optimizer. torch is imported when a function that needs it is first used, so `scaleinv.table`,
`scaleinv.theory`, `scaleinv.presets`, `scaleinv.predict`, `scaleinv.report` and `scaleinv.store` work without it, beside any torch >= 1.13;
without torch the other names exist (hasattr, `from scaleinv import *`, pydoc) and raise ImportError
with the fix when used.
Bad input raises scaleinv.UserError (a ValueError) with one line naming the field and the fix.
"""
import importlib

from . import store  # results from elsewhere into a sweep store (torch-free)
from ._core import Prediction, UserError, predict, presets, report, table, theory

# name -> the submodule that defines it (loaded, with torch, on first use).
_TORCH_SIDE = {"apply": "_apply", "plan": "_apply", "named_tensors": "_apply", "coordcheck": "_coordcheck",
               "CoordCheckResult": "_coordcheck", "lr_schedule": "_schedule", "check_schedule": "_schedule",
               "sweep": "_sweep", "search": "_sweep", "SweepResult": "_sweep"}

__all__ = ["Prediction", "UserError", "predict", "presets", "report", "store", "table", "theory"] + sorted(_TORCH_SIDE)


def _needs_torch_message(name):
    return (f"scaleinv.{name} needs torch (fix: install torch >= 1.13 into this environment; "
            "scaleinv.table, theory, presets, predict and report work without it)")


class _NeedsTorch:
    """A torch-side name in a Python without torch: it exists (hasattr, dir, `from scaleinv import *`,
    pydoc and inspect see it), and using it (calling it, reading its attributes) raises ImportError
    with the fix; isinstance against it is False."""

    def __init__(self, name):
        self.__name__ = self.__qualname__ = name
        self.__module__ = __name__
        self.__doc__ = _needs_torch_message(name)

    def __call__(self, *args, **kwargs):
        raise ImportError(_needs_torch_message(self.__name__))

    def __getattr__(self, attr):  # only for attributes it lacks: dunders are inspect's probes
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise ImportError(_needs_torch_message(f"{self.__name__}.{attr}"))

    def __instancecheck__(self, obj):
        return False

    def __subclasscheck__(self, cls):
        return False

    def __repr__(self):
        return f"<scaleinv.{self.__name__}: needs torch, which is not installed here>"


def __getattr__(name):
    sub = _TORCH_SIDE.get(name)
    if sub is None:
        raise AttributeError(f"module 'scaleinv' has no attribute '{name}'")
    try:
        mod = importlib.import_module(f".{sub}", __name__)
    except ModuleNotFoundError as e:
        if e.name == "torch":  # not cached: torch installed later in this process is found
            return _NeedsTorch(name)
        raise
    value = getattr(mod, name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__():
    return sorted(set(globals()) | set(_TORCH_SIDE))
