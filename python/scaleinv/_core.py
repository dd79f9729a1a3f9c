"""The C++ core's functions with Python values (the core speaks JSON text). No torch here: the
table, the presets and the theory work in a Python without torch."""
import json

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
