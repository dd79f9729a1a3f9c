"""Apply a row of the table to a model scaleinv did not write (src/brain/adapt/own_model.h).

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

# The optimizer kinds' rows (src/brain/optim/optimizer_kinds.h): apply builds a torch optimizer for those
# with a python_class, and reads its other traits (epsilon, fields) from the row, never from the name.
KINDS = {row["kind"]: row for row in json.loads(_scaleinv.optimizer_kinds())}
OPTIMIZERS = tuple(k for k, row in KINDS.items() if row["python_class"])
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


def _is_hf_conv1d(m):
    """transformers' Conv1D (GPT-2, GPT-J's ancestors): weight [nx, nf] = [in, out], forward x @ W + b."""
    return type(m).__name__ == "Conv1D" and hasattr(m, "nf") and hasattr(m, "nx")


def _is_router(m):
    """A mixture-of-experts router that holds its [E, d] matrix as a bare parameter and reads it with
    F.linear (transformers 5.x: MixtralTopKRouter, Qwen2MoeTopKRouter, OlmoeTopKRouter, ...)."""
    name = type(m).__name__
    return not isinstance(m, nn.Linear) and (name.endswith("Router") or name.endswith("MoEGate"))


_CONV_T = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
# How a tensor's dimensions read, from the layer that owns it (first match wins; src/brain/adapt/own_model.h):
# (owner test, parameter-name test, layout, what the layer stores)
_LAYOUTS = (
    (lambda m: isinstance(m, (nn.Embedding, nn.EmbeddingBag)), lambda n: n == "weight", "in_out",
     "[num_embeddings, embedding_dim]: fan-in is the index, fan-out the width"),
    (lambda m: isinstance(m, _CONV_T), lambda n: n == "weight", "in_out", "[in, out / groups, k...]"),
    (lambda m: isinstance(m, (nn.Linear, nn.Bilinear, nn.Conv1d, nn.Conv2d, nn.Conv3d)), lambda n: n == "weight",
     "out_in", "[out, in, ...]"),
    (lambda m: isinstance(m, nn.MultiheadAttention), lambda n: n.endswith("_weight"), "out_in",
     "in_proj_weight [3d, d] (q, k, v row blocks) or q/k/v_proj_weight"),
    (lambda m: isinstance(m, nn.RNNBase), lambda n: n.startswith("weight_"), "out_in",
     "weight_ih_l0 [gates * h, in], weight_hh_l0 [gates * h, h]"),
    (_is_hf_conv1d, lambda n: n == "weight", "in_out", "transformers' Conv1D [in, out] (x @ W)"),
    (_is_router, lambda n: n == "weight", "out_in", "a router's [E, d] read by F.linear"),
)


def _layout(module, pname, p):
    """How the tensor's dimensions read (_LAYOUTS): out_in [out, in, ...], in_out [in, out, ...],
    vector for 1-D tensors; bare for a parameter no known layer owns (its growing dimensions decide:
    a stack [E, out, in] of expert matrices, a position embedding)."""
    if p.dim() <= 1:
        return "vector"
    for owner, pred, layout, _ in _LAYOUTS:
        if owner(module) and pred(pname):
            return layout
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


_LAZY = getattr(nn.parameter, "UninitializedTensorMixin", ())


def _spec(model):
    tensors, seen, tied = [], {}, []
    for name, mod, pname, p in named_tensors(model):
        kind = _sharded_kind(p)
        if kind is not None:
            raise UserError(f"python: model: {name} is {kind}, sharded before scaleinv saw it: its shape and init are "
                            "one rank's piece (fix: call scaleinv.apply on the unsharded model first, then fully_shard; "
                            "the optimizer apply returns follows the sharded tensors)")
        if isinstance(p, _LAZY):
            raise UserError(f"python: model: {name} of {type(mod).__name__} is a lazy parameter, its shape not yet known "
                            "(created at the first forward), so it has no fan-in or fan-out to read a role from "
                            "(fix: run one forward pass on a batch before scaleinv.plan or apply, in base and delta too, "
                            "or build the layer with its sizes, e.g. nn.Linear(in, out))")
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
        cpp_only = [k for k in KINDS if k not in OPTIMIZERS]
        raise UserError(f"python: optimizer: {optimizer!r} is not one of {', '.join(OPTIMIZERS)} "
                        f"(fix: use one of them; {', '.join(cpp_only)} run on scaleinv's C++ optimizers)")
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
    base_t, delta_t = _spec(base)[0], _spec(delta)[0]
    _check_stacks(target, base_t, delta_t)
    scales = _module_scales(model, base, delta)
    spec = {"base": base_t, "delta": delta_t, "target": target, "tied": tied,
            # the generic note on attention logits is left out where every attention sets its own
            # scale, which the plan accounts for below
            "attention": _has_attention(model) and not _all_attention_scaled(model),
            "overrides": [{"pattern": k, "role": v} for k, v in (overrides or {}).items()]}
    p = json.loads(_scaleinv.plan(param, optimizer, float(weight_decay), json.dumps(spec)))
    e = float(p["table"]["attn_logit"])
    p["module_scales"] = []
    for sc in scales:
        if sc["kind"] == "attention":
            # the table's logit scale d_head0^-1/2 (d_head/d_head0)^-e, kept relative to the base
            # module's own value (a per-layer factor such as GPT-2's 1/(layer+1) stays)
            want = sc["base"] * (sc["d"] / sc["d0"]) ** (-e)
            what = (f"{sc['module']} ({sc['cls']}) scales its attention logits itself by {sc['attribute']} = "
                    f"{sc['value']:.6g} (d_head {sc['d']}; {sc['base']:.6g} at the base's d_head {sc['d0']}); the table asks "
                    f"for d_head0^-1/2 (d_head/d_head0)^-{e:g}")
            cannot = None
            if e != 0.5 and sc["d"] != sc["d0"]:
                # where it cannot pass: with d_head growing and logits ~ 1/d_head the logits start near
                # zero, so the query and key projections' output gradients scale as d^-3/2 at init
                # (sqrt(d_head) incoherent terms over d_head), past the d^-1 of the hidden rows
                cannot = (f"{sc['module']} ({sc['cls']}): d_head grows ({sc['d0']} -> {sc['d']}) under "
                          f"d_head^-{e:g} logits, so its query and key projections' output gradients (h') scale "
                          "as d^-3/2 at init, not the d^-1 of the hidden rows they are planned as: the check "
                          "fails there (fix: keep d_head fixed and let the heads grow with width)")
        else:
            cannot = None
            # the table's embedding multiplier is in the init and LR (seed 000 eq. 28); the family's
            # own width-dependent factor stays at its base value
            want = sc["base"]
            what = (f"{sc['module']} ({sc['cls']}) multiplies its output by {sc['attribute']} = {sc['value']:.6g} "
                    f"({sc['base']:.6g} at the base width); the table's embedding multiplier is already in its init and LR")
        same = math.isclose(want, sc["value"], rel_tol=1e-9)
        sc = dict(sc, set_to=want)
        p["module_scales"].append(sc)
        p["notes"].append(what + (": the same at this width, left as it is" if same
                                  else f": apply sets it to {want:.6g}"))
        if cannot:
            p["notes"].append(cannot)
    p["notes"].extend(_normalized_readouts(model, p))
    return p


# Normalization layers, each with the number of features it normalizes over, for the readouts that
# feed one (_normalized_readouts). Batch, instance and group norms normalize per channel over the
# batch and positions; layer and RMS norms over the features.
_NORMS = tuple(row for row in (
    (nn.modules.batchnorm._BatchNorm, lambda m: m.num_features),
    (nn.modules.instancenorm._InstanceNorm, lambda m: m.num_features),
    (nn.GroupNorm, lambda m: m.num_channels),
    (nn.LayerNorm, lambda m: tuple(m.normalized_shape)[-1]),
    (getattr(nn, "RMSNorm", None), lambda m: tuple(m.normalized_shape)[-1]),  # torch >= 2.4
) if row[0] is not None)


def _norm_features(m):
    for cls, features in _NORMS:
        if isinstance(m, cls):
            return features(m)
    return None


def _normalized_readouts(model, p):
    """One line per readout-like tensor (fan-in grows, fan-out fixed) that is not the model's
    output: its layer's next sibling (registration order: conv3 then bn3 in torchvision's
    Bottleneck) normalizes over its fixed outputs. The norm divides out the readout's m^-1 init, so
    the layer's output at init is as large as its update (not m^-1/2 of it) and the gradients below
    it scale as m^-1/2, not the m^-1 the theory's readout gives: the check cannot pass there."""
    readouts = {t["name"]: t for t in p["tensors"] if t["role"] == "readout"}
    out = []
    for pname, parent in model.named_modules():
        children = list(parent.named_children())
        for (cname, child), (nname, nxt) in zip(children, children[1:]):
            full = f"{pname}.{cname}" if pname else cname
            t = readouts.get(f"{full}.weight")
            if t is None or _norm_features(nxt) != t["fan_out"]:
                continue
            norm = f"{pname}.{nname}" if pname else nname
            out.append(f"{full} ({type(child).__name__}) is readout-like (fan-in {t['fan_in']} grows, fan-out "
                       f"{t['fan_out']} fixed) and {norm} ({type(nxt).__name__}) normalizes its output: the norm divides "
                       "out its m^-1 init and the gradients below it scale as m^-1/2, not the theory's m^-1, so the "
                       "check fails there (fix: grow its output with width too, e.g. the stream's channels, or "
                       "drop the norm after it)")
    return out


