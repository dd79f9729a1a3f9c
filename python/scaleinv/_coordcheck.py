"""The theory-judged coordinate check of your own model (issue 15).

Measured here with torch (forward hooks on your modules, names as in named_modules()), judged in the
C++ core exactly as `scaleinv coordcheck` judges the zoo's models (src/engine/coordcheck/coordcheck.h): per
(quantity, module, step) the log-log slope against width with a 95% interval over seeds, compared
with the theory's exponent for the module's role.
"""
import contextlib
import ctypes
import json
import math
import os
import platform
import shutil
import sys
import time

import torch
import torch.nn.functional as F

import _scaleinv
from ._core import UserError, _integer, _name, _number
from ._tensors import rms
from ._apply import apply, unwrap

_TORCH_MAJOR = int(torch.__version__.split(".")[0])


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)
_HUGE_ARENA = 4 << 30


@contextlib.contextmanager
def _kept_heap():
    """During the check, freed memory stays in the heap, in transparent huge pages, as the CLI keeps it
    (src/cli/main.cpp). torch's CPU tensors come from malloc, and glibc serves every block over 32 MiB
    by a fresh mmap that free() unmaps: each width-8192 temporary (a gradient, Adam's denominator, a
    weight copy, 256 MiB) then page-faults its 65536 pages afresh, ~130 ms against ~13 ms to read it
    (bench/mup_peer.py's grid: most of the Python check's time beside the arithmetic). glibc only,
    and not where the user set malloc's own knobs (MALLOC_*_ or GLIBC_TUNABLES); afterwards glibc's
    defaults are back and malloc_trim gives the freed memory to the system."""
    libc = None
    if (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
            and not any(k.startswith("MALLOC_") or k == "GLIBC_TUNABLES" for k in os.environ)):
        try:
            libc = ctypes.CDLL(None)
            libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            libc.malloc.restype = ctypes.c_void_p
            libc.malloc.argtypes = [ctypes.c_size_t]
            libc.free.argtypes = [ctypes.c_void_p]
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            libc = None
    if libc is None:
        yield
        return
    libc.mallopt(_M_MMAP_MAX, 0)
    libc.mallopt(_M_TRIM_THRESHOLD, -1)  # as size_t: never give the heap's top back
    arena = libc.malloc(_HUGE_ARENA)  # address space only: pages are touched as tensors use them
    if arena:
        huge = 2 << 20
        begin = (arena + huge - 1) & ~(huge - 1)
        libc.madvise(begin, _HUGE_ARENA - (begin - arena), 14)  # MADV_HUGEPAGE (THP "madvise")
        libc.free(arena)
    try:
        yield
    finally:
        libc.mallopt(_M_MMAP_MAX, 65536)  # glibc's defaults (DEFAULT_MMAP_MAX, DEFAULT_TRIM_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, 128 * 1024)
        libc.malloc_trim(0)


def _fused_adam(opt):
    """The check's own Adam/AdamW (apply's, fresh) steps through torch's fused kernel where torch has
    one for the tensors' device (CPU from torch 2.4): the same update in one pass over each tensor
    instead of the per-tensor loop's eight, each of the latter writing a width^2 temporary (2.5x
    faster at width 8192; the parameters agree to an ulp). Left as built otherwise."""
    if type(opt) not in (torch.optim.Adam, torch.optim.AdamW) or opt.state:
        return
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
        devices = set(_get_fused_kernels_supported_devices())
    except (ImportError, AttributeError):
        return
    for g in opt.param_groups:
        if "fused" not in g or g.get("foreach") or g.get("differentiable") or g.get("capturable"):
            return
        if not all(p.device.type in devices and p.is_floating_point() for p in g["params"]):
            return
    for g in opt.param_groups:
        g["fused"] = True
    opt.defaults["fused"] = True


def _orthogonalise(x, basis):
    """x minus its projection on the basis vectors, twice (classical Gram-Schmidt repeated, as the
    CLI's spectral_norms does it)."""
    if not basis:
        return x
    q = torch.stack(basis)
    for _ in range(2):
        x = x - q.t().mv(q.mv(x))
    return x


