"""The C++ core's functions with Python values (the core speaks JSON text)."""
import json
import math

import torch

import _scaleinv
from _scaleinv import UserError


def rms(t, dtype=None):
    """sqrt(mean t^2); None for a missing, empty or non-finite tensor. By default in the tensor's own
    precision (float32 for float32 and lower, as the C++ core's coord_rms: no float64 copy of a
    width^2 matrix per measurement); dtype=torch.float64 where the value sets a factor (apply's init
    rescaling, exact to 1e-12 rather than float32's ~1e-5 on a width^2 matrix)."""
    if t is None or t.numel() == 0:
        return None
    d = t.detach()
    if dtype is not None:
        v = float(torch.linalg.vector_norm(d, dtype=dtype))
    else:
        v = float(torch.linalg.vector_norm(d if d.dtype == torch.float64 else d.float()))
    v /= math.sqrt(t.numel())
    return v if math.isfinite(v) else None


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
