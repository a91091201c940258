"""NumPy implementation for host arrays: the same semantics as the kernels, no GPU needed.

One new array of the compute type holds ``x - max``, then ``exp`` of it, then the quotient, all
in place (SciPy's softmax allocates three such arrays); a result of a narrower type is the
quotient stored into it, rounded once. Where each slice is one contiguous run, the passes go
over pieces of whole slices of about PIECE_BYTES, so that a piece stays in cache between them.
"""

from __future__ import annotations

import math

import numpy as np

from ._layout import collapse

# NumPy sums a contiguous innermost run pairwise (error of a few ulps at any length) but a
# strided axis one term after another (error up to n ulps: 1e-4 relative for 2**21 float32
# terms). A strided float32 axis is therefore summed in blocks of BLOCK terms (15 ulps, 9e-7,
# at most), and the blocks' sums in float64.
BLOCK = 16
# Pieces of 0.5 to 2 MiB ran 1.2x faster than whole arrays on rows of 1000 float32 (and 1.05 to
# 1.2x on other row cases); smaller ones lose to the calls' overhead.
PIECE_BYTES = 1 << 20


def softmax(x: np.ndarray, axes: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Softmax of ``x`` over ``axes`` in ``dtype``: float64 and longdouble computed in their own
    type, the rest in float32. NaN or +inf in a slice, or a slice of all -inf, give NaN there
    (``x - max`` is NaN at the max); -inf entries of other slices give 0."""
    compute = np.dtype(dtype if dtype in (np.float64, np.longdouble) else np.float32)
    e = np.empty_like(x, dtype=compute)  # x's memory order (K): no transposing copy
    y = e if dtype == compute else np.empty_like(e, dtype=dtype)
    pieces, sums = _pieces(e, axes)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for p in pieces:
            xp, ep = x[p], e[p]
            if xp.dtype != compute:  # NumPy's max of a half type is slower than the cast
                np.copyto(ep, xp)
                xp = ep
            np.subtract(xp, np.max(xp, axis=axes, keepdims=True), out=ep)
            np.exp(ep, out=ep)
            np.divide(ep, sums(ep, axes), out=y[p], casting="unsafe")  # one rounding to dtype
    return y


def _pieces(e: np.ndarray, axes: tuple[int, ...]):
    """The pieces of ``e`` (index tuples, each whole slices) and how to sum a piece's slices."""
    n = math.prod(e.shape[a] for a in axes)
    rows = False
    if e.nbytes > PIECE_BYTES or (e.dtype == np.float32 and n > BLOCK):
        strides = tuple(s // e.itemsize for s in e.strides)
        layout = collapse(e.shape, strides, strides, axes)
        rows = layout is not None and layout.rows  # each slice one contiguous run
    sums = _strided_sums if e.dtype == np.float32 and n > BLOCK and not rows else _sums
    kept = [d for d in range(e.ndim) if d not in axes and e.shape[d] > 1]
    if not rows or not kept:
        return [...], sums
    k = max(kept, key=lambda d: abs(e.strides[d]))  # the outermost in memory
    step = max(1, PIECE_BYTES * e.shape[k] // e.nbytes)
    if step >= e.shape[k]:
        return [...], sums
    head = (slice(None),) * k
    return [(*head, slice(i, i + step)) for i in range(0, e.shape[k], step)], sums


def _sums(e: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return np.sum(e, axis=axes, keepdims=True)


def _strided_sums(e: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Each float32 slice's sum (keepdims) where NumPy would add term after term."""
    if len(axes) > 1:
        return np.sum(e, axis=axes, keepdims=True, dtype=np.float64).astype(np.float32)
    (a,) = axes
    v = np.moveaxis(e, a, 0)
    n = v.shape[0]
    q = n // BLOCK
    blocks = np.sum(v[: q * BLOCK].reshape(q, BLOCK, *v.shape[1:]), axis=1)
    s = np.sum(blocks, axis=0, dtype=np.float64)
    if q * BLOCK < n:
        s += np.sum(v[q * BLOCK :], axis=0, dtype=np.float64)
    return np.expand_dims(s.astype(np.float32), a)
