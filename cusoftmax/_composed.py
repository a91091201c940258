"""The softmax family in array operations on any array module ``xp`` (NumPy on the host, CuPy on
the GPU for what no kernel takes yet, per chunk under Dask).

Every function of the family reduces each slice to a :class:`State` and maps the state (and the
elements) to its result. A state is associative under :func:`merge`, so a slice may be cut into
pieces (chunks, devices) whose states combine in any grouping.

Arrays given to these functions are already checked: `x` is a float array of the result's dtype,
`axes` sorted and non-negative, `where`, `scale` and `b` broadcastable as the public functions
require. Compute types: float64 and wider in their own type, the rest in float32; sums
accumulate in float64 (in the compute type where it is wider). No warnings for NaN or inf.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

OPS = ("softmax", "log_softmax")


class State(NamedTuple):
    """One slice's reduction, in keepdims shape (length 1 on the reduced axes).

    ``m``: the largest unmasked (scaled) value, in the compute type; -inf where no position is
    kept or all are -inf, NaN where a kept value is NaN. ``c``: the sum of the weights (``b``, or 1)
    at the kept positions whose value equals ``m`` (NaN where ``m`` is +inf with weights of both
    signs there, as ``inf - inf``). ``s``: the sum of ``weight * exp(v - m)`` over the other kept
    positions. ``c`` and ``s`` are in the accumulation type. The slice's sum of
    ``weight * exp(v)`` is ``(c + s) * exp(m)``, with the dominant term ``c`` kept apart from the
    rest so that ``log(c + s) = log(c) + log1p(s / c)`` loses nothing to rounding.
    """

    m: Any
    c: Any
    s: Any


def compute_types(dtype) -> tuple[np.dtype, np.dtype]:
    """(compute type, accumulation type) for results of `dtype`: float64 and wider compute and
    accumulate in their own type; float32, the half types and 8-bit floats compute in float32 and
    accumulate in float64."""
    try:
        return _COMPUTE[dtype]
    except (KeyError, TypeError):
        pass
    got = _compute_types(np.dtype(dtype))
    _COMPUTE[np.dtype(dtype)] = got
    return got


_COMPUTE: dict = {}  # dtype -> (compute type, accumulation type)


def _compute_types(dtype: np.dtype) -> tuple[np.dtype, np.dtype]:
    if dtype.itemsize >= 8:
        own = np.dtype(dtype.type)  # native, NumPy's own descriptor (_args.native)
        return own, own
    return np.dtype(np.float32), np.dtype(np.float64)


def _quiet():
    """NaN and inf are results here, not errors: NumPy's warnings for them are off (CuPy emits
    none)."""
    return np.errstate(all="ignore")


def _max(xp, a, axes):
    """The max over `axes`, keepdims; NumPy's by its ufunc's reduce (``numpy.max`` adds some
    2 us a call around the same reduce)."""
    if xp is np:
        return np.maximum.reduce(a, axis=axes, keepdims=True)
    return xp.max(a, axis=axes, keepdims=True)


def _sum(xp, a, axes, dtype):
    """The sum over `axes` in `dtype`, keepdims (NumPy's by ``add.reduce``, as ``_max``)."""
    if xp is np:
        return np.add.reduce(a, axis=axes, keepdims=True, dtype=dtype)
    return xp.sum(a, axis=axes, keepdims=True, dtype=dtype)


class Segments(NamedTuple):
    """Segments of consecutive positions along axis 0 of an array that holds only positions of
    some segment, in segment order: the reducer ``state`` and ``vjp_sum`` take as ``over=`` in
    place of reduced axes. A segment's value is its own (``count`` of them, the empty ones
    holding the reduction's identity); ``expand`` gives each position its segment's."""

    count: int  # the number of segments, empty ones included
    filled: Any  # the indices of the non-empty segments, increasing (an int64 array)
    starts: Any  # their first positions
    lengths: Any  # their lengths (positive, summing to the array's length)

    def reduce(self, xp, ufunc: str, a, identity, dtype=None):
        """``ufunc``'s reduction of each segment of `a` (``identity`` for an empty one): an
        array of ``(count,) + a.shape[1:]``."""
        out = xp.full((self.count,) + a.shape[1:], identity, dtype or a.dtype)
        if len(self.filled):
            out[self.filled] = getattr(xp, ufunc).reduceat(a, self.starts, axis=0, dtype=dtype)
        return out

    def expand(self, xp, r):
        """Each position's value of its segment, from ``r`` of ``(count,) + ...``."""
        return xp.repeat(r[self.filled], self.lengths, axis=0)


class Scattered(NamedTuple):
    """Segments given by each position's id along axis 0, in any order: the reducer
    ``Segments`` is for ids in order, by ``ufunc.at`` (positions in order, so deterministic).
    Positions of no segment hold id 0 here and are left out by the caller's mask."""

    count: int  # the number of segments, empty ones included
    ids: Any  # each position's segment (int64), 0 for a position of none
    inside: Any  # whether each position is in a segment (bool), or None for all

    def reduce(self, xp, ufunc: str, a, identity, dtype=None):
        out = xp.full((self.count,) + a.shape[1:], identity, dtype or a.dtype)
        a = a.astype(out.dtype, copy=False)  # ufunc.at's fast loop needs one dtype
        if self.inside is None:
            getattr(xp, ufunc).at(out, self.ids, a)
        else:
            getattr(xp, ufunc).at(out, self.ids[self.inside], a[self.inside])
        return out

    def expand(self, xp, r):
        if self.count == 0:  # no segment: every position is left out
            return xp.zeros((len(self.ids),) + r.shape[1:], r.dtype)
        return r[self.ids]


def scaled(xp, x, scale, compute):
    """``scale * x`` rounded to the compute type (the values every function works on). A Python or
    NumPy scalar stays on the host: no transfer to the device for it."""
    v = x.astype(compute, copy=False)
    if scale is None:
        return v
    if isinstance(scale, (int, float, np.generic)):
        return v * compute.type(scale)
    return v * xp.asarray(scale, dtype=compute)


def _kept(xp, where, b):
    """The positions that count (``where`` and ``b != 0``), in their own broadcast shape; None
    for all."""
    nonzero = None if b is None else b != 0
    if where is None or nonzero is None:
        return nonzero if where is None else where
    return xp.logical_and(where, nonzero)


def state(xp, x, axes, *, where=None, scale=None, b=None, over: Segments | Scattered | None = None) -> State:
    """The :class:`State` of each slice of ``scale * x`` over `axes`, or of each segment.

    Parameters
    ----------
    xp : module
        The array module of `x` (``numpy`` or ``cupy``).
    x : array
        Float values, of the result's dtype.
    axes : tuple of int
        The reduced axes, sorted and non-negative.
    where : bool array, optional
        Broadcastable to `x`; False positions are left out of their slice.
    scale : scalar or array, optional
        Broadcastable to `x`, one value a slice: the state is that of ``scale * x``.
    b : array, optional
        Real weights broadcastable to `x` (``logsumexp``'s `b`); positions with ``b == 0``
        are left out (an inf or NaN there adds nothing). Not with `over`.
    over : Segments, optional
        Reduce each segment of axis 0 instead of `axes` (`where` and `scale` then hold a
        value a position).

    Returns
    -------
    State
        ``m`` in the compute type, ``c`` and ``s`` in the accumulation type, each of keepdims
        shape (with `over`: ``(over.count,) + x.shape[1:]``).
    """
    compute, acc = compute_types(x.dtype)
    inf = compute.type(np.inf)
    if over is None:
        def total(a, dtype):
            return _sum(xp, a, axes, dtype)
    else:
        def total(a, dtype):
            return over.reduce(xp, "add", a, 0, dtype)
    with _quiet():
        v = scaled(xp, x, scale, compute)
        w = None if b is None else xp.asarray(b, dtype=acc)
        keep = _kept(xp, where, w)
        vk = v if keep is None else xp.where(keep, v, -inf)
        m = _max(xp, vk, axes) if over is None else over.reduce(xp, "maximum", vk, -inf)
        mx = m if over is None else over.expand(xp, m)  # each position's slice's max
        top = vk == mx if keep is None else xp.logical_and(vk == mx, keep)
        ones = acc.type(1) if w is None else w
        c = total(xp.where(top, ones, acc.type(0)), acc)
        # Shifted by 0 where m is -inf, so left-out positions (-inf) give exp(-inf) = 0, not
        # NaN; on the top positions exp(v - m) is 1 or NaN (inf - inf): they are in c, not s.
        rest = xp.exp(vk - xp.where(mx == -inf, compute.type(0), mx))
        # Left-out weights as 0: an inf or NaN weight where `where` is False adds nothing.
        rest = rest if w is None else rest * xp.where(keep, w, acc.type(0))
        s = total(xp.where(top, acc.type(0), rest), acc)
        if w is not None:
            # +inf with weights of both signs is inf - inf: NaN, whatever their sum.
            both = xp.logical_and(xp.any(xp.logical_and(top, w > 0), axis=axes, keepdims=True),
                                  xp.any(xp.logical_and(top, w < 0), axis=axes, keepdims=True))
            c = xp.where(xp.logical_and(both, m == inf), acc.type(np.nan), c)
    return State(m, c, s)


def merge(xp, p: State, q: State) -> State:
    """The state of two pieces of the same slices together (associative and commutative).

    ``M = max(m_p, m_q)``; a side whose ``m`` equals ``M`` adds its ``(c, s)`` as they are, the
    other adds ``(c + s) * exp(m - M)`` to ``s``. A side of ``m = -inf`` adds nothing and makes no
    NaN; NaN on either side gives NaN. Where both sides hold +inf with weights of opposite signs
    the sum is NaN (``inf - inf``).
    """
    acc = p.c.dtype
    with _quiet():
        big = xp.maximum(p.m, q.m)  # NaN on either side propagates
        c, s = acc.type(0), acc.type(0)
        for side in (p, q):
            top = side.m == big
            c = c + xp.where(top, side.c, acc.type(0))
            shrink = xp.exp(side.m.astype(acc) - big.astype(acc))
            s = s + xp.where(top, side.s, (side.c + side.s) * shrink)
        clash = xp.logical_and(xp.logical_and(p.m == q.m, big == np.inf), p.c * q.c < 0)
        c = xp.where(clash, acc.type(np.nan), c)
    return State(big, c, s)


def log_sum(xp, st: State, return_sign=False, *, dtype=None):
    """``log(sum(weight * exp(v)))`` of each slice from its state, keepdims shape.

    Computed as ``m + log|c| + log|1 + s/c|`` (``log1p`` of ``s/c``, or of ``-s/c - 2`` where
    ``s/c < -1``), which keeps the dominant term exact; where ``c`` is 0 (weights that cancel at
    the maximum), ``m + log|s|``.

    Parameters
    ----------
    xp : module
        The array module.
    st : State
        The slices' final states.
    return_sign : bool, optional
        Also return the sum's sign: 1, -1, 0 where the sum is 0 (the log is then -inf), NaN
        where it is NaN. Without it, a negative sum's log is NaN.
    dtype : dtype, optional
        The result's dtype; default the state's compute type.

    Returns
    -------
    array or (array, array)
        The log of the sum's magnitude, and its sign when `return_sign`.
    """
    m, c, s = st
    acc = c.dtype
    dtype = m.dtype if dtype is None else np.dtype(dtype)
    with _quiet():
        mm = m.astype(acc, copy=False)
        r = s / c
        lead = xp.log1p(xp.where(r < -1, -r - 2, r)) + xp.log(xp.abs(c))
        lead_sign = xp.sign(c) * xp.sign(r + 1)
        alone = c == 0  # the top weights cancel: the sum is s * exp(m)
        out = mm + xp.where(alone, xp.log(xp.abs(s)), lead)
        sign = xp.where(alone, xp.sign(s), lead_sign)
        sign = xp.where(out == -np.inf, acc.type(0), sign)
        sign = xp.where(xp.isnan(out), acc.type(np.nan), sign)
        if not return_sign:
            return xp.where(sign < 0, acc.type(np.nan), out).astype(dtype)
    return out.astype(dtype), sign.astype(dtype)


def normalize(xp, op, x, st, axes, *, where=None, scale=None, out=None,
              over: Segments | Scattered | None = None):
    """Each element of `x` from its slice's final state: the softmax or the log_softmax.

    ``softmax``: ``exp(v - m) / (c + s)``; a slice whose maximum is +inf (or NaN, or whose kept
    values are all -inf) is all NaN, as SciPy. ``log_softmax``: ``(v - m) - log1p(s/c) - log(c)``,
    so the maximum entry is ``-log1p(s/c)`` to the last bit (``x - logsumexp(x)`` otherwise, with
    its NaN and inf results). Positions where `where` is False give 0 (softmax) or -inf
    (log_softmax), a fully masked slice included.

    Parameters
    ----------
    xp : module
        The array module.
    op : {'softmax', 'log_softmax'}
        The result.
    x : array
        Float values, of the result's dtype.
    st : State
        The final state of each slice (from :func:`state`, merged over all pieces of the
        slice), length 1 on `axes`.
    axes : tuple of int
        The reduced axes.
    where, scale : optional
        As given to :func:`state`.
    out : array, optional
        Written with the result (any float dtype that ``same_kind`` casting reaches).
    over : Segments, optional
        `st` holds a state a segment of axis 0 (:func:`state`'s `over`), not a slice of `axes`.

    Returns
    -------
    array
        The result in `x`'s dtype, or `out`.
    """
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if over is None and (st.m.ndim != x.ndim or any(st.m.shape[a] != 1 for a in axes)):
        raise ValueError(f"a state of shape {st.m.shape} does not reduce axes {axes} of {x.shape}")
    compute = st.m.dtype
    m = st.m
    k = constant(xp, op, st)
    if over is not None:  # each position its segment's m and k
        m, k = over.expand(xp, m), over.expand(xp, k)
    with _quiet():
        v = scaled(xp, x, scale, compute)
        if op == "softmax":
            y = xp.exp(v - m) * k
            masked = compute.type(0)
        else:
            y = (v - m) - k
            masked = compute.type(-np.inf)
        if where is not None:
            y = xp.where(where, y, masked)
    return _store(xp, y, x.dtype, out)


def direct(xp, op, x, axes, *, where=None, scale=None, over: Segments | Scattered | None = None,
           acc=None):
    """softmax, log_softmax or logsumexp (keepdims; with `over` one value a segment) of each
    slice or segment in one max, one sum of ``exp(v - m)`` and the map, without the (m, c, s)
    split: fewer array operations than ``state`` and ``normalize``. Sums accumulate in `acc`
    (default the compute type). The NaN and inf rules come from the arithmetic: softmax shifts
    by the max (+inf gives ``inf - inf`` = NaN, a NaN max NaN, all -inf ``-inf - -inf`` = NaN:
    the whole slice NaN, as SciPy); log_softmax and logsumexp shift by 0 where the max is not
    finite (+inf: NaN at +inf and an infinite sum, -inf elsewhere; all -inf: a sum of 0). A
    log_softmax's largest entry is ``-log(1 + s)``, not ``-log1p(s)``: within the log bound,
    not to the last bit."""
    compute, _ = compute_types(x.dtype)
    inf = compute.type(np.inf)
    if over is None:
        def total(a):
            return xp.sum(a, axis=axes, keepdims=True, dtype=acc).astype(compute, copy=False)

        def each(r):
            return r
    else:
        def total(a):
            return over.reduce(xp, "add", a, 0, acc).astype(compute, copy=False)

        def each(r):
            return over.expand(xp, r)
    with _quiet():
        v = scaled(xp, x, scale, compute)
        if where is not None:
            v = xp.where(where, v, -inf)
        m = xp.max(v, axis=axes, keepdims=True, initial=-inf) if over is None else \
            over.reduce(xp, "maximum", v, -inf)
        if op == "softmax":
            t = xp.exp(v - each(m))
            y = t / each(total(t))
            masked = compute.type(0)
        else:
            m = xp.where(xp.isfinite(m), m, compute.type(0))
            lse = xp.log(total(xp.exp(v - each(m))))
            if op == "logsumexp":
                return (m + lse).astype(x.dtype)
            y = (v - each(m)) - each(lse)
            masked = -inf
        if where is not None:
            y = xp.where(where, y, masked)
    return y.astype(x.dtype)


def constant(xp, op, st: State):
    """Each slice's constant from its state, in the state's compute type: an element's softmax
    is ``exp(v - m) * k``, ``k = 1 / (c + s)`` (NaN where m is +inf: such a slice is NaN
    throughout, as SciPy's); its log_softmax ``(v - m) - k``, ``k = log1p(s / c) + log(c)``, so
    the largest entry is ``-log1p(s / c)`` to the last bit where c is 1."""
    m, c, s = st
    with _quiet():
        if op == "softmax":
            k = xp.where(m == np.inf, np.nan, 1 / (c + s))
        else:
            k = xp.log1p(s / c) + xp.log(c)
    return k.astype(m.dtype)


def _store(xp, y, dtype, out):
    if out is None:
        return y.astype(dtype, copy=False)
    xp.copyto(out, y, casting="same_kind")
    return out


def vjp_sum(xp, y, dy, axes, *, where=None, log=False, over: Segments | Scattered | None = None):
    """The slice's total of the backward pass, keepdims shape, in the accumulation type:
    ``sum(dy * y)`` (softmax) or ``sum(dy)`` (``log=True``, log_softmax), masked positions left
    out.

    Parameters
    ----------
    xp : module
        The array module.
    y : array
        The forward result (softmax, or log_softmax with ``log=True``), of the result's dtype.
    dy : array
        The gradient with respect to `y`, same shape, cast to `y`'s dtype.
    axes : tuple of int
        The reduced axes.
    where : bool array, optional
        The forward pass's mask, broadcastable to `y`.
    log : bool, optional
        Whether `y` is a log_softmax.
    over : Segments, optional
        Sum each segment of axis 0 instead of `axes`: ``(over.count,) + y.shape[1:]``.
    """
    compute, acc = compute_types(y.dtype)
    with _quiet():
        t = dy.astype(compute, copy=False)
        if not log:
            t = t * y.astype(compute, copy=False)
        if where is not None:
            t = xp.where(where, t, compute.type(0))
        return _sum(xp, t, axes, acc) if over is None else over.reduce(xp, "add", t, 0, acc)


def vjp(xp, y, dy, total, *, where=None, log=False, out=None):
    """The gradient with respect to the forward pass's input from the slice's `total`
    (:func:`vjp_sum`, summed over all pieces of the slice): ``y * (dy - total)`` (softmax) or
    ``dy - exp(y) * total`` (``log=True``); 0 where `where` is False.

    Parameters
    ----------
    xp : module
        The array module.
    y, dy : array
        As given to :func:`vjp_sum`.
    total : array
        The slices' totals, keepdims shape.
    where : bool array, optional
        The forward pass's mask.
    log : bool, optional
        Whether `y` is a log_softmax.
    out : array, optional
        Written with the result.

    Returns
    -------
    array
        The gradient in `y`'s dtype, or `out`.
    """
    compute, _ = compute_types(y.dtype)
    with _quiet():
        yc, dyc = y.astype(compute, copy=False), dy.astype(compute, copy=False)
        t = total.astype(compute)
        dx = dyc - xp.exp(yc) * t if log else yc * (dyc - t)
        if where is not None:
            dx = xp.where(where, dx, compute.type(0))
    return _store(xp, dx, y.dtype, out)
