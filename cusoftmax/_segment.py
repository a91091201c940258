"""Softmax over segments: the family on ragged groups of positions along one axis, each group
(a node's incoming edges, a molecule's states, a cluster's members) normalised on its own.

A segment's result is the family's on the segment alone: ``_composed``'s reductions over each
segment instead of over an axis (``Segments``: ``reduceat`` over segments in order, several
columns; ``Scattered``: ``ufunc.at`` in place, one column; record segment-2), softmax by
``direct`` (one max, one sum), log_softmax and logsumexp by the (m, c, s) state that keeps the
dominant term apart; the family's NaN, inf and `where` rules. Positions of no segment give
what a masked position gives (0, -inf, a zero gradient). GPU arrays go to the segment kernels
(``planning/segment.py``: the five functions on rows of up to 8 elements, no `where`, a scalar
scale; float64 log_softmax and logsumexp excepted); the rest is computed on the host with
NumPy, a GPU array copied to the host and the result back. Inside JAX transformations the
public functions send JAX tracers to ``_jax``'s segment functions (XLA's segment reductions).
"""

from __future__ import annotations

import math

import numpy as np

from . import _args
from . import _composed as C


def segment_softmax(x, segment_ids=None, *, offsets=None, num_segments=None, axis=0,
                    indices_are_sorted=False, where=None, scale=None, out=None):
    """Softmax of ``scale * x`` over each segment of positions along `axis`.

    Parameters
    ----------
    x : array_like
        As for :func:`cusoftmax.softmax` (NumPy, CuPy, PyTorch, JAX or Numba arrays, the same
        dtypes and promotion). The other axes are batched: each column of an ``(edges, heads)``
        array is normalised on its own.
    segment_ids : array_like of int, optional
        The segment of each position along `axis` (1-d, of its length), as in
        ``jax.ops.segment_sum``: positions whose id lies outside ``[0, num_segments)`` belong to
        no segment. Any order; unsorted ids cost a stable sort. Give this or `offsets`.
    offsets : array_like of int, optional
        CSR offsets (PyG's ``ptr``), non-decreasing, of length ``num_segments + 1``: segment i
        is positions ``offsets[i]`` to ``offsets[i + 1] - 1``; positions before ``offsets[0]``
        or from ``offsets[-1]`` on belong to no segment.
    num_segments : int, optional
        The number of segments. Default: ``max(segment_ids) + 1`` (0 for none), or
        ``len(offsets) - 1`` (which, if given, it must equal).
    axis : int, optional
        The axis the segments lie along. Default 0.
    indices_are_sorted : bool, optional
        A promise that `segment_ids` are sorted (checked: a ValueError if they are not). The
        order is checked either way and sorted ids are never sorted again: on the GPU the
        segment kernels check it as they read the ids, so sorted ids cost no pass of their own
        and unsorted ones cost that first pass, a stable sort and the kernels again.
    where : bool array_like, optional
        Broadcastable to `x`; False positions are left out of their segment and give 0. A
        segment with no True position gives all zeros.
    scale : scalar or array_like, optional
        The softmax of ``scale * x``: a real scalar, or an array with one value a segment,
        broadcastable to the shape of `x` with `axis` of length `num_segments`.
    out : array, optional
        As for :func:`cusoftmax.softmax`: the shape and dtype of the result, the framework and
        device of `x`; it may be `x` itself.

    Returns
    -------
    array
        The softmax of each segment, in the shape and framework of `x`; 0 at positions of no
        segment.

    Raises
    ------
    numpy.exceptions.AxisError
        If `axis` is out of range (a 0-d `x` has none).
    TypeError
        For the dtypes softmax refuses, ids or offsets that are not integers, both or neither of
        `segment_ids` and `offsets`, an `axis` that is not an int, or a Dask array.
    ValueError
        For ids of the wrong length or not 1-d, offsets out of order or past the axis, a
        `num_segments` that disagrees with them, or `where`, `scale` or `out` of the wrong
        shape.

    Notes
    -----
    A segment holding NaN or +inf is all NaN, one of all -inf all NaN, as softmax's slices
    (SciPy). Results are deterministic. A GPU `x` with at most 8 elements a position along
    `axis` (the other axes' sizes multiplied), without `where`, with a scalar `scale` and not
    float64 log_softmax or logsumexp, is computed by the segment kernels: x and the ids read
    once, the result written once, and the rows of segments that cross a tile of the kernels
    read again. Anything else is computed by the host: the segments' maxima and sums by NumPy's
    ``reduceat`` or ``ufunc.at`` (sums in float64 for float32 and narrower types), a GPU array
    copied there and back.

    Examples
    --------
    >>> import numpy as np, cusoftmax
    >>> cusoftmax.segment_softmax(np.log([1.0, 3.0, 2.0]), np.array([0, 0, 1]))
    array([0.25, 0.75, 1.  ])
    """
    return _normalized("segment_softmax", x, segment_ids, offsets, num_segments, axis,
                       indices_are_sorted, where, scale, out)