_GRAM_BLOCK = 1 << 19  # elements of a row block of the fused m^T (m x): 2 MiB of float32, one L2 cache
_GRAM_FUSE = 1 << 22  # matrices up to this many elements (16 MiB) take the two mv's: cache-resident


def _gram_mv(m, x):
    """m^T (m x) with m read from memory once: row block by row block, s = m_b x, then m_b^T s added
    while m_b is still in the cache (the two plain mv's read a matrix larger than the cache twice,
    and that read is their whole cost). A small matrix stays in the cache between the two mv's; on
    a GPU the two mv's too (its bandwidth makes the second cheap, and a block loop would be hundreds
    of small kernels)."""
    rows, cols = m.shape
    if m.device.type != "cpu" or m.numel() <= _GRAM_FUSE or m.stride(1) != 1:
        return torch.mv(m.t(), torch.mv(m, x))
    rb = max(1, _GRAM_BLOCK // cols)
    acc = torch.zeros(cols, dtype=m.dtype, device=m.device)
    s = torch.empty(rb, dtype=m.dtype, device=m.device)
    for i in range(0, rows, rb):
        b = m[i:i + rb]
        sb = s[:b.shape[0]]
        torch.mv(b, x, out=sb)
        acc.addmv_(b.t(), sb)
    return acc


# When the Lanczos estimate stops: within SPECTRAL_TOL relative by its own convergence, or after
# SPECTRAL_STEPS steps (the CLI's spectral_norms defaults, src/engine/coordcheck/coordcheck.h).
SPECTRAL_STEPS = 32
SPECTRAL_TOL = 1e-3


def _largest_ritz(alpha, beta):
    """The largest eigenvalue of the Lanczos tridiagonal (alpha on the diagonal, beta beside it)."""
    t = torch.diag(torch.tensor(alpha, dtype=torch.float64))
    if len(alpha) > 1:
        b = torch.tensor(beta[:len(alpha) - 1], dtype=torch.float64)
        t = t + torch.diag(b, 1) + torch.diag(b, -1)
    return float(torch.linalg.eigvalsh(t)[-1])


def spectral_norm(w, steps=SPECTRAL_STEPS, tol=SPECTRAL_TOL):
    """Largest singular value by Lanczos on m^T m (m = w with trailing dims flattened), fully
    reorthogonalised, from the fixed start cos(0.7 i + 0.3), stopped as the CLI's coordinate check
    stops it (src/engine/coordcheck/spectral_norm.cpp says why): at the first step k >= 2 where k/2 times the
    estimate's last rise is within `tol` of it (no gap at the top: the error falls as 1/k^2, ref.
    [lanczos-kw]; with one, faster), or after `steps` steps. A lower bound: measured within 4e-4 on
    iid matrices up to 8192^2 (11-32 steps), 2e-5 on trained weights and Adam updates (3-7 steps);
    exact below the rank of the steps taken; None where the matrix is not finite.

    This is the Golub-Kahan-Lanczos bidiagonalisation of the same start (Golub and Van Loan, Matrix
    Computations, sec. 10.4) in another form: its V_k and Lanczos's Q_k on m^T m (sec. 10.1) span
    the same Krylov space K_k(m^T m, v), and its bidiagonal B_k gives B_k^T B_k = T_k, Lanczos's
    tridiagonal, so sqrt(lambda_max(T_k)) = sigma_max(B_k): the same estimate, up to rounding. The
    bidiagonalisation takes 2k - 1 products (m v, m^T u), each a full read of m; Lanczos takes k
    products m^T (m q), each formed in one read of m by _gram_mv. On the check's width-8192 matrices
    (256 MiB), the read is the cost.

    Why not the C++ one through _scaleinv: the extension is the torch-free brain (it builds and
    imports with no libtorch, beside whichever torch the user has, 1.13 to 2.14), while the norm
    works on the user's torch tensors, on their device, through that torch's BLAS. So the two are
    one algorithm, stopping rule and constants (SPECTRAL_STEPS, SPECTRAL_TOL), with twin tests
    (test_coordcheck's SpectralNorm and CoordCheck.SpectralNormStopsWithinItsToleranceByItsOwnConvergence)."""
    m = w.detach().reshape(w.shape[0], -1)
    # m^T m has rank <= rows: a start with a part in its null space needs rank + 1 steps to reach the
    # top eigenvector (a [1, d] gate after one step is only |m q|).
    k = min(steps, m.shape[0] + 1, m.shape[1])
    q = torch.cos(torch.arange(m.shape[1], dtype=m.dtype, device=m.device) * 0.7 + 0.3)
    nq = float(q.norm())
    if not math.isfinite(nq):
        return None
    q = q / nq
    qs, alpha, beta = [], [], []
    scale, eps = 0.0, 1e-12 if m.dtype == torch.float64 else 1e-5
    theta = 0.0
    for j in range(k):
        qs.append(q)
        r = _gram_mv(m, q)
        a = float(torch.dot(r, q))
        if not math.isfinite(a):
            return None
        alpha.append(a)
        prev, theta = theta, math.sqrt(max(_largest_ritz(alpha, beta), 0.0))
        if j + 1 == k or (j >= 1 and (j + 1) * (theta - prev) / 2 <= tol * theta):
            return theta
        r = r - a * q
        if beta:
            r = r - beta[-1] * qs[-2]
        r = _orthogonalise(r, qs)
        bn = float(r.norm())
        if not math.isfinite(bn):
            return None
        # An invariant subspace (rank < k, a zero matrix): bn is rounding noise there, not 0, and a
        # vector normalised from noise keeps components along qs of (noise / bn) that m^T m then
        # amplifies step by step. So stop where bn <= eps * scale (scale ~ ||T||): T's largest
        # eigenvalue is then within bn of m^T m's (Golub and Van Loan sec. 10.1.4), sigma within
        # eps / 2 relative; as the CLI's spectral_norms.
        scale = max(scale, abs(a) + bn)
        if not bn > eps * scale:
            return theta
        beta.append(bn)
        q = r / bn
    return theta


class CoordCheckResult:
    """passed (bool), rows (list of dicts: module, quantity, step, measured, predicted, matches,
    stable, tolerance, maps_to, zero: exactly zero at every width and seed, not judged,
    past_finite_width: for a width row over >= 4 widths that missed its prediction, the exponent
    past the 1/d finite-width term {e, e_half_width, c, c_half_width, matches}, else None,
    below: how far below its prediction the row may measure on top of its tolerance (the untied
    readout's dh: its init term, measured; docs/coordcheck.md), 0.0 elsewhere),
    failures (lines), json (the CLI's JSON), plots (stems written);
    str() is the CLI's printed table."""

    def __init__(self, data, text, plots):
        self.json = data
        self.text = text
        self.plots = list(plots)
        self.passed = bool(data["pass"])
        self.failures = list(data["failures"])
        self.rows = [{"module": r["layer"], "quantity": r["quantity"], "step": r["step"], "measured": r["slope"],
                      "predicted": r["predicted"], "matches": r["matches"], "stable": r["stable"],
                      "tolerance": r["tolerance"], "maps_to": r["maps_to"], "zero": bool(r.get("zero", False)),
                      "past_finite_width": r.get("past_finite_width"), "below": float(r.get("below", 0.0))}
                     for r in data["rows"]]

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"<CoordCheckResult passed={self.passed} rows={len(self.rows)} failures={len(self.failures)}>"


def _record_modules(model):
    """Modules holding a trainable tensor directly: their outputs are recorded."""
    mods = []
    for name, mod in model.named_modules():
        if name and any(p.requires_grad for p in mod.parameters(recurse=False)):
            mods.append((name, mod))
    return mods


QUANTITIES = ("h", "dh", "h'", "W'", "dW", "||W||", "||dW||")
_FILE_NAMES = {"hgrad": "h'", "wgrad": "W'", "dw": "dW", "wspec": "||W||", "dwspec": "||dW||"}


def _quantity_set(quantities):
    if quantities is None or quantities == "all":
        return set(QUANTITIES)
    names = quantities.split(",") if isinstance(quantities, str) else list(quantities)
    out = set()
    for q in names:
        q = _FILE_NAMES.get(q.strip(), q.strip())
        if q not in QUANTITIES:
            raise UserError(f"python: quantities: unknown quantity '{q}' (fix: use some of h, dh, h', W', dW, "
                            "||W||, ||dW|| or hgrad, wgrad, dw, wspec, dwspec)")
        out.add(q)
    if not out:
        raise UserError("python: quantities: an empty list (fix: name at least one quantity, e.g. ['h', 'dh'])")
    return out


def _expert_stacks(opt):
    """Names of the optimizer's tensors that are stacks of expert matrices [E, out, in]: 3-D, role
    expert in apply's plan (which reads the expert dimension first, or refuses the model). Their
    spectral norms are taken per expert, as the CLI's CoordRecorder takes them."""
    return {g["name"] for g in opt.param_groups if g.get("role") == "expert" and g["params"][0].dim() == 3}


def _stack_norm(w):
    """The largest of spectral_norm(w[e]) over the experts e of a stack [E, out, in]; None where any
    of them is None (a matrix that is not finite)."""
    best = 0.0
    for e in range(w.shape[0]):
        n = spectral_norm(w[e])
        if n is None:
            return None
        best = max(best, n)
    return best


def _norm_shape(p, stack):
    """The [rows, columns] a tensor's ||W|| is measured on, which the judge's finite-size term of a
    matrix with one fixed fan reads: one expert's [out, in] for a stack, else [out, in * ...]."""
    if stack:
        return [p.shape[1], p.shape[2]]
    return [p.shape[0], p.numel() // p.shape[0]]


def _measure(model, opt, batches, steps, loss_fn, wanted=frozenset(QUANTITIES)):
    rec = {}
    order = []
    recording = [False]
    step = [0]
    h0, shapes = {}, {}
    # A module's output is measured inside its forward hook, as it leaves the module: h, dh from
    # the values then, h' from a hook on that tensor. A later in-place op on it (torchvision's
    # ResNet: `out += identity`, ReLU(inplace=True) after a BatchNorm) would otherwise change what
    # the check reads (retain_grad follows the newest version). Tensor hooks receive the gradient
    # of the version they were registered on from torch 2.0; torch 1.x keeps retain_grad.
    tensor_hooks = _TORCH_MAJOR >= 2

    def make_hook(name):
        def hook(mod, inp, out):
            if recording[0] and torch.is_tensor(out) and out.requires_grad:
                if name not in rec:
                    order.append(name)
                v = out.detach()
                entry = {"h": rms(v), "dh": None, "grad": None, "tensor": None}
                if step[0] == 0:
                    h0[name] = v.clone()
                    shapes[name] = list(v.shape)
                elif name in h0 and v.shape == h0[name].shape:
                    entry["dh"] = rms(v - h0[name])
                if tensor_hooks:
                    out.register_hook(lambda g: entry.__setitem__("grad", rms(g)))
                else:
                    out.retain_grad()
                    entry["tensor"] = out
                rec[name] = entry
        return hook

    handles = [mod.register_forward_hook(make_hook(name)) for name, mod in _record_modules(model)]
    # One per tensor, a tied one under its first name: apply's groups, in the plan's order.
    params = [(g["name"], g["params"][0]) for g in opt.param_groups]
    stacks = _expert_stacks(opt)
    T = steps
    series = {}

    def put(q, layer, t, v, shape=None):
        if q not in wanted:
            return
        key = (q, layer)
        if key not in series:
            series[key] = {"quantity": q, "layer": layer, "rms": [None] * (T + 1)}
            if shape is not None:
                series[key]["shape"] = shape
        series[key]["rms"][t] = v

    want_dw = "dW" in wanted or "||dW||" in wanted
    losses, diverged = [None] * (T + 1), False
    prev = None
    x, y = batches[0]
    n_out = None
    try:
        for t in range(T + 1):
            recording[0] = True
            step[0] = t
            rec.clear()
            out = model(x)
            lv = _scalar_loss(loss_fn(out, y))
            recording[0] = False
            first = _first_tensor(out)
            n_out = first.shape[-1] if first is not None and first.dim() > 0 else 1
            value = float(lv.detach())
            losses[t] = value if math.isfinite(value) else None
            if not math.isfinite(value):
                diverged = True
                break
            opt.zero_grad()
            lv.backward()
            for name in order:
                e = rec.get(name)
                if e is None:
                    continue
                put("h", name, t, e["h"])
                if e["dh"] is not None:
                    put("dh", name, t, e["dh"])
                put("h'", name, t, rms(e["tensor"].grad) if e["tensor"] is not None else e["grad"])
            for i, (name, p) in enumerate(params):
                put("W'", name, t, rms(p.grad) if p.grad is not None else 0.0)
                norm = _stack_norm if name in stacks else spectral_norm
                if p.dim() >= 2 and "||W||" in wanted:
                    put("||W||", name, t, norm(p), _norm_shape(p, name in stacks))
                if t > 0 and want_dw:
                    # The update, formed once (in prev's buffer) for both its RMS and its norm.
                    d = torch.sub(p.detach(), prev[i], out=prev[i])
                    put("dW", name, t, rms(d))
                    if p.dim() >= 2 and "||dW||" in wanted:
                        put("||dW||", name, t, norm(d))
            if t == T:
                break
            bi = t % len(batches)
            if bi != 0:
                opt.zero_grad()
                xb, yb = batches[bi]
                _scalar_loss(loss_fn(model(xb), yb)).backward()
            if want_dw:
                if prev is None:
                    prev = [p.detach().clone() for _, p in params]
                else:
                    for buf, (_, p) in zip(prev, params):
                        buf.copy_(p.detach())
            opt.step()
    finally:
        for hd in handles:
            hd.remove()
    # dh and dW are undefined at step 0 but still listed, as the CLI lists them.
    for name in order:
        if ("dh", name) not in series:
            put("dh", name, 0, None)
    for name, p in params:
        if ("dW", name) not in series:
            put("dW", name, 0, None)
    return {"loss": losses, "diverged": diverged, "series": list(series.values())}, order, n_out, shapes


def coordcheck(make_model, widths, batches, param="mup", optimizer="adamw", lr=1e-3, steps=3, seeds=3,
               loss=None, weight_decay=0.0, momentum=0.0, base_width=None, delta_width=None, overrides=None,
               plot=None, progress=True, quantities=None):
    """Coordinate check of make_model(width) under `param`, judged against the theory.

    widths: at least 2; batches: [(x, y), ...], the first is the probe every step is measured on,
    training cycles through them (one batch: every update on the probe); seeds: a count or a list;
    loss: loss(output, y) (default cross-entropy); base_width: where lr counts as tuned (default
    the smallest width); plot: a directory for the CLI's plots (gnuplot); quantities: what to
    measure, e.g. ["h", "dh"] (default all seven: the spectral norms cost most at large widths).
    A make_model returning a torch.compile'd (or DDP-wrapped) model is checked through the module it
    wraps, eagerly: the check records every module's output through forward hooks, which would break
    the compiled graph at each module and recompile at each width. Same function, same verdicts.
    Returns a CoordCheckResult.
    """
    wanted = _quantity_set(quantities)
    widths, seed_list, steps, base_width, delta_width = _check_args(make_model, widths, batches, param, optimizer, lr,
                                                                    steps, seeds, loss, base_width, delta_width, plot)
    loss_fn = loss or F.cross_entropy
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    base = unwrap(make_model(base_width))
    delta = unwrap(make_model(delta_width))
    runs, layers, plan = [], None, None
    n_out = None
    act_shapes = {}
    total, done, t0 = len(widths) * len(seed_list), 0, time.time()
    try:
        with _kept_heap():
            for w in widths:
                for s in seed_list:
                    torch.manual_seed(s)
                    model = unwrap(make_model(w))
                    opt = apply(model, base, delta, param=param, optimizer=optimizer, lr=lr,
                                weight_decay=weight_decay, momentum=momentum, overrides=overrides)
                    _fused_adam(opt)
                    run, order, n_out, shapes = _measure(model, opt, batches, steps, loss_fn, wanted)
                    act_shapes[w] = shapes
                    run.update({"width": w, "seed": s})
                    runs.append(run)
                    if layers is None:
                        plan = opt.scaleinv_plan
                        layers = _layers(model, plan, order)
                    model = opt = None  # freed before the next run's model is built: its memory is reused
                    done += 1
                    if progress:
                        el = time.time() - t0
                        eta = el / done * (total - done)
                        bar = "#" * (20 * done // total) + "." * (20 - 20 * done // total)
                        print(f"\rcoordcheck [{bar}] {done}/{total} runs, {done / el:.2f} runs/s, ETA {eta:.0f} s"
                              f"  (width {w} seed {s})", end="", file=sys.stderr, flush=True)
            if progress:
                print(file=sys.stderr)
    finally:
        torch.random.set_rng_state(state)
    x, y = batches[0]
    n_probe = _probe_positions(act_shapes, int(y.numel()) if torch.is_tensor(y) else int(_first_tensor(x).shape[0]))
    data, text, stems = _scaleinv.judge_coordcheck(json.dumps({
        "param": param, "table": plan["shifted"], "optimizer": optimizer, "model": type(base).__name__, "seeds": seed_list,
        "steps": steps, "n_probe": n_probe, "n_out": int(n_out or 0), "layers": layers,
        "runs": runs, "plot": plot or ""}))
    return CoordCheckResult(json.loads(data), text, stems)


def _check_args(make_model, widths, batches, param, optimizer, lr, steps, seeds, loss, base_width, delta_width, plot):
    """Every argument checked before the first run (UserError, one line); the normalised values."""
    if not callable(make_model):
        raise UserError("python: make_model: not callable (fix: a function of the width returning the model)")
    if isinstance(widths, (str, bytes)) or not hasattr(widths, "__iter__"):
        raise UserError(f"python: widths: {widths!r} is not a list (fix: widths=[128, 256, 512])")
    ws = sorted(set(_integer("widths", w, "widths=[128, 256, 512]", 1, 1 << 24) for w in widths))
    if len(ws) < 2:
        raise UserError("python: widths: a slope needs at least 2 widths (fix: give e.g. widths=[128, 256, 512])")
    if not isinstance(batches, (list, tuple)) or not batches:
        raise UserError("python: batches: no batches (fix: give [(x, y)], the probe batch first)")
    for i, b in enumerate(batches):
        if not isinstance(b, (tuple, list)) or len(b) != 2:
            raise UserError(f"python: batches[{i}]: a {type(b).__name__}, not an (x, y) pair (fix: batches=[(x, y), ...])")
        x, y = b
        if torch.is_tensor(x) and (x.dim() == 0 or x.shape[0] == 0):
            raise UserError(f"python: batches[{i}]: x has no rows (shape {list(x.shape)}) (fix: give at least one sample)")
        if torch.is_tensor(y) and y.numel() == 0:
            raise UserError(f"python: batches[{i}]: y is empty (fix: give at least one target)")
    _name("param", param, "param='mup' (scaleinv.presets() lists the rows)")
    _name("optimizer", optimizer, "optimizer='adamw'")
    _number("lr", lr, "lr=1e-3, the LR tuned at the base width", lo=0, lo_open=True)
    steps = _integer("steps", steps, "steps=3", 1, 100000)
    if isinstance(seeds, (int, float)) and not isinstance(seeds, bool):
        seed_list = list(range(_integer("seeds", seeds, "seeds=3 (the interval is over seeds)", 2, 10000)))
    elif isinstance(seeds, (list, tuple)):
        seed_list = [_integer("seeds", s, "seeds=[0, 1, 2]", -(1 << 62), 1 << 62) for s in seeds]
        if len(set(seed_list)) < 2 or len(set(seed_list)) != len(seed_list):
            raise UserError(f"python: seeds: {list(seeds)!r} (fix: give 2 or more different seeds; the interval is over seeds)")
    else:
        raise UserError(f"python: seeds: {seeds!r} is neither a count nor a list (fix: seeds=3)")
    if loss is not None and not callable(loss):
        raise UserError("python: loss: not callable (fix: loss(output, y) returning a scalar tensor)")
    base_width = ws[0] if base_width is None else _integer("base_width", base_width, "base_width=128", 1, 1 << 24)
    if delta_width is not None:
        delta_width = _integer("delta_width", delta_width, "delta_width=256", 1, 1 << 24)
    else:
        delta_width = ws[1] if ws[1] != base_width else ws[0]
    if plot is not None:
        if not isinstance(plot, (str, os.PathLike)):
            raise UserError(f"python: plot: {plot!r} is not a directory path (fix: plot='runs/coordcheck')")
        if os.path.exists(plot) and not os.path.isdir(plot):  # found before the runs, not after them
            raise UserError(f"python: plot: {os.fspath(plot)} exists and is not a directory "
                            "(fix: name a new or existing directory)")
        if shutil.which("gnuplot") is None:
            raise UserError("python: plot: the gnuplot program is not installed "
                            "(fix: install gnuplot-nox (apt-get install gnuplot-nox) or leave out plot)")
    return ws, seed_list, steps, base_width, delta_width


def _first_tensor(out):
    """The model output's first tensor (a model may return a tuple, e.g. (logits, aux))."""
    if torch.is_tensor(out):
        return out
    if isinstance(out, (tuple, list)):
        for o in out:
            t = _first_tensor(o)
            if t is not None:
                return t
    if isinstance(out, dict):
        for o in out.values():
            t = _first_tensor(o)
            if t is not None:
                return t
    return None


def _scalar_loss(lv):
    if not torch.is_tensor(lv) or lv.numel() != 1:
        what = f"a tensor of shape {list(lv.shape)}" if torch.is_tensor(lv) else f"a {type(lv).__name__}"
        raise UserError(f"python: loss: returned {what}, not a scalar tensor with a gradient "
                        "(fix: return e.g. F.cross_entropy(output, y), reduced to one number)")
    return lv


def _probe_positions(act_shapes, n_targets):
    """The probe's positions: the rows each measured activation holds per width feature (B for an MLP,
    B*T for a language model, B*tokens for a ViT, B*H*W for a convolution), the most of any
    activation, which sets the check's finite-size term (src/brain/coordcheck/coord_result.h): an activation
    summed over many positions per sample has that many incoherent terms, not the B the targets
    count. The width dimension is the one that differs between the two smallest widths."""
    widths = sorted(act_shapes)
    best = n_targets
    if len(widths) >= 2:
        lo, hi = act_shapes[widths[0]], act_shapes[widths[1]]
        for name, s0 in lo.items():
            s1 = hi.get(name)
            if s1 is None or len(s1) != len(s0):
                continue
            grow = [i for i in range(len(s0)) if s0[i] != s1[i]]
            if len(grow) == 1:
                best = max(best, math.prod(s0) // s0[grow[0]])
    return int(best)


def _layers(model, plan, order):
    """Roles of the measured activations (the role of the module's own weight, else its first
    tensor's) and of the parameters, from the apply plan."""
    by_name = {t["name"]: t for t in plan["tensors"]}
    # A tied tensor's uses: each reads it in its own role (the readout's output gets the readout's
    # multiplier from apply's hook, so it is judged as logits); the tensor itself, trained by both
    # uses, has no prediction.
    use_role = {}
    for tie in plan["ties"]:
        use_role[tie["use"]] = tie["use_role"]
        use_role[tie["tensor"]] = tie["tensor_role"]
        if tie["readout"]:
            use_role[tie["readout"]] = "readout"
    tied = {tie["tensor"] for tie in plan["ties"] if tie["readout"]}
    tied_readouts = {tie["readout"] for tie in plan["ties"] if tie["readout"]}
    layers = []
    mods = dict(model.named_modules())
    for name in order:
        own = [f"{name}.{p}" for p, _ in mods[name].named_parameters(recurse=False)]
        key = f"{name}.weight" if f"{name}.weight" in by_name else next((k for k in own if k in by_name), None)
        t = by_name.get(key) if key else None
        role = use_role.get(f"{name}.weight", t["role"] if t else None)
        layers.append({"name": name, "weight": False, "role": role, "in_block": bool(t and t["in_block"]),
                       "tied": f"{name}.weight" in tied_readouts})
    for t in plan["tensors"]:
        layers.append({"name": t["name"], "weight": True, "role": t["role"], "in_block": t["in_block"],
                       "tied": t["name"] in tied})
    return layers