def _check_stacks(target, base, delta):
    """A bare parameter of rank >= 3 with two growing dimensions is read as a stack of [out, in]
    matrices whose fixed (expert) dimensions come first; one whose fixed dimension sits between or
    after the growing ones is refused before anything is planned."""
    by_base = {t["name"]: t for t in base}
    by_delta = {t["name"]: t for t in delta}
    for t in target:
        b, d = by_base.get(t["name"]), by_delta.get(t["name"])
        if t["layout"] != "bare" or len(t["shape"]) < 3 or b is None or d is None or len(b["shape"]) != len(t["shape"]):
            continue
        grow = [i for i in range(len(t["shape"])) if b["shape"][i] != d["shape"][i]]
        if len(grow) >= 2 and any(i > grow[0] for i in range(len(t["shape"])) if i not in grow):
            fixed = [i for i in range(len(t["shape"])) if i not in grow and i > grow[0]]
            raise UserError(f"python: model: {t['name']} (a bare parameter of shape {t['shape']}, {b['shape']} in the base "
                            f"model): its fixed dimension {fixed[0]} ({t['shape'][fixed[0]]}) comes after a growing one, so it "
                            "cannot be read as a stack of [out, in] expert matrices (fix: store the stack with the expert "
                            "dimension first, [E, out, in] (e.g. nn.Parameter(w.permute(1, 0, 2).contiguous()) and index "
                            "w[e]), or hold one nn.Linear per expert in an nn.ModuleList)")