def segment_log_softmax(x, segment_ids=None, *, offsets=None, num_segments=None, axis=0,
                        indices_are_sorted=False, where=None, scale=None, out=None):
    """Log of the softmax of ``scale * x`` over each segment of positions along `axis`.

    Parameters
    ----------
    x, segment_ids, offsets, num_segments, axis, indices_are_sorted, scale, out
        As for :func:`cusoftmax.segment_softmax`.
    where : bool array_like, optional
        Broadcastable to `x`; False positions are left out of their segment and give -inf.

    Returns
    -------
    array
        The log-softmax of each segment; -inf at positions of no segment.

    Raises
    ------
    numpy.exceptions.AxisError, TypeError, ValueError
        As :func:`cusoftmax.segment_softmax`.

    Notes
    -----
    A segment's values are :func:`cusoftmax.log_softmax`'s of the segment alone, its NaN and
    inf rules included.

    Examples
    --------
    >>> import numpy as np, cusoftmax
    >>> cusoftmax.segment_log_softmax(np.log([1.0, 3.0, 2.0]), offsets=[0, 2, 3])
    array([-1.38629436, -0.28768207,  0.        ])
    """
    return _normalized("segment_log_softmax", x, segment_ids, offsets, num_segments, axis,
                       indices_are_sorted, where, scale, out)


def segment_logsumexp(x, segment_ids=None, *, offsets=None, num_segments=None, axis=0,
                      indices_are_sorted=False, where=None, scale=None, out=None):
    """``log(sum(exp(scale * x)))`` of each segment of positions along `axis`.

    Parameters
    ----------
    x, segment_ids, offsets, num_segments, axis, indices_are_sorted, where, scale
        As for :func:`cusoftmax.segment_softmax` (positions where `where` is False add
        nothing).
    out : array, optional
        Of the result's shape and dtype, the framework and device of `x`.

    Returns
    -------
    array
        One value a segment: the shape of `x` with `axis` of length `num_segments` (for
        ``axis=0``, ``(num_segments,) + x.shape[1:]``); -inf for an empty segment.

    Raises
    ------
    numpy.exceptions.AxisError, TypeError, ValueError
        As :func:`cusoftmax.segment_softmax`.

    Notes
    -----
    A segment's value is :func:`cusoftmax.logsumexp`'s of the segment alone. On the host (and
    for float64) its largest term is kept apart from the others' sum, so a dominant term keeps
    its relative accuracy; the GPU kernels of the other dtypes sum the terms together, within
    the family's bound.

    Examples
    --------
    >>> import numpy as np, cusoftmax
    >>> cusoftmax.segment_logsumexp(np.log([1.0, 3.0, 2.0]), np.array([0, 0, 2]))
    array([1.38629436,       -inf, 0.69314718])
    """
    c, done = _kernels_first("segment_logsumexp", x, segment_ids, offsets, num_segments, axis,
                             indices_are_sorted, where, scale, out)
    if done is not None:
        return done
    c, seg, xm = _prepared(c, segment_ids, offsets, num_segments, axis, indices_are_sorted, scale)
    ax = c.axes[0]
    shape = _segment_shape(c, seg)
    res = _args.check_out(out, c.src, shape, c.dtype)
    w, s = _operands(c, seg, shape)
    st = C.state(np, xm[seg.lo:seg.hi], (0,), where=w, scale=s, over=seg.over)
    y = np.moveaxis(C.log_sum(np, st, dtype=c.dtype), 0, ax)
    return _finish(c, out, res, y)


