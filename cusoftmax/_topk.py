"""softmax_topk: the softmax probabilities of the k largest entries of each slice, with their
positions; on any array module ``xp`` (NumPy on the host, CuPy on the GPU).

The order is that of ``argsort(-v, kind="stable")`` on ``v = scale * x`` in the compute type,
found without a full sort: each value becomes an integer key whose ascending order is that
order (NaN after every number, positions left out by `where` after NaN, equal values equal
keys); a partition finds the k-th smallest key of each slice, the keys below it and the first
ties at it in position order make the k candidates, and a stable sort of the candidates by key
orders them (ties stay in position order: the lower index first). The probabilities come from
the family's (m, c, s) state and its per-element map, so they are softmax's and log_softmax's
own values at those positions.
"""

from __future__ import annotations

import numpy as np

from . import _args, _engine, _host
from . import _composed as C


def _order_key(xp, v, keep):
    """Integer keys, ascending in the order of ``argsort(-v, kind="stable")`` with the positions
    where `keep` is False after all others; returns (keys, the key of NaN, the key of a position
    left out).

    float32 and float64: the bits as an unsigned integer, the non-negative values' bits flipped
    below the sign, so the key falls as the value rises; -0.0 (the sign bit alone) takes +0.0's
    key, so they tie as in the sort (from the bits: ``v + 0`` is folded away by XLA, and a
    float compare counts subnormals as 0 on some backends). -inf has the largest bits of any
    number; NaN takes the next key, left-out positions the one after. Wider types (longdouble,
    host only): dense ranks of the values.
    """
    uint = {4: np.uint32, 8: np.uint64}.get(v.dtype.itemsize)
    with np.errstate(all="ignore"):
        if uint is None:
            _, rank = xp.unique(v, return_inverse=True)
            last = np.int64(v.size)
            key = last - rank.reshape(v.shape).astype(np.int64)
        else:
            bits = v.view(uint)
            low = uint((1 << (8 * v.dtype.itemsize - 1)) - 1)
            key = xp.where(bits > low, bits, bits ^ low)
            key = xp.where(bits == low + uint(1), low, key)
            last = np.asarray(-np.inf, v.dtype).view(uint)[()]
        nan_key, out_key = last + 1, last + 2
        key = xp.where(xp.isnan(v), nan_key, key)
        if keep is not None:
            key = xp.where(keep, key, out_key)
    return key, nan_key, out_key


def _smallest(xp, key, k: int):
    """Positions (int64, last axis) of the k smallest keys of each row, ascending by key, equal
    keys by position: ``argsort(key, kind="stable")[..., :k]``, by a partition and a sort of k."""
    n = key.shape[-1]
    t = xp.partition(key, k - 1, axis=-1)[..., k - 1:k]
    tied = key == t
    need = k - xp.sum(key < t, axis=-1, keepdims=True)
    take = (key < t) | (tied & (xp.cumsum(tied, axis=-1) <= need))
    # Scatter the taken positions, in position order, into k slots a row; the others go to a
    # spare slot k of their row, then dropped (no count read back: no device sync).
    slot = xp.where(take, xp.cumsum(take, axis=-1) - 1, k)
    rows = key.size // n
    dest = xp.empty(rows * (k + 1), np.int64)
    target = slot.reshape(rows, n) + xp.arange(rows, dtype=np.int64)[:, None] * (k + 1)
    dest[target.ravel()] = xp.tile(xp.arange(n, dtype=np.int64), rows)
    cand = dest.reshape(rows, k + 1)[:, :k].reshape(key.shape[:-1] + (k,))
    order = xp.argsort(xp.take_along_axis(key, cand, axis=-1), axis=-1, kind="stable")
    return xp.take_along_axis(cand, order, axis=-1)


