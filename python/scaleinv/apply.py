"""Apply a row of the table to a model scaleinv did not write (src/adapt/own_model.h).

The row (a, b, c) is shifted to a' = 0 (seed 000 eq. 28), so the model's forward stays as written:
every tensor's init is rescaled in place and the optimizer gets one parameter group per tensor with
its own learning rate, weight decay and epsilon.
"""
import json
import math

import torch
from torch import nn

import _scaleinv
from ._core import UserError, rms

OPTIMIZERS = ("sgd", "adam", "adamw")


def _layout(module, pname, p):
    if p.dim() <= 1:
        return "vector"
    if isinstance(module, nn.Embedding) and pname == "weight":
        return "in_out"  # [num_embeddings, embedding_dim]: fan-in is the index, fan-out the width
    return "out_in"      # nn.Linear, nn.Conv*: [out, in, ...]


def named_tensors(model):
    """(name, module, parameter name, tensor) of every trainable tensor, names as named_parameters()
    gives them; a tensor shared under two names appears twice."""
    out = []
    for mname, mod in model.named_modules(remove_duplicate=False):
        for pname, p in mod.named_parameters(recurse=False):
            if p.requires_grad:
                out.append((f"{mname}.{pname}" if mname else pname, mod, pname, p))
    return out


def _spec(model):
    tensors, seen, tied = [], {}, []
    for name, mod, pname, p in named_tensors(model):
        if id(p) in seen:
            if seen[id(p)] != name:
                tied.append(name)
            continue
        seen[id(p)] = name
        tensors.append({"name": name, "shape": list(p.shape), "layout": _layout(mod, pname, p), "rms": rms(p, torch.float64) or 0.0})
    return tensors, tied


def plan(model, base, delta, param="mup", optimizer="adamw", weight_decay=0.0, overrides=None):
    """The roles and per-tensor factors without touching anything: a dict with m, k, tensors
    [{name, role, in_block, why, init, lr, wd, eps, fan_in, fan_out}], notes (what your forward
    must do itself: residual branch multipliers, the attention logit scale)."""
    if optimizer not in OPTIMIZERS:
        raise UserError(f"python: optimizer: '{optimizer}' is not one of {', '.join(OPTIMIZERS)} "
                        "(fix: use one of them; muon and adafactor run on scaleinv's C++ optimizers)")
    target, tied = _spec(model)
    spec = {"base": _spec(base)[0], "delta": _spec(delta)[0], "target": target, "tied": tied,
            "overrides": [{"pattern": k, "role": v} for k, v in (overrides or {}).items()]}
    return json.loads(_scaleinv.plan(param, optimizer, float(weight_decay), json.dumps(spec)))


def apply(model, base, delta, param="mup", optimizer="adamw", lr=1e-3, weight_decay=0.0,
          betas=(0.9, 0.999), eps=1e-8, momentum=0.0, overrides=None):
    """Rescale model's init in place and return a torch optimizer over it.

    base, delta: the same model class built at the base width (where lr was tuned) and at a second
    width (it only tells which dimensions grow); overrides: {regex: role} for tensors whose role
    the shapes do not tell. optimizer: "adamw" (torch.optim.AdamW), "adam" (no weight decay), "sgd".
    Weight decay is a per-step fraction lr * weight_decay at the base, scaled per tensor by the
    table. The plan is kept on the optimizer and the model as `scaleinv_plan`.
    """
    p = plan(model, base, delta, param, optimizer, weight_decay, overrides)
    params = {name: t for name, _, _, t in named_tensors(model)}
    groups = []
    with torch.no_grad():
        for t in p["tensors"]:
            tensor = params[t["name"]]
            if t["init"] != 1.0:
                tensor.mul_(t["init"])
            g_lr = lr * t["lr"]
            frac = lr * weight_decay * t["wd"]
            g = {"params": [tensor], "lr": g_lr, "weight_decay": frac / g_lr if g_lr > 0 else 0.0,
                 "name": t["name"], "role": t["role"]}
            if optimizer != "sgd":
                g["eps"] = eps * t["eps"]
            groups.append(g)
    if optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    elif optimizer == "adam":
        opt = torch.optim.Adam(groups, lr=lr, betas=betas, eps=eps)
    else:
        opt = torch.optim.SGD(groups, lr=lr, momentum=momentum)
    opt.scaleinv_plan = p
    object.__setattr__(model, "scaleinv_plan", p)
    return opt