def segment_softmax_vjp(y, dy, segment_ids=None, *, offsets=None, num_segments=None, axis=0,
                        indices_are_sorted=False, where=None, out=None):
    """The gradient with respect to `x` of :func:`cusoftmax.segment_softmax`, given its result
    `y` and the gradient `dy` with respect to `y`: ``y * (dy - sum(dy * y))`` over each
    segment.

    Parameters
    ----------
    y : array_like
        The forward result (any framework :func:`cusoftmax.softmax` takes).
    dy : array_like
        Of `y`'s shape and kind (cast to `y`'s dtype).
    segment_ids, offsets, num_segments, axis, indices_are_sorted, where
        As given to the forward call.
    out : array, optional
        Of `y`'s shape and dtype, the framework and device of `y`.

    Returns
    -------
    array
        The gradient, in `y`'s shape, dtype and framework; 0 at positions of no segment and
        where `where` is False.

    Raises
    ------
    numpy.exceptions.AxisError, TypeError, ValueError
        As :func:`cusoftmax.segment_softmax`; a ValueError for `dy` of another shape.

    Examples
    --------
    >>> import numpy as np, cusoftmax
    >>> y = np.array([0.25, 0.75, 1.0])
    >>> cusoftmax.segment_softmax_vjp(y, np.array([1.0, 0.0, 1.0]), offsets=[0, 2, 3])
    array([ 0.1875, -0.1875,  0.    ])
    """
    return _vjp("segment_softmax_vjp", y, dy, segment_ids, offsets, num_segments, axis,
                indices_are_sorted, where, out)


def segment_log_softmax_vjp(y, dy, segment_ids=None, *, offsets=None, num_segments=None,
                            axis=0, indices_are_sorted=False, where=None, out=None):
    """The gradient with respect to `x` of :func:`cusoftmax.segment_log_softmax`, given its
    result `y` and `dy`: ``dy - exp(y) * sum(dy)`` over each segment.

    Parameters
    ----------
    y, dy, segment_ids, offsets, num_segments, axis, indices_are_sorted, where, out
        As for :func:`cusoftmax.segment_softmax_vjp`, `y` a log-softmax.

    Returns
    -------
    array
        The gradient; 0 at positions of no segment and where `where` is False.

    Raises
    ------
    numpy.exceptions.AxisError, TypeError, ValueError
        As :func:`cusoftmax.segment_softmax_vjp`.

    Examples
    --------
    >>> import numpy as np, cusoftmax
    >>> y = np.log([0.25, 0.75, 1.0])
    >>> cusoftmax.segment_log_softmax_vjp(y, np.array([1.0, 0.0, 1.0]), offsets=[0, 2, 3])
    array([ 0.75, -0.75,  0.  ])
    """
    return _vjp("segment_log_softmax_vjp", y, dy, segment_ids, offsets, num_segments, axis,
                indices_are_sorted, where, out)


def _kernels_first(op, x, segment_ids, offsets, num_segments, axis, indices_are_sorted, where,
                   scale, out, dy=None):
    """(the checked call, the segment kernels' result or None): a GPU array goes to the kernels
    where they take the call (``_on_device``)."""
    c = _args.prepare(x, axis, None, None, op, empty_ok=True, where=where, dy=dy)
    done = _on_device(c, segment_ids, offsets, num_segments, axis, indices_are_sorted, scale,
                      out) if c.src.on_gpu else None
    return c, done


def _prepared(c, segment_ids, offsets, num_segments, axis, indices_are_sorted, scale=None):
    """(the checked call, its segments, x on the host in its result dtype with `axis` first and
    its positions in segment order). Every rule runs before anything is computed."""
    op = c.op
    ax = _args.one_axis(axis, c)
    n = c.array.shape[ax]
    # One value a position along the axis: NumPy's ufunc.at reduces in place faster than
    # reduceat over the segments in order, and no sort is needed (record segment-2).
    seg = _args.segmented(segment_ids, offsets, num_segments, n, indices_are_sorted, op,
                          scatter=c.array.size == n)
    c = c._replace(scale=_args.checked_scale(scale, c, _segment_shape(c, seg), "segment"))
    return c, seg, _in_order(c, seg, c.array.astype(c.dtype, copy=False))


