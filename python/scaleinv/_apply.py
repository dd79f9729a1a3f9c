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
from ._core import UserError, _name, _number
from ._tensors import rms

OPTIMIZERS = ("sgd", "adam", "adamw")


def _layout(module, pname, p):
    """How the tensor's dimensions read, from the layer that owns it (src/adapt/own_model.h):
    out_in [out, in, ...] for nn.Linear, convolutions, RNN weights and MultiheadAttention's packed
    in_proj_weight [3d, d]; in_out for nn.Embedding and transposed convolutions; vector for 1-D
    tensors; bare for a parameter no known layer owns (its growing dimensions decide)."""
    if p.dim() <= 1:
        return "vector"
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)) and pname == "weight":
        return "in_out"  # [num_embeddings, embedding_dim]: fan-in is the index, fan-out the width
    conv_t = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    if isinstance(module, conv_t) and pname == "weight":
        return "in_out"  # [in, out / groups, k...]
    if isinstance(module, (nn.Linear, nn.Bilinear, nn.Conv1d, nn.Conv2d, nn.Conv3d)) and pname == "weight":
        return "out_in"
    if isinstance(module, nn.MultiheadAttention) and pname.endswith("_weight"):
        return "out_in"  # in_proj_weight [3d, d] (q, k, v row blocks) or q/k/v_proj_weight
    if isinstance(module, nn.RNNBase) and pname.startswith("weight_"):
        return "out_in"  # weight_ih_l0 [gates * h, in], weight_hh_l0 [gates * h, h]
    return "bare"


def named_tensors(model):
    """(name, module, parameter name, tensor) of every trainable tensor, names as named_parameters()
    gives them; a tensor shared under two names appears twice."""
    out = []
    for mname, mod in model.named_modules(remove_duplicate=False):
        for pname, p in mod.named_parameters(recurse=False):
            if p.requires_grad:
                out.append((f"{mname}.{pname}" if mname else pname, mod, pname, p))
    return out


def _has_attention(model):
    """True where a module is nn.MultiheadAttention or is named like an attention (nanoGPT's
    CausalSelfAttention, llama2.c's Attention): the attention-logit note applies."""
    return any(isinstance(m, nn.MultiheadAttention) or "attention" in type(m).__name__.lower()
               for m in model.modules())


def _spec(model):
    tensors, seen, tied = [], {}, []
    for name, mod, pname, p in named_tensors(model):
        if p.is_complex():
            raise UserError(f"python: {name}: a complex tensor ({p.dtype}) has no role in the table "
                            "(fix: keep it out of the model's parameters, or split it into real and imaginary parts)")
        if id(p) in seen:
            if seen[id(p)] != name:
                tied.append({"name": name, "shares": seen[id(p)], "layout": _layout(mod, pname, p)})
            continue
        seen[id(p)] = name
        tensors.append({"name": name, "shape": list(p.shape), "layout": _layout(mod, pname, p), "rms": rms(p, torch.float64) or 0.0})
    return tensors, tied


def _check_plan_args(model, base, delta, param, optimizer, weight_decay, overrides):
    for field, m in (("model", model), ("base", base), ("delta", delta)):
        if not isinstance(m, nn.Module):
            raise UserError(f"python: {field}: a {type(m).__name__}, not a torch.nn.Module (fix: pass the model "
                            "built at the target width, and the same class at the base and a second width)")
    _name("param", param, "param='mup' (scaleinv.presets() lists the rows)")
    if optimizer not in OPTIMIZERS:
        raise UserError(f"python: optimizer: {optimizer!r} is not one of {', '.join(OPTIMIZERS)} "
                        "(fix: use one of them; muon and adafactor run on scaleinv's C++ optimizers)")
    _number("weight_decay", weight_decay, "weight_decay=0.1 (a per-step fraction lr * weight_decay)", lo=0)
    if overrides is not None:
        if not isinstance(overrides, dict):
            raise UserError(f"python: overrides: a {type(overrides).__name__}, not a dict "
                            "(fix: overrides={'regex': 'role'}, e.g. {'head': 'readout'})")
        for k, v in overrides.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise UserError(f"python: overrides: {k!r}: {v!r} is not pattern: role as two strings "
                                "(fix: overrides={'head': 'readout'}; roles: embedding, hidden, readout, vector, attention)")