def softmax_topk(x, k, axis=-1, *, log=False, renormalize=False, where=None, scale=None,
                 out=None):
    """The softmax probabilities of the `k` largest entries of each slice, and their positions.

    Parameters
    ----------
    x : array_like
        As for :func:`cusoftmax.softmax` (CuPy, PyTorch, JAX, Numba or NumPy arrays, the same
        dtypes and promotion), or a Dask array of CuPy or NumPy chunks: then a pair of lazy
        Dask arrays, the axis split over chunks or not (each chunk's k best entries and state,
        merged in a tree).
    k : int
        How many entries a slice: ``1 <= k <=`` the axis length. A bool or a float is a
        TypeError, a value out of that range a ValueError.
    axis : int, optional
        The one axis of each slice (negative counts from the end). A tuple or None is a
        TypeError; a 0-d `x` has no axis (AxisError). Default ``-1``.
    log : bool, optional
        Return log-probabilities (as :func:`cusoftmax.log_softmax`) instead.
    renormalize : bool, optional
        Make the `k` values of each slice sum to 1 (their softmax among themselves, as MoE
        routing takes them); with `log`, the log of those.
    where : bool array_like, optional
        Broadcastable to `x`; False positions are left out of their slice and never chosen. A
        slice with fewer than `k` positions left fills its last slots with value 0 (-inf with
        `log`) and index -1; a slice with none left is all 0 (or -inf) and -1.
    scale : scalar or array_like, optional
        The entries are ``scale * x`` (rounded to the compute type), one value a slice, as in
        :func:`cusoftmax.softmax`; a negative scale takes the smallest entries of `x`.
    out : tuple of two arrays, optional
        ``(values, indices)``: the result's shape, the result's dtype and int64, the same
        framework and device as `x`; both checked before anything is written.

    Returns
    -------
    values : array
        The input's shape with the axis length `k`: the probabilities (log-probabilities with
        `log`), decreasing along the axis, in the result dtype of `x` (as softmax).
    indices : array
        Same shape, int64: the positions of those entries along the axis.

    Raises
    ------
    numpy.exceptions.AxisError
        If `axis` is out of range, or `x` is 0-d.
    TypeError
        For unsupported dtypes (as softmax), a `k` or `axis` that is not an integer, a tuple
        or None axis, a `where` that is not bool, a `scale` that is not real, an `out` with a
        Dask `x`, or an `out` that is not a pair of arrays of the right dtypes and kind.
    ValueError
        For `k` out of range, an axis of length 0, a `where` or `scale` that does not broadcast,
        or an `out` of the wrong shape or device.

    Notes
    -----
    The order is ``argsort(-v, kind="stable")[:k]`` of ``v = scale * x`` in the compute type:
    ties go to the lower index, -inf entries come after every number and NaN after them (as
    NumPy sorts NaN last). A slice holding NaN has NaN values (its slots left empty by `where`
    excepted) and the indices of that order. The values are those of :func:`cusoftmax.softmax`
    (or :func:`cusoftmax.log_softmax` with `log`) at the chosen positions, their special cases
    included: a slice holding +inf is all NaN (with `log`: NaN at the +inf entries, -inf
    elsewhere); a slice of all -inf is NaN. With `renormalize` they are the softmax of the `k`
    chosen values, NaN for a slice holding NaN anywhere. Half types are computed in float32,
    float64 in float64. On the GPU, float16, bfloat16 and float32 without `where` take one read
    of `x` by the topk kernels (k up to 256), a scalar `scale` positive and finite in float32
    applied as they load; the rest runs as CuPy array operations on the current stream (a
    partition and a sort of the candidates). Inside JAX transformations `k` is a static int,
    the order is the same (``lax.top_k`` of the integer keys), the values differentiate in `x`,
    and the indices are JAX's default integer (int32 without x64).

    Examples
    --------
    >>> import numpy as np, cusoftmax
    >>> p, i = cusoftmax.softmax_topk(np.log(np.array([0.1, 0.6, 0.3])), 2)
    >>> p, i
    (array([0.6, 0.3]), array([1, 2]))
    """
    op = ("softmax_topk", k, type(k), log, renormalize)  # the fast path's key
    if type(x) is _engine.fast_type and out is None and where is None and scale is None:
        run = _engine.remembered(x, axis, op)
        if run is not None:
            return run(x)
    c = _args.prepare(x, axis, None, None, "softmax_topk", where=where, scale=scale)
    ax, k, shape, dst = _args.topk_out(axis, k, out, c)
    w, s = c.where, c.scale
    xp = c.xp
    with c.device:
        values, indices = _topk(xp, c, ax, shape, w, s, log, renormalize, dst, (x, axis, op))
    if dst is not None:
        return out
    wrap = c.src.wrap
    return (values, indices) if wrap is None else (wrap(values), wrap(indices))