def _segment_shape(c, seg):
    """The shape of one value a segment: x's with the axis of length ``count``."""
    ax = c.axes[0]
    return c.array.shape[:ax] + (seg.over.count,) + c.array.shape[ax + 1:]


def _host(a):
    """A NumPy array of `a` (a GPU array's copy)."""
    return a if isinstance(a, np.ndarray) else a.get()


def _in_order(c, seg, a):
    """`a` (of x's shape, on the host) with the axis first and its positions in segment order."""
    a = np.moveaxis(_host(a), c.axes[0], 0)
    return a if seg.order is None else a[seg.order]


def _operands(c, seg, shape):
    """(where, scale) for the positions of some segment, in segment order: the mask of each, the
    scale of each position's segment (a scalar as it is); None where not given."""
    w = None
    if c.where is not None:
        w = _in_order(c, seg, np.broadcast_to(_host(c.where), c.array.shape))[seg.lo:seg.hi]
    if seg.inside is not None:  # positions of no segment among them: left out as masked
        inside = seg.inside.reshape((-1,) + (1,) * (c.array.ndim - 1))
        w = inside if w is None else w & inside
    s = c.scale
    if s is not None and not isinstance(s, (int, float, np.generic)):
        s = seg.over.expand(np, np.moveaxis(np.broadcast_to(_host(s), shape), c.axes[0], 0))
    return w, s


def _scatter(c, seg, part, fill, out):
    """The result of x's shape from ``part`` (the positions of some segment, in segment order),
    `fill` elsewhere, written into `out` (the host array behind it, or None for a new one)."""
    res = np.empty(c.array.shape, c.dtype) if out is None or not isinstance(out, np.ndarray) \
        else out
    moved = np.moveaxis(res, c.axes[0], 0)
    if seg.order is None:
        moved[:seg.lo] = fill
        moved[seg.hi:] = fill
        moved[seg.lo:seg.hi] = part
    else:
        moved[seg.order[:seg.lo]] = fill
        moved[seg.order[seg.hi:]] = fill
        moved[seg.order[seg.lo:seg.hi]] = part
    return res


def _finish(c, out, dst, res):
    """`res` (a host array) in the caller's framework and device, or `out` (the caller's, `dst`
    the array behind it) written with it."""
    if not c.src.on_gpu:
        if dst is not None and res is not dst:
            dst[...] = res
    else:
        with c.device:
            res = c.xp.asarray(res)
            if dst is not None:
                dst[...] = res
    if out is not None:
        return out
    return res if c.src.wrap is None else c.src.wrap(res)


def _normalized(op, x, segment_ids, offsets, num_segments, axis, indices_are_sorted, where,
                scale, out):
    c, done = _kernels_first(op, x, segment_ids, offsets, num_segments, axis,
                             indices_are_sorted, where, scale, out)
    if done is not None:
        return done
    c, seg, xm = _prepared(c, segment_ids, offsets, num_segments, axis, indices_are_sorted, scale)
    res = _args.check_out(out, c.src, c.array.shape, c.dtype)
    family = op.removeprefix("segment_")
    w, s = _operands(c, seg, _segment_shape(c, seg))
    part = xm[seg.lo:seg.hi]
    if family == "softmax":  # one max and one sum: no dominant term to keep apart
        y = C.direct(np, family, part, (0,), where=w, scale=s, over=seg.over,
                     acc=C.compute_types(c.dtype)[1])
    else:  # the largest entry -log1p(s / c) to the last bit, as log_softmax's
        st = C.state(np, part, (0,), where=w, scale=s, over=seg.over)
        y = C.normalize(np, family, part, st, (0,), where=w, scale=s, over=seg.over)
    fill = 0 if family == "softmax" else -np.inf
    return _finish(c, out, res, _scatter(c, seg, y, fill, res))


