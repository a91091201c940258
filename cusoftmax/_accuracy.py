"""The accuracy contract, one table per kind of result, for tests and the benchmark.

Per element ``|y - ref| <= atol + rtol * |ref|`` against a float64 reference computed from the
same dtype-rounded input, with NaN in the same places and infinities equal.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ._args import FLOAT8, LONGDOUBLE

TOLERANCE = {  # dtype name: (rtol, atol)
    "float64": (1e-12, 1e-300),
    "float32": (1e-5, 1e-7),
    "float16": (1e-3, 1e-7),
    "bfloat16": (8e-3, 1e-6),
}
# The reference is float64: a longdouble result is held to float64's bound.
TOLERANCE.setdefault(LONGDOUBLE.name, TOLERANCE["float64"])
# 8-bit floats, computed in float32 with one rounding at the store: half an ulp relative,
# 2**-(mantissa bits + 1), in the normal range; half the smallest subnormal below it (the
# float32 error on top, about 1e-7 relative, is far inside both).
for _name in filter(lambda n: hasattr(ml_dtypes, n), FLOAT8):
    _fi = ml_dtypes.finfo(getattr(ml_dtypes, _name))
    TOLERANCE[_name] = (2.0 ** -(_fi.nmant + 1), float(_fi.smallest_subnormal) / 2)

# Log values (log_softmax, logsumexp). Near 0 a log value is a difference of terms of size up
# to log(n): atol bounds what their rounding leaves there.
LOG_TOLERANCE = {  # dtype name: (rtol, atol)
    "float64": (1e-12, 1e-15),
    "float32": (1e-5, 1e-6),
    "float16": (1e-3, 1e-2),
    "bfloat16": (8e-3, 1e-2),
}

# Gradients (softmax_vjp, log_softmax_vjp): an absolute bound per slice, rtol times the size of
# its terms: softmax_vjp ``max|dy| * max(y)`` (``|dx| <= 2 max|dy| max(y)``), log_softmax_vjp
# ``max|dy| + |sum(dy)|``; the half types' rtol allows for the store's rounding of results up to
# twice that size.
VJP_TOLERANCE = {  # dtype name: (rtol, atol)
    "float64": (1e-10, 0.0),
    "float32": (1e-4, 0.0),
    "float16": (2e-3, 0.0),
    "bfloat16": (1.6e-2, 0.0),
}


def vjp_reference(xp, y, dy, axes, log: bool):
    """(dx, the size VJP_TOLERANCE's rtol is relative to) of a backward pass in float64, from
    the forward's output `y` and the gradient `dy` (arrays of module `xp`) over `axes`."""
    y64, g64 = y.astype(np.float64), dy.astype(np.float64)
    gmax = xp.abs(g64).max(axis=axes, keepdims=True)
    if log:
        total = g64.sum(axis=axes, keepdims=True)
        return g64 - xp.exp(y64) * total, gmax + xp.abs(total)
    ref = y64 * (g64 - (y64 * g64).sum(axis=axes, keepdims=True))
    return ref, gmax * xp.abs(y64).max(axis=axes, keepdims=True)


def violations(y, ref, dtype_name: str, table=TOLERANCE, of=None) -> str | None:
    """None when ``y`` (any dtype, host array) meets the bound of `table` against ``ref``
    (float64), else a sentence naming the worst element. `of`: what rtol is relative to
    (broadcast to ``ref``; default ``|ref|``)."""
    rtol, atol = table[dtype_name]
    y = np.asarray(y, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if y.shape != ref.shape:
        return f"shape {y.shape} != reference shape {ref.shape}"
    nan_y, nan_r = np.isnan(y), np.isnan(ref)
    if (nan_y != nan_r).any():
        i = np.unravel_index(np.argmax(nan_y != nan_r), y.shape)
        return f"NaN mismatch at {i}: got {y[i]}, reference {ref[i]}"
    size = np.abs(ref) if of is None else of
    with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity
        ok = nan_r | (y == ref) | (np.abs(y - ref) <= atol + rtol * size)
    if ok.all():
        return None
    with np.errstate(invalid="ignore"):
        err = np.where(ok, 0.0, np.abs(y - ref) - rtol * size)
    i = np.unravel_index(np.argmax(err), y.shape)
    bad = int((~ok).sum())
    return f"{bad} elements off; worst at {i}: got {y[i]!r}, reference {ref[i]!r} ({dtype_name})"