def _topk(xp, c: _args.Call, ax: int, shape, w, s, log, renormalize, dst, remember=None):
    """The (values, indices) of a checked call, written into `dst` where given. ``remember``:
    (the caller's x, axis, key) for the fast path's table, where the kernels take the call."""
    if c.array.size == 0:
        return dst or (xp.empty(shape, c.dtype), xp.empty(shape, np.int64))
    fs = _engine.fused_scale(s, c.dtype)
    if xp is not np and w is None and (s is None or fs is not None):
        remember = None if dst or fs is not None else remember
        fused = _engine.topk_fused(c, ax, shape[ax], log, renormalize, remember, fs)
        if fused is not None:
            if dst is None:
                return fused
            xp.copyto(dst[0], fused[0])
            xp.copyto(dst[1], fused[1])
            return dst
    compute = C.compute_types(c.dtype)[0]
    axes, k = (ax,), shape[ax]
    v = C.scaled(xp, c.array.astype(c.dtype, copy=False), s, compute)
    values, top, kept, has_nan = choose(xp, v, w, k, ax, nan=renormalize)
    indices = top if kept is None else xp.where(kept, top, np.int64(-1))
    if renormalize:
        st = None
    elif xp is np and w is None:
        with np.errstate(all="ignore"):
            st = C.State(*_host.state(v, axes, C.compute_types(c.dtype)[1]))
    else:
        st = C.state(xp, v, axes, where=w)
    values = finish(xp, "log_softmax" if log else "softmax", values, kept, axes, st, has_nan,
                    out=None if dst is None else dst[0])
    if dst is None:
        return values.astype(c.dtype, copy=False), indices
    xp.copyto(dst[1], indices)
    return dst


# Slices up to this length are sorted whole on the host (the definition itself; -v: NaN last,
# -0.0 ties +0.0): a sort of n beats the partition's dozen array operations there.
HOST_SORT_MAX = 4096


def choose(xp, v, keep, k: int, ax: int, nan: bool = False):
    """The entries of the k least keys of each slice of `v` along `ax`, in key order: (values,
    positions along the axis, kept: where `keep` left them in (None without a `keep`), has_nan:
    whether the slice holds a NaN left in, keepdims, only where `nan`), the axis of length k."""
    if xp is np and keep is None and not nan and v.shape[ax] <= HOST_SORT_MAX:
        top = np.take(np.argsort(-v, axis=ax, kind="stable"), np.arange(k), axis=ax)
        return np.take_along_axis(v, top, axis=ax), top, None, None
    key, nan_key, out_key = _order_key(xp, v, keep)
    key = xp.moveaxis(key, ax, -1)
    top = _smallest(xp, key, k)
    values = xp.moveaxis(xp.take_along_axis(xp.moveaxis(v, ax, -1), top, axis=-1), -1, ax)
    kept = None
    if keep is not None:
        kept = xp.moveaxis(xp.take_along_axis(key, top, axis=-1) != out_key, -1, ax)
    has_nan = None
    if nan:
        has_nan = xp.moveaxis(xp.any(key == nan_key, axis=-1, keepdims=True), -1, ax)
    return values, xp.moveaxis(top, -1, ax), kept, has_nan


def finish(xp, op, values, kept, axes, st, has_nan, out=None):
    """softmax or log_softmax (`op`) of chosen `values` from their slices' State `st`; with no
    `st` (renormalize), from the chosen values' own, NaN where `has_nan`."""
    if st is None:
        st = C.state(xp, values, axes, where=kept)
        # A NaN anywhere in the slice makes it NaN, chosen or not (NaN sorts last).
        st = st._replace(m=xp.where(has_nan, st.m.dtype.type(np.nan), st.m))
    return C.normalize(xp, op, values, st, axes, where=kept, out=out)
