"""NumPy implementation for host arrays: the same semantics as the kernels, no GPU needed.

One new array of the compute type holds ``x - max``, then ``exp`` of it, then the quotient, all
in place (SciPy's softmax allocates three such arrays); a result of a narrower type is the
quotient stored into it, rounded once. The passes go over pieces of about PIECE_BYTES, so that a
piece stays in cache from one pass to the next: pieces of whole slices where each slice is one
contiguous run (rows), pieces along the axis for one strided axis (there the max and the
quotient take the whole array, as they need every piece).
"""

from __future__ import annotations

import math

import numpy as np

from . import _composed
from ._composed import compute_types
from ._layout import collapse

# NumPy sums a contiguous innermost run pairwise (error of a few ulps at any length) but a
# strided axis one term after another (error up to n ulps: 1e-4 relative for 2**21 float32
# terms). A strided float32 axis is therefore summed in blocks of BLOCK terms (15 ulps, 9e-7,
# at most), and the blocks' sums in float64.
BLOCK = 16
# Pieces of 0.5 to 2 MiB ran 1.2x faster than whole arrays on rows of 1000 float32 (1.05 to
# 1.2x on the other rows and on axis 0 of 1000 x 4096); smaller ones lose to the calls' overhead.
PIECE_BYTES = 1 << 20


