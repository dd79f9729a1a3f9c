"""What the torch-side functions share (imported only by them: torch is loaded when they are)."""
import math

import torch


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
