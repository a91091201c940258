"""NumPy implementation for host arrays: the same semantics as the kernels, no GPU needed.

One new array of the compute type holds ``x - max``, then ``exp`` of it, then the quotient, all
in place (SciPy's softmax allocates three such arrays); a result of a narrower type is the
quotient stored into it, rounded once.
"""

from __future__ import annotations

import math

import numpy as np

from ._layout import collapse

# NumPy sums a contiguous innermost run pairwise (error of a few ulps at any length) but a
# strided axis one term after another (error up to n ulps: 1e-5 relative for 2**22 float32
# terms). A strided float32 axis is therefore summed in blocks of _BLOCK terms (15 ulps, 9e-7,
# at most), and the blocks' sums in float64.
_BLOCK = 16


def softmax(x: np.ndarray, axes: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Softmax of ``x`` over ``axes`` in ``dtype``: float64 and longdouble computed in their own
    type, the rest in float32. NaN or +inf in a slice, or a slice of all -inf, give NaN there
    (``x - max`` is NaN at the max); -inf entries of other slices give 0."""
    compute = np.dtype(dtype if dtype in (np.float64, np.longdouble) else np.float32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if x.dtype == compute:
            m = np.max(x, axis=axes, keepdims=True)
            e = np.empty_like(x)  # x's memory order (K): no transposing copy
            np.subtract(x, m, out=e)
        else:  # NumPy's max of a half type and its mixed-type subtract are slower than a cast
            e = x.astype(compute)
            m = np.max(e, axis=axes, keepdims=True)
            np.subtract(e, m, out=e)
        np.exp(e, out=e)
        s = _sums(e, axes)
        y = e if dtype == compute else np.empty_like(e, dtype=dtype)
        np.divide(e, s, out=y, casting="unsafe")  # the one rounding to a narrower dtype
    return y


def _sums(e: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Each slice's sum (keepdims) within a few ulps of the compute type."""
    n = math.prod(e.shape[a] for a in axes)
    if e.dtype != np.float32 or n <= _BLOCK:
        return np.sum(e, axis=axes, keepdims=True)
    strides = tuple(st // e.itemsize for st in e.strides)
    layout = collapse(e.shape, strides, strides, axes)
    if layout is not None and layout.rows:  # each slice one contiguous run: pairwise
        return np.sum(e, axis=axes, keepdims=True)
    if len(axes) > 1:
        return np.sum(e, axis=axes, keepdims=True, dtype=np.float64).astype(np.float32)
    (a,) = axes
    v = np.moveaxis(e, a, 0)
    q = n // _BLOCK
    blocks = np.sum(v[: q * _BLOCK].reshape(q, _BLOCK, *v.shape[1:]), axis=1)
    s = np.sum(blocks, axis=0, dtype=np.float64)
    if q * _BLOCK < n:
        s += np.sum(v[q * _BLOCK :], axis=0, dtype=np.float64)
    return np.expand_dims(s.astype(np.float32), a)