def softmax(x: np.ndarray, axes: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Softmax of ``x`` over ``axes`` in ``dtype``: float64 and longdouble computed in their own
    type, the rest in float32. NaN or +inf in a slice, or a slice of all -inf, give NaN there
    (``x - max`` is NaN at the max); -inf entries of other slices give 0."""
    compute = compute_types(dtype)[0]
    e = np.empty_like(x, dtype=compute)  # x's memory order (K): no transposing copy
    y = e if dtype == compute else np.empty_like(e, dtype=dtype)
    n = math.prod(e.shape[a] for a in axes)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if _rows(e, axes):
            for p in _row_pieces(e, axes):
                _slices(x[p], e[p], y[p], axes, _sums)
        elif n > BLOCK and len(axes) == 1:
            _along(x, e, y, axes[0])
        else:
            _slices(x, e, y, axes, _float64_sums if compute == np.float32 and n > BLOCK else _sums)
    return y


def softmax_to(x, axes, dtype, out=None):
    """``softmax`` of x (any dtype the family takes) into `out` where given (then `out`)."""
    y = softmax(x, axes, dtype) if x.size else np.empty(x.shape, dtype)
    if out is None:
        return y
    np.copyto(out, y)
    return out


def pieces(x, axes) -> list:
    """Index tuples cutting x into pieces of whole slices of about PIECE_BYTES where each slice
    is one contiguous run, else the whole array ([...]): the family's array operations then pass
    over a piece while it stays in cache."""
    return _row_pieces(x, axes) if _rows(x, axes) else [...]


# Elements of a slice a piece holds along a row longer than a piece: a constant, so that a
# row's bits never depend on the rows beside it.
CHUNK = 1 << 16


def _long_rows(x, axes) -> bool:
    """One reduced axis, the last of a C-contiguous x, longer than a piece holds."""
    return (axes == (x.ndim - 1,) and x.flags.c_contiguous
            and x.shape[-1] * compute_types(x.dtype)[0].itemsize > PIECE_BYTES)


# Steps of a strided reduced axis a piece holds: a constant, so that a slice's bits never
# depend on the slices beside it (at most 255: a piece counts its maxima in bytes).
STEPS = 64


def _split_axis(x, axes) -> bool:
    """One strided reduced axis (not contiguous rows) in an x larger than a piece: taken
    STEPS at a time along it, the pieces' states merged."""
    return (len(axes) == 1 and x.nbytes > PIECE_BYTES and x.shape[axes[0]] > STEPS
            and not _rows(x, axes))


def _steps(x, a, step):
    """(index along the kept axes, [indices along axis a]) pairs: `step` elements of axis a at
    a time, in order, times blocks of the kept axis innermost in memory sized to fill about
    PIECE_BYTES (all of it where one step's slices are larger)."""
    kept = [d for d in range(x.ndim) if d != a and x.shape[d] > 1]
    k = min(kept, key=lambda d: abs(x.strides[d])) if kept else None
    if k is None:  # one slice: its steps alone
        yield (slice(None),) * x.ndim, [(*(slice(None),) * a, slice(i, i + step))
                                        for i in range(0, x.shape[a], step)]
        return
    per_step = x.nbytes // x.shape[a] * step
    width = max(1, min(x.shape[k], PIECE_BYTES * x.shape[k] // per_step))
    for j in range(0, x.shape[k], width):
        cols = [slice(None)] * x.ndim
        cols[k] = slice(j, j + width)
        yield tuple(cols), [(*cols[:a], slice(i, i + step), *cols[a + 1:])
                            for i in range(0, x.shape[a], step)]


def _merged_state(x, a, step):
    """The State of each slice of x over axis a, `step` elements of it at a time, merged in
    order (``_step_state`` where a is strided)."""
    compute, acc = compute_types(x.dtype)
    shape = tuple(1 if d == a else n for d, n in enumerate(x.shape))
    m, c, s = np.empty(shape, compute), np.empty(shape, acc), np.empty(shape, acc)
    run = x.strides[a] == x.itemsize
    for cols, pieces_ in _steps(x, a, step):
        st = None
        for at in pieces_:
            xp = x[at].astype(compute, copy=False)
            part = _composed.State(*(state(xp, (a,), acc) if run else _step_state(xp, a, acc)))
            st = part if st is None else _composed.merge(np, st, part)
        m[cols], c[cols], s[cols] = st
    return _composed.State(m, c, s)


def _step_state(x, a, acc):
    """``state`` of x (STEPS or fewer along strided axis a, the compute type) over a, its
    float32 sum in blocks of BLOCK terms added in float64 (``_leading_sum``) and its count in
    bytes (at most STEPS): no cast of every term."""
    if x.dtype != np.float32:
        return state(x, (a,), acc)
    m, top, e = _terms(x, (a,))
    s = np.expand_dims(_leading_sum(np.moveaxis(e, a, 0)), a)
    c = np.add.reduce(top.view(np.uint8), axis=a, keepdims=True, dtype=np.uint8)
    return m, c.astype(acc), s


def _normalize_steps(op, x, st, a, step, y):
    """y = softmax or log_softmax of x from each slice's State over axis a, `step` elements of
    it at a time: in place in y where it has the compute type, else through one reused piece."""
    compute = st.m.dtype
    k = _composed.constant(np, op, st)
    spare = None
    for cols, pieces_ in _steps(x, a, step):
        m, kc = st.m[cols], k[cols]
        for at in pieces_:
            yp = y[at]
            if y.dtype == compute:
                e = yp
            else:
                if spare is None or spare.size < yp.size:
                    spare = np.empty(yp.size, compute)
                e = spare[:yp.size].reshape(yp.shape)
            _normalize_piece(op, x[at], m, kc, e, yp)


def _normalize_piece(op, x, m, k, e, y) -> None:
    """y = ``_composed.normalize``'s map of x from its slices' m and constant k, computed in e
    (y itself where it has the compute type): ``exp(x - m) * k`` or ``(x - m) - k``."""
    np.subtract(x, m, out=e)
    if op == "softmax":
        np.exp(e, out=e)
        np.multiply(e, k, out=e)
    else:
        np.subtract(e, k, out=e)
    if e is not y:
        y[...] = e


def log_softmax(x, axes, out=None):
    """log_softmax of x (its result dtype) over axes, into out where given: ``_composed``'s
    state and normalising a piece of whole slices at a time (the same bits as on the whole
    array, in fewer passes where x is of its compute type); rows longer than a piece a CHUNK at
    a time, their states merged (the float64 sums added in another order)."""
    compute, acc = compute_types(x.dtype)
    y = out if out is not None and out.dtype == x.dtype else np.empty_like(x)  # x: native order
    if _long_rows(x, axes):  # rows past a piece: state a chunk at a time, then normalise
        y = y if y.flags.c_contiguous else np.empty_like(x)
        with np.errstate(all="ignore"):
            a = x.ndim - 1
            _normalize_steps("log_softmax", x, _merged_state(x, a, CHUNK), a, CHUNK, y)
    elif _split_axis(x, axes):  # a strided axis: STEPS of it at a time, then normalise
        with np.errstate(all="ignore"):
            a = axes[0]
            _normalize_steps("log_softmax", x, _merged_state(x, a, STEPS), a, STEPS, y)
    else:
        _log_softmax_pieces(x, y, axes, compute, acc)
    if y is not out and out is not None:
        np.copyto(out, y)
        return out
    return y


def _log_softmax_pieces(x, y, axes, compute, acc) -> None:
    with np.errstate(all="ignore"):  # NaN and infinities give their results, no warnings
        for p in pieces(x, axes):
            if x.dtype == compute:
                _log_softmax_piece(x[p], y[p], axes, acc)
            else:
                xp = x[p]
                _composed.normalize(np, "log_softmax", xp, _composed.state(np, xp, axes), axes,
                                    out=y[p])


def _log_softmax_piece(x, y, axes, acc) -> None:
    """``_composed``'s log_softmax of x (its compute type) into y (x's type; may be x): the max
    m, its count c, the sum s of the other terms exp(x - m) (m = 0 where it is -inf), then
    ``(x - m) - (log1p(s / c) + log(c))``, NaN throughout a slice of only -inf."""
    m = np.maximum.reduce(x, axis=axes, keepdims=True)
    top = x == m  # before y, which may be x, is written
    empty = m == -np.inf
    any_empty = empty.any()  # the common case has none: two fewer passes of np.where
    np.subtract(x, np.where(empty, 0, m).astype(x.dtype) if any_empty else m, out=y)
    e = np.exp(y, out=np.empty_like(y))  # an array for a 0-d y too
    np.copyto(e, 0, where=top)
    s = np.add.reduce(e, axis=axes, keepdims=True, dtype=acc)
    c = np.add.reduce(top, axis=axes, keepdims=True, dtype=acc)  # count_nonzero's wrapper: 3 us
    k = (np.log1p(s / c) + np.log(c)).astype(m.dtype)  # _composed.constant's, inline
    np.subtract(y, np.where(empty, np.nan, k) if any_empty else k, out=y)


def log_sum(x, axes, return_sign, dtype):
    """logsumexp of x (its result dtype) over axes, keepdims shape (and the sign with
    return_sign), from ``state_of``: ``_composed.log_sum`` without weights, ``m + (log1p(s / c)
    + log(c))`` in the accumulation type, c >= 1 the count of the maximum (0 only where m is
    NaN, which gives NaN)."""
    m, c, s = state_of(x, axes)
    acc = c.dtype
    with np.errstate(all="ignore"):
        res = (m.astype(acc) + (np.log1p(s / c) + np.log(c))).astype(dtype)
        if not return_sign:
            return res
        sign = np.where(res == -np.inf, dtype.type(0), dtype.type(1))
        sign[np.isnan(res)] = np.nan
    return res, sign


def state(x, axes, acc):
    """(m, c, s) of each slice of x (its compute type): the max, its count and the sum of the
    other terms exp(x - m) in `acc`."""
    m, top, e = _terms(x, axes)
    s = np.add.reduce(e, axis=axes, keepdims=True, dtype=acc)
    return m, np.add.reduce(top, axis=axes, keepdims=True, dtype=acc), s


def _terms(x, axes):
    """(m, the places of the max, exp(x - m) with 0 there) of each slice of x (its compute
    type); m = -inf shifted by 0: -inf entries give 0, not NaN."""
    m = np.maximum.reduce(x, axis=axes, keepdims=True)
    top = x == m
    e = np.subtract(x, np.where(m == -np.inf, 0, m).astype(x.dtype), out=np.empty_like(x))
    np.exp(e, out=e)
    np.copyto(e, 0, where=top)
    return m, top, e


def state_of(x, axes):
    """``_composed.state`` of x (its result dtype, no mask, weights or scale) over axes, a
    cache-sized piece of slices at a time (the same m and c; s the same float64 sum, which NumPy
    may round in another order for a piece than for the whole array)."""
    compute, acc = compute_types(x.dtype)
    shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
    if _long_rows(x, axes):
        with np.errstate(all="ignore"):
            return _merged_state(x, x.ndim - 1, CHUNK)
    if _split_axis(x, axes):
        with np.errstate(all="ignore"):
            return _merged_state(x, axes[0], STEPS)
    m, c, s = np.empty(shape, compute), np.empty(shape, acc), np.empty(shape, acc)
    with np.errstate(all="ignore"):
        for p in pieces(x, axes):  # pieces cut a kept axis: the same index into the state
            m[p], c[p], s[p] = state(x[p].astype(compute, copy=False), axes, acc)
    return _composed.State(m, c, s)


def normalize(op, x, st, axes):
    """``_composed.normalize`` of x (its result dtype, no mask or scale) from each slice's
    final State, a piece at a time: the same bits, one array of the compute type a piece."""
    compute = st.m.dtype
    k = _composed.constant(np, op, st)
    y = np.empty(x.shape, x.dtype)
    with np.errstate(all="ignore"):
        for p in pieces(x, axes):
            yp = y[p]
            e = yp if x.dtype == compute else np.empty(yp.shape, compute)
            _normalize_piece(op, x[p], st.m[p], k[p], e, yp)
    return y


def vjp(y, dy, axes, log, out=None):
    """dx of softmax (``y * (dy - sum(dy * y))``) or log_softmax (``dy - exp(y) * sum(dy)``)
    from y and dy (y's result dtype), through NumPy's ufuncs alone: ``_composed.vjp_sum`` and
    ``vjp``, with float32 sums as ``softmax``'s: pairwise in float32 along contiguous runs, in
    blocks of BLOCK added in float64 along one strided axis (a few ulps at any length, without a
    cast of every term to float64)."""
    compute, acc = compute_types(y.dtype)
    with np.errstate(all="ignore"):
        yc, dyc = y.astype(compute, copy=False), dy.astype(compute, copy=False)
        t = dyc if log else dyc * yc
        if compute == np.float32 and _rows(t, axes):
            total = np.add.reduce(t, axis=axes, keepdims=True)
        elif compute == np.float32 and len(axes) == 1 and t.shape[axes[0]] > BLOCK:
            total = np.expand_dims(_leading_sum(np.moveaxis(t, axes[0], 0)), axes[0])
            total = total.astype(compute)
        else:
            total = np.add.reduce(t, axis=axes, keepdims=True, dtype=acc).astype(compute)
        dx = dyc - np.exp(yc) * total if log else yc * (dyc - total)
        if out is not None:
            np.copyto(out, dx, casting="same_kind")
            return out
    return dx.astype(y.dtype, copy=False)


def _slices(x, e, y, axes, sums) -> None:
    """Softmax of whole slices of x into y, through e."""
    if x.dtype != e.dtype:  # NumPy's max of a half type is slower than the cast
        np.copyto(e, x)
        x = e
    np.subtract(x, np.maximum.reduce(x, axis=axes, keepdims=True), out=e)
    np.exp(e, out=e)
    _quotient(e, sums(e, axes), y)


def _along(x, e, y, a: int) -> None:
    """Softmax over one strided axis ``a``: ``x - max``, exp and the partial sums in pieces
    along the axis (float32 ones in blocks of BLOCK terms, added in float64)."""
    if x.dtype != e.dtype:
        np.copyto(e, x)
        x = e
    m = np.max(x, axis=a, keepdims=True)
    s = np.zeros(m.shape, np.float64 if e.dtype == np.float32 else e.dtype)
    xv, ev, mv, sv = (np.moveaxis(v, a, 0) for v in (x, e, m, s))
    n = ev.shape[0]
    step = max(BLOCK, PIECE_BYTES * n // e.nbytes // BLOCK * BLOCK)
    for i in range(0, n, step):
        ep = ev[i : i + step]
        np.subtract(xv[i : i + step], mv, out=ep)
        np.exp(ep, out=ep)
        sv += _leading_sum(ep)
    _quotient(e, s.astype(e.dtype), y)


def _leading_sum(t):
    """The sum of t over its first axis (a strided one): float32 terms in blocks of BLOCK,
    the blocks' sums added in float64 (a float64 result); other types in their own."""
    if t.dtype != np.float32:
        return np.add.reduce(t, axis=0)
    q = len(t) // BLOCK * BLOCK
    s = np.add.reduce(np.add.reduce(t[:q].reshape(-1, BLOCK, *t.shape[1:]), axis=1), axis=0,
                      dtype=np.float64)
    return s + np.add.reduce(t[q:], axis=0, dtype=np.float64) if q < len(t) else s


def _quotient(e, s, y) -> None:
    """y = e / s, rounded once to y's dtype."""
    if y.dtype != np.float16:
        np.divide(e, s, out=y, casting="unsafe")
        return
    # NumPy's float32 -> float16 cast raises the underflow flag for each inexact subnormal
    # result, at some 60 ns each (most of a wide row's results). Adding and subtracting 0.5
    # rounds a value below 2**-13 to a multiple of 2**-24, float16's spacing there, to nearest
    # even as the cast does; the cast of the rounded value is exact.
    np.divide(e, s, out=e)
    r = np.add(e, np.float32(0.5))
    r -= np.float32(0.5)
    np.copyto(e, r, where=e < np.float32(2**-13))
    np.copyto(y, e, casting="unsafe")


def _rows(e, axes) -> bool:
    """Whether each slice of e is one contiguous run (NumPy then sums it pairwise)."""
    if e.flags.c_contiguous and axes == tuple(range(e.ndim - len(axes), e.ndim)):
        return True
    strides = tuple(s // e.itemsize for s in e.strides)
    layout = collapse(e.shape, strides, strides, axes)
    return layout is not None and layout.rows


def _row_pieces(e, axes) -> list:
    """Index tuples cutting e into pieces of whole slices of about PIECE_BYTES each, along the
    kept axis outermost in memory."""
    if e.nbytes <= PIECE_BYTES:
        return [...]
    kept = [d for d in range(e.ndim) if d not in axes and e.shape[d] > 1]
    if not kept:
        return [...]
    k = max(kept, key=lambda d: abs(e.strides[d]))
    step = max(1, PIECE_BYTES * e.shape[k] // e.nbytes)
    head = (slice(None),) * k
    return [(*head, slice(i, i + step)) for i in range(0, e.shape[k], step)]


def _sums(e, axes):
    return np.add.reduce(e, axis=axes, keepdims=True)


def _float64_sums(e, axes):
    return np.add.reduce(e, axis=axes, keepdims=True, dtype=np.float64).astype(e.dtype)