def _vjp(op, y, dy, segment_ids, offsets, num_segments, axis, indices_are_sorted, where, out):
    c, done = _kernels_first(op, y, segment_ids, offsets, num_segments, axis, indices_are_sorted,
                             where, None, out, dy)
    if done is not None:
        return done
    c, seg, ym = _prepared(c, segment_ids, offsets, num_segments, axis, indices_are_sorted)
    res = _args.check_out(out, c.src, c.array.shape, c.dtype)
    log = op == "segment_log_softmax_vjp"
    w, _ = _operands(c, seg, None)
    yp, gp = ym[seg.lo:seg.hi], _in_order(c, seg, c.dy)[seg.lo:seg.hi]
    total = C.vjp_sum(np, yp, gp, (0,), where=w, log=log, over=seg.over)
    dx = C.vjp(np, yp, gp, seg.over.expand(np, total), where=w, log=log)
    return _finish(c, out, res, _scatter(c, seg, dx, 0, res))


def _on_device(c, segment_ids, offsets, num_segments, axis, indices_are_sorted, scale, out):
    """The segment kernels' result for a call on a GPU array (planning/segment.py), or None
    where they cannot take it (the host computes it)."""
    from . import _kernels, planning
    from .planning import segment as plans

    ax = _args.one_axis(axis, c)
    shape = c.array.shape
    n = shape[ax]
    cols = math.prod(shape) // n if n else 0
    if (c.where is not None or c.dtype.name not in plans.TYPES[c.op] or plans.width(cols) is None
            or n == 0 or not (scale is None or _args.scalar_scale(scale))
            or not math.isfinite(1.0 if scale is None else float(scale))):
        return None
    xp, tuning = c.xp, planning.active()
    lse = c.op == "segment_logsumexp"
    word = _kernels.load_word("Scaled", 1.0 if scale is None else scale)
    device = c.array.device.id

    def launch(seg):  # y in segment order, or None where no plan takes the call
        if not seg.array.flags.c_contiguous or seg.array.data.ptr % 16:
            seg = seg._replace(array=seg.array.copy())  # read as contiguous 16-byte loads
        p = plans.plan(c.op, n, cols, seg.count, c.dtype.itemsize, seg.array.dtype, seg.offsets,
                       True, tuning)
        if p is None:
            return None
        xm = _rows(xp, c.array, c.dtype, ax, seg.order, n, cols)
        gm = xm if c.dy is None else _rows(xp, c.dy, c.dtype, ax, seg.order, n, cols)
        y = (xp.full((seg.count, cols), -np.inf, c.dtype) if lse
             else xp.empty((n, cols), c.dtype))
        work = xp.empty(p.workspace, np.uint8)
        _kernels.bind(p.tiles, None, c.dtype.name, device, tuning)(xm, gm, seg.array, y, work,
                                                                     unsorted, load=word)
        _kernels.bind(p.fold, None, c.dtype.name, device, tuning)(y, work)
        if p.fixup is not None:
            _kernels.bind(p.fixup, None, c.dtype.name, device, tuning)(xm, gm, work, y,
                                                                      load=word)
        return y

    with c.device:
        seg = _args.device_segments(segment_ids, offsets, num_segments, n, c.op)
        unsorted = xp.zeros(1, np.int32)
        y = launch(seg)
        if y is None:
            return None
        if not seg.offsets and int(unsorted[0]):  # ids out of order: sorted, then again
            if indices_are_sorted:
                raise ValueError(f"{c.op}: indices_are_sorted=True but segment_ids are not "
                                 f"sorted")
            seg = _args.device_segments(segment_ids, offsets, num_segments, n, c.op,
                                        unsorted=True)
            y = launch(seg)
            if y is None:
                return None
        moved = (n,) + shape[:ax] + shape[ax + 1:]
        res = _args.check_out(out, c.src, shape[:ax] + (seg.count,) + shape[ax + 1:] if lse
                              else shape, c.dtype)
        if lse:
            y = xp.moveaxis(y.reshape((seg.count,) + moved[1:]), 0, ax)
        else:
            if seg.order is not None:
                ordered, y = y, xp.empty_like(y)
                y[seg.order] = ordered
            y = xp.moveaxis(y.reshape(moved), 0, ax)
        return _finish(c, out, res, y)


def _rows(xp, a, dtype, ax, order, n, cols):
    """`a` as the kernels read it: `ax` first, in segment order, `n` contiguous rows of `cols`,
    16-byte aligned (their vector loads)."""
    a = xp.moveaxis(a, ax, 0).astype(dtype, copy=False)
    if order is not None:
        a = a[order]
    a = xp.ascontiguousarray(a).reshape(n, cols)
    return a.copy() if a.data.ptr % 16 else a