def _attention_scale_of(m):
    """(attribute, value, d_head) where the module sets its own attention logit scale as a float it
    reads at every forward (transformers 5.x: LlamaAttention.scaling = head_dim^-1/2, GPT2Attention's
    with its 1/(layer+1) option); else None."""
    v, d = getattr(m, "scaling", None), getattr(m, "head_dim", None)
    if isinstance(v, float) and isinstance(d, int) and not isinstance(d, bool):
        return "scaling", v, d
    return None


def _embedding_scale_of(m):
    """(attribute, value) where an embedding multiplies its output by a factor it holds (Gemma's
    embed_scale = sqrt(hidden_size), a float or a 0-d buffer); else None."""
    if not isinstance(m, nn.Embedding):
        return None
    v = getattr(m, "embed_scale", None)
    if torch.is_tensor(v) and v.numel() == 1:
        return "embed_scale", float(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return "embed_scale", float(v)
    return None


def _all_attention_scaled(model):
    """True where every attention-like module of the model sets its own logit scale (_attention_scale_of)."""
    att = [m for m in model.modules()
           if isinstance(m, nn.MultiheadAttention) or "attention" in type(m).__name__.lower()]
    return bool(att) and all(_attention_scale_of(m) is not None for m in att)


def _counterpart(mods, name):
    """The base model's module for a target module name: the same name, or the first module of the
    same name with its block index replaced (a deeper target)."""
    if name in mods:
        return mods[name]
    canon = _canonical(name)
    for k, m in mods.items():
        if _canonical(k) == canon:
            return m
    return None


def _canonical(name):
    return ".".join("*" if part.isdigit() else part for part in name.split("."))


def _module_scales(model, base, delta):
    """The multipliers a model family sets inside its modules (attention logit scales, embedding
    scales), each with its value in the base model and the head size that sets it."""
    bmods = dict(base.named_modules())
    out = []
    for name, m in model.named_modules():
        bm = _counterpart(bmods, name)
        if bm is None:
            continue
        att, bat = _attention_scale_of(m), _attention_scale_of(bm)
        if att is not None and bat is not None:
            out.append({"module": name, "cls": type(m).__name__, "kind": "attention", "attribute": att[0],
                        "value": att[1], "base": bat[1], "d": att[2], "d0": bat[2]})
            continue
        emb, bemb = _embedding_scale_of(m), _embedding_scale_of(bm)
        if emb is not None and bemb is not None:
            out.append({"module": name, "cls": type(m).__name__, "kind": "embedding", "attribute": emb[0],
                        "value": emb[1], "base": bemb[1]})
    return out


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
    row = KINDS[optimizer]
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
        if row["eps"] != "none":
            g["eps"] = eps * t["eps"]
        groups.append(g)
    opt = getattr(torch.optim, row["python_class"])(groups, **_torch_defaults(row, lr, betas, eps, momentum, weight_decay))
    with torch.no_grad():
        for t in p["tensors"]:
            if t["init"] != 1.0:
                params[t["name"]].mul_(t["init"])
        mods = dict(model.named_modules())
        for sc in p["module_scales"]:
            if not math.isclose(sc["set_to"], sc["value"], rel_tol=1e-9):
                _set_scale(mods[sc["module"]], sc["attribute"], sc["set_to"])
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


def _torch_defaults(row, lr, betas, eps, momentum, weight_decay):
    """The torch optimizer's keyword defaults from the fields the kind's row reads (every group sets
    its own lr, weight_decay and eps over them)."""
    kw = {"lr": lr}
    if row["eps"] != "none":
        kw["eps"] = eps
    if "beta1" in row["fields"]:
        kw["betas"] = tuple(float(b) for b in betas)
    if "momentum" in row["fields"]:
        kw["momentum"] = momentum
    if row["decay"] == "decoupled":
        kw["weight_decay"] = weight_decay
    return kw


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


def _set_scale(module, attribute, value):
    """A module's own multiplier (plan's module_scales) set in place: a float attribute, or a 0-d
    buffer filled (Gemma keeps embed_scale as a buffer and its float as scalar_embed_scale)."""
    cur = getattr(module, attribute)
    if torch.is_tensor(cur):
        cur.fill_(value)
        if isinstance(getattr(module, "scalar_" + attribute, None), float):
            setattr(module, "scalar_" + attribute, float(value))
    else:
        setattr(module, attribute, float(value))


def _multiply_output(factor):
    def hook(module, inputs, output):
        return output * factor
    return hook