def _check_optimizer_args(lr, betas, eps, momentum):
    _number("lr", lr, "lr=1e-3, the LR tuned at the base width", lo=0, lo_open=True)
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise UserError(f"python: betas: {betas!r} is not a pair (fix: betas=(0.9, 0.999))")
    for i, b in enumerate(betas):
        _number(f"betas[{i}]", b, "betas=(0.9, 0.999), each in [0, 1)", lo=0, hi=1, hi_open=True)
    _number("eps", eps, "eps=1e-8", lo=0)
    _number("momentum", momentum, "momentum=0.9, in [0, 1)", lo=0, hi=1, hi_open=True)


def plan(model, base, delta, param="mup", optimizer="adamw", weight_decay=0.0, overrides=None):
    """The roles and per-tensor factors without touching anything: a dict with m, k, tensors
    [{name, role, in_block, why, init, lr, wd, eps, fan_in, fan_out, m}], ties [{tensor, use,
    tensor_role, use_role, readout, exponent, multiplier}] (a tied embedding's readout multiplier,
    which apply installs as a forward hook), notes (what your forward must do itself: residual branch
    multipliers, the attention logit scale)."""
    _check_plan_args(model, base, delta, param, optimizer, weight_decay, overrides)
    target, tied = _spec(model)
    spec = {"base": _spec(base)[0], "delta": _spec(delta)[0], "target": target, "tied": tied,
            "attention": _has_attention(model),
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
    Tied embeddings (nanoGPT's lm_head.weight = wte.weight): the tensor takes the embedding's init
    and LR, and the layer reading it as the readout gets a forward hook multiplying its output by
    the plan's ties[i]["multiplier"] (m^-1 under mup); the handles are `model.scaleinv_hooks`
    (h.remove() takes a hook off). A model apply has already rescaled is refused.
    """
    if getattr(model, "scaleinv_plan", None) is not None:
        raise UserError("python: model: apply has already rescaled this model (its init and hooks are applied) "
                        "(fix: build a fresh model and apply once)")
    _check_optimizer_args(lr, betas, eps, momentum)
    p = plan(model, base, delta, param, optimizer, weight_decay, overrides)
    entries = named_tensors(model)
    params = {name: t for name, _, _, t in entries}
    owners = {name: mod for name, mod, _, _ in entries}
    # Every check has passed and the optimizer is built before the model is touched: a refused call
    # leaves the model as it was, and a retry rescales once.
    lr, weight_decay, eps, momentum = float(lr), float(weight_decay), float(eps), float(momentum)
    groups = []
    for t in p["tensors"]:
        g_lr = lr * t["lr"]
        frac = lr * weight_decay * t["wd"]
        g = {"params": [params[t["name"]]], "lr": g_lr, "weight_decay": frac / g_lr if g_lr > 0 else 0.0,
             "name": t["name"], "role": t["role"], "scaleinv_lr": g_lr}
        if optimizer != "sgd":
            g["eps"] = eps * t["eps"]
        groups.append(g)
    if optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=lr, betas=tuple(float(b) for b in betas), eps=eps, weight_decay=weight_decay)
    elif optimizer == "adam":
        opt = torch.optim.Adam(groups, lr=lr, betas=tuple(float(b) for b in betas), eps=eps)
    else:
        opt = torch.optim.SGD(groups, lr=lr, momentum=momentum)
    with torch.no_grad():
        for t in p["tensors"]:
            if t["init"] != 1.0:
                params[t["name"]].mul_(t["init"])
    hooks = []
    for tie in p["ties"]:
        if tie["readout"] and tie["multiplier"] != 1.0:
            hooks.append(owners[tie["readout"]].register_forward_hook(_multiply_output(tie["multiplier"])))
    opt.scaleinv_plan = p
    object.__setattr__(model, "scaleinv_plan", p)
    object.__setattr__(model, "scaleinv_hooks", hooks)
    return opt


def _multiply_output(factor):
    def hook(module, inputs, output):
        return output * factor
    return hook
