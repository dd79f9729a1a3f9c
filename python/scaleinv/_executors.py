"""executor= and executor_options= of scaleinv.sweep and scaleinv.search: which executors there are,
and their options checked (one line each, before anything runs). Each executor's module has
OPTIONS (key -> an example of it, for the fix) and check(options, number), which checks its own
values and fills in their defaults; the shape of the options and the unknown keys are checked here.

    None / "local"  trains here, one point after another (_sweep.py)
    "ray"           each point a Ray task (_ray.py)
    "slurm"         each point a task of a Slurm job array (_slurm.py)
"""
from . import _ray, _slurm
from ._core import UserError

EXECUTORS = {"ray": _ray, "slurm": _slurm}
WHERE = {"ray": "on a Ray cluster", "slurm": "as Slurm array tasks"}


def check_options(executor, options):
    """The executor's name ("local", "ray" or "slurm") and its options as a dict, or UserError."""
    if executor is None:
        executor = "local"
    if executor != "local" and executor not in EXECUTORS:
        others = "; ".join(f"executor={name!r} {WHERE[name]}" for name in EXECUTORS)
        raise UserError(f"python: executor: {executor!r} is not an executor (fix: executor=None or 'local' trains "
                        f"here, one point after another; {others})")
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise UserError(f"python: executor_options: {type(options).__name__} is not a dict "
                        "(fix: executor_options={'address': 'auto', 'num_cpus': 1} for 'ray', "
                        "{'partition': 'cpu'} for 'slurm')")
    if executor == "local" and options:
        key = sorted(map(str, options))[0]
        owners = [name for name, mod in EXECUTORS.items() if key in mod.OPTIONS] or list(EXECUTORS)
        raise UserError(f"python: executor_options: key {key!r} is for executor="
                        f"{' or '.join(repr(n) for n in owners)} (fix: drop executor_options, or give executor="
                        f"{owners[0]!r})")
    mod = EXECUTORS.get(executor)
    if mod is None:
        return executor, {}
    unknown = sorted(str(k) for k in options if k not in mod.OPTIONS)
    if unknown:
        first = sorted(mod.OPTIONS)[0]
        raise UserError(f"python: executor_options: unknown key {unknown[0]!r} (fix: use "
                        f"{', '.join(sorted(mod.OPTIONS))}: e.g. {mod.OPTIONS[first].split(',')[0]})")
    o = dict(options)

    def number(key, lo, default, inclusive):
        v = o.get(key, default)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (v >= lo if inclusive else v > lo) \
            and v == v and v != float("inf")
        if not ok:
            raise UserError(f"python: executor_options: {key}: {v!r} is not a number {'>=' if inclusive else '>'} "
                            f"{lo} (fix: {mod.OPTIONS[key]})")
        return v

    mod.check(o, number)
    return executor, o
