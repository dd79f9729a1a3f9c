"""scaleinv from Python: any parameterization of the table on your own torch model.

    import scaleinv
    opt = scaleinv.apply(model, base=base, delta=delta, param="mup", optimizer="adamw", lr=1e-3)
    r = scaleinv.coordcheck(make_model, widths=[128, 256, 512], batches=[(x, y)], param="mup")
    print(r); assert r.passed

The C++ core (_scaleinv) does the work: roles, the shifted table (seed 000 eq. 28), the theory and
the coordinate check's verdicts; this package measures with torch and builds the torch optimizer.
Bad input raises scaleinv.UserError (a ValueError) with one line naming the field and the fix.
"""
from ._core import UserError, presets, table, theory
from .apply import apply, plan
from .coordcheck import CoordCheckResult, coordcheck

__all__ = ["UserError", "apply", "plan", "coordcheck", "CoordCheckResult", "presets", "table", "theory"]
