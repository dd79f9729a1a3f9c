"""Learning-rate schedules that keep apply's per-tensor ratios.

apply returns one parameter group per tensor, each with the LR the table gives it (base LR x
m^-c). A schedule must scale every group by the same factor. LambdaLR, LinearLR, SequentialLR of
those, and CosineAnnealingLR with eta_min=0 do; a float eta_min, OneCycleLR(max_lr=float),
CyclicLR(base_lr=float), ReduceLROnPlateau(min_lr=float > 0) and a trainer that sets every group's
lr to one value flatten the groups toward one LR, which undoes the parameterization.

    opt = scaleinv.apply(model, base, delta, param="mup", lr=3e-3)
    sched = scaleinv.lr_schedule(opt, lambda step: min(1.0, (step + 1) / 100))  # warmup
    scaleinv.check_schedule(sched)   # raises UserError where a schedule flattens the ratios
"""
import copy
import math
import warnings

import torch

from ._core import UserError, _integer, _number


def lr_schedule(optimizer, factor):
    """A LambdaLR multiplying every group's own LR by factor(step): the safe form of any schedule."""
    if not callable(factor):
        raise UserError("python: factor: not a function of the step (fix: pass e.g. lambda step: 1.0)")
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _ratios(groups):
    lr0 = groups[0]["lr"]
    return [g["lr"] / lr0 if lr0 > 0 else math.nan for g in groups]


def _default_steps(sched):
    """1000, or fewer where the scheduler has a last step of its own (OneCycleLR's total_steps)."""
    total = getattr(sched, "total_steps", None)
    return int(total) - 1 if isinstance(total, int) and total > 1 else 1000


def check_schedule(scheduler, steps=None, rtol=1e-6):
    """Steps a copy of the scheduler (and its optimizer) `steps` times (default 1000, or up to the
    scheduler's own last step: OneCycleLR's total_steps) and raises UserError, one line naming the
    scheduler, the step and the group, where the groups' LR ratios move by more than rtol: the
    schedule flattens the parameterization's per-tensor LRs; or where a group's LR is not a finite
    number >= 0. ReduceLROnPlateau is fed a metric that never improves, so that every reduction
    happens. A scheduler that ends before `steps` (torch's "Tried to step N times") is checked up to
    its end. Returns None where the ratios hold (the user's scheduler and optimizer are not
    touched)."""
    if steps is not None:
        steps = _integer("steps", steps, "steps=1000, the number of scheduler steps to check (>= 1)", 1, 10_000_000)
    _number("rtol", rtol, "rtol=1e-6, a finite relative tolerance > 0", lo=0, lo_open=True)
    name = type(scheduler).__name__
    opt = getattr(scheduler, "optimizer", None)
    if opt is None or not getattr(opt, "param_groups", None):
        raise UserError(f"python: scheduler: {name} has no optimizer with parameter groups "
                        "(fix: pass the scheduler built on the optimizer apply returned)")
    sched = copy.deepcopy(scheduler)  # deep-copies its optimizer with it, references kept
    if steps is None:
        steps = _default_steps(sched)
    groups = sched.optimizer.param_groups
    # The LRs apply gave each group (kept in the group as scaleinv_lr: a scheduler may already have
    # overwritten lr and initial_lr when it was built, as OneCycleLR does); else initial_lr.
    want = [g.get("scaleinv_lr", g.get("initial_lr", g["lr"])) for g in groups]
    want = [w / want[0] if want[0] > 0 else math.nan for w in want]
    plateau = isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau)
    for step in range(0, steps + 1):
        if step:
            with warnings.catch_warnings():  # torch's "optimizer.step() before lr_scheduler.step()": no training here
                warnings.simplefilter("ignore")
                try:
                    sched.step(1.0) if plateau else sched.step()
                except ValueError as e:
                    if "Tried to step" in str(e):  # the scheduler's own end (OneCycleLR): checked up to it
                        return None
                    raise
        for g in groups:
            lr = g["lr"]
            if isinstance(lr, torch.Tensor):
                lr = float(lr)
            if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr >= 0):
                raise UserError(f"python: scheduler: {name} sets group '{g.get('name', '?')}' to lr {lr!r} at step "
                                f"{step} (fix: a schedule factor that stays a finite number >= 0)")
        got = _ratios(groups)
        for g, w, r in zip(groups, want, got):
            if math.isfinite(w) and math.isfinite(r) and abs(r - w) > rtol * abs(w):
                gname = g.get("name", "?")
                raise UserError(f"python: scheduler: {name} changes the per-tensor LR ratios by step {step} (group "
                                f"'{gname}' at {r / w:.3g}x its ratio to the first group) (fix: use "
                                "scaleinv.lr_schedule(opt, fn) or LambdaLR; CosineAnnealingLR with eta_min=0; no "
                                "float floor or peak such as eta_min, min_lr, max_lr or base_lr)")
    return None
