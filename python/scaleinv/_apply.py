"""Apply a row of the table to a model scaleinv did not write (src/adapt/own_model.h).

The row (a, b, c) is shifted to a' = 0 (seed 000 eq. 28), so the model's forward stays as written:
every tensor's init is rescaled in place and the optimizer gets one parameter group per tensor with
its own learning rate, weight decay and epsilon.

torch 2.x (docs/python.md#torch-2x-compile-ddp-fsdp2): a model wrapped by torch.compile or
DistributedDataParallel is planned through the module it wraps, under the same names. FSDP2's
fully_shard, called after apply, replaces every parameter by a sharded DTensor; the optimizer apply
returned follows its tensors there by name at its next step (before any state exists), so the
groups, their LRs and weight decays survive sharding. A model sharded before apply is refused.
"""
import json
import math
import warnings
import weakref

import torch
from torch import nn

import _scaleinv
from ._core import UserError, _name, _number
from ._tensors import rms

OPTIMIZERS = ("sgd", "adam", "adamw")
MIN_TORCH = (1, 13)  # the oldest torch the package claims (pyproject.toml; CI's PythonOldest.* tests)


def _torch_version():
    parts = []
    for piece in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _check_torch():
    if _torch_version() < MIN_TORCH:
        raise UserError(f"python: torch: {torch.__version__} is older than {MIN_TORCH[0]}.{MIN_TORCH[1]}, the oldest "
                        "torch scaleinv is tested on (fix: pip install 'torch>=1.13')")


def unwrap(model):
    """The module a torch.compile (OptimizedModule._orig_mod) or DistributedDataParallel (.module)
    wrapper runs, wrappers within wrappers included; any other module as it is. Its parameters are the
    wrapper's, under the names the user wrote."""
    seen = 0
    while seen < 8:
        inner = getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            ddp = getattr(torch.nn.parallel, "DistributedDataParallel", None)
            inner = model.module if ddp is not None and isinstance(model, ddp) else None
        if not isinstance(inner, nn.Module):
            return model
        model, seen = inner, seen + 1
    return model


def _sharded_kind(p):
    """'a DTensor (FSDP2's fully_shard or tensor parallel)' or 'FSDP1's FlatParameter' for a sharded
    parameter, else None."""
    cls = type(p)
    names = {c.__name__ for c in cls.__mro__}
    if "DTensor" in names:
        return "a DTensor (FSDP2's fully_shard, or tensor parallel)"
    if "FlatParameter" in names or getattr(p, "_is_flat_param", False):
        return "a FlatParameter (FullyShardedDataParallel)"
    return None


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
        kind = _sharded_kind(p)
        if kind is not None:
            raise UserError(f"python: model: {name} is {kind}, sharded before scaleinv saw it: its shape and init are "
                            "one rank's piece (fix: call scaleinv.apply on the unsharded model first, then fully_shard; "
                            "the optimizer apply returns follows the sharded tensors)")
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
    _check_torch()
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
    multipliers, the attention logit scale). A compiled or DDP-wrapped module is planned through the
    module it wraps (unwrap)."""
    _check_plan_args(model, base, delta, param, optimizer, weight_decay, overrides)
    model, base, delta = unwrap(model), unwrap(base), unwrap(delta)
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
    torch.compile and DDP wrappers are planned through the module they wrap (apply before or after
    wrapping). For FSDP2, apply before fully_shard: at each step the optimizer checks that its
    tensors are still the model's, and takes the sharded ones in their place (same groups) while it
    holds no state; a replacement after its first step raises UserError.
    """
    _check_torch()
    model = unwrap(model)
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
    if hasattr(opt, "register_step_pre_hook"):  # torch >= 2.0
        opt.scaleinv_rebind = opt.register_step_pre_hook(_follow_replaced_tensors(model, p))
        opt.scaleinv_ratio_check = opt.register_step_pre_hook(_warn_when_ratios_move)
    return opt


RATIO_RTOL = 1e-6  # check_schedule's default: a schedule's common factor keeps the ratios to ~1e-13


def _warn_when_ratios_move(opt, args, kwargs):
    """An optimizer step pre-hook (torch >= 2.0): once the groups' LRs are no longer apply's LRs
    times one common factor (a CosineAnnealingLR with a float eta_min, OneCycleLR(max_lr=float),
    ReduceLROnPlateau at its min_lr, a trainer that sets every group to one LR), warn, once per
    optimizer, naming the step and a group: the schedule is flattening the parameterization."""
    if getattr(opt, "scaleinv_ratio_warned", False):
        return None
    step = getattr(opt, "scaleinv_steps", 0) + 1  # the step about to be taken
    opt.scaleinv_steps = step
    first = None
    for g in opt.param_groups:
        want, lr = g.get("scaleinv_lr"), g.get("lr")
        if not isinstance(want, float) or not want > 0 or isinstance(lr, bool) or not isinstance(lr, (int, float)):
            continue  # a group apply did not make, or a tensor LR (not read: no sync in a compiled step)
        if first is None:
            first = lr / want
            continue
        factor = lr / want
        if abs(factor - first) > RATIO_RTOL * abs(first):
            opt.scaleinv_ratio_warned = True
            warnings.warn(f"scaleinv: the LR schedule changes the per-tensor LR ratios apply set (group "
                          f"'{g.get('name', '?')}' at {factor / first:.6g}x its ratio to the first group"
                          f" at optimizer step {step}): it flattens the "
                          "parameterization (fix: scaleinv.lr_schedule(opt, fn) or LambdaLR; CosineAnnealingLR with "
                          "eta_min=0; no float floor or peak such as eta_min, min_lr, max_lr or base_lr; "
                          "scaleinv.check_schedule(sched) raises where a schedule does this)", UserWarning, stacklevel=3)
            return None
    return None


def _follow_replaced_tensors(model, p):
    """An optimizer step pre-hook: where the model now holds another tensor under a group's name
    (FSDP2's fully_shard registers a sharded DTensor in each parameter's place; to_empty after meta
    init does the same), the group takes it, keeping its LR, weight decay and eps. Once the optimizer
    holds state for the old tensor the swap would lose it: UserError instead."""
    ref = weakref.ref(model)
    owners = {}
    for name, mod, pname, _ in named_tensors(model):
        owners.setdefault(name, (mod, pname))
    names = {t["name"] for t in p["tensors"]}
    owners = {k: v for k, v in owners.items() if k in names}

    def hook(opt, args, kwargs):
        if ref() is None:
            return None
        for g in opt.param_groups:
            owner = owners.get(g.get("name"))
            if owner is None or len(g["params"]) != 1:
                continue
            now = getattr(owner[0], owner[1], None)
            old = g["params"][0]
            if now is None or now is old:
                continue
            if opt.state.get(old):
                raise UserError(f"python: optimizer: the model's tensor {g['name']} was replaced after the optimizer's "
                                "first step (fully_shard or to_empty after training began), so its state would be lost "
                                "(fix: shard the model before the first step, right after scaleinv.apply)")
            g["params"] = [now]
        return None
    return hook


def _multiply_output(factor):
    def hook(module, inputs, output):
        return output * factor
    return hook
