"""The GPU engine: a prepared call's plan (shapes, strides, dtypes, device -> a launch, cached
per call signature) and its launch on CuPy's current stream; the one fast-path table of calls
seen before (GPU and host alike), keyed once."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from . import _kernels, planning
from ._args import Call
from ._layout import Layout, collapse

# Calls seen before on C-contiguous CuPy arrays (_fast_key) -> (the tuning they were planned
# with, run(x, y) writing into y, a new array like x; softmax_topk's key holds k and its flags
# and its run(x) returns the pair; a backward pass's key holds dy's too (_vjp_key), its run(y,
# dy, dx)). `fast_type` (cupy.ndarray) and `_device` (CuPy's getDevice)
# are set with the first entry; until then no input takes the fast path.
_fast: dict = {}
fast_type = None
_device = None


def fused(c: "Call", out, method, op: str, remember=None, scale=None):
    """`op` of a prepared GPU call by its fused kernel (``planning.FUSED_TYPES[op]`` holds the
    call's dtype): the result in the caller's framework, or `out`. ``remember``: as ``_gpu``;
    ``scale``: a float that ``fused_scale`` passed, applied by the kernels' load."""
    remember = remember if out is None else None
    y = _gpu(c.array, c.axes, c.out, c.dtype, method, remember, op, scale)
    return out if c.out is not None else (y if c.src.wrap is None else c.src.wrap(y))


# float32 rounds a positive float64 above 2**-150 to a nonzero value, and one below
# FLT_MAX + 2**103 (half an ulp past the largest float32) to a finite one.
_F32_OPEN = (2.0**-150, float(np.finfo(np.float32).max) + 2.0**103)
_F64_OPEN = (0.0, math.inf)


def fused_scale(scale, dtype) -> float | None:
    """`scale` as the kernels' Scaled load takes it (a Python or NumPy real scalar, positive and
    finite in the compute type of `dtype`, float32 or float64, so that the kernels' -inf padding
    stays -inf), else None: array operations apply it."""
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.integer, np.floating)):
        return None
    lo, hi = _F64_OPEN if dtype == np.float64 else _F32_OPEN
    try:
        s = float(scale)  # exact for float16/32/64 scalars; an int is its nearest float64
    except OverflowError:  # an int past float64's range
        return None
    return s if lo < s < hi else None


def load_of(scale) -> tuple[str, int | None]:
    """(the load functor's name, its launch word or None) for a call's fused scale."""
    return ("Plain", None) if scale is None else ("Scaled", _kernels.load_word("Scaled", scale))


def _fast_op(op: str, scale) -> str | tuple[str, str]:
    """The fast path's key part for `op`, with the Scaled load where a scale is fused."""
    return op if scale is None else (op, "Scaled")


def reduced(c: "Call", op: str, scale=None, remember=None):
    """`op` (one of ``planning.REDUCTIONS``) of each slice of a prepared GPU call, by the reduce
    kernels: a new CuPy array of the kept axes' shape, in the call's dtype (``slice_state``:
    float64, with a last axis of 3 for each slice's (m, c, s)); ``scale``: as ``fused``.
    ``remember``: (the caller's x, axis, the key's op, the result's shape) to enter the fast
    path's table (``reduce_fast``) where the launch took x as it is."""
    import cupy

    x = c.array
    kept = tuple(x.shape[d] for d in range(x.ndim) if d not in c.axes)
    dtype, tail = (np.dtype(np.float64), (3,)) if op == "slice_state" else (c.dtype, ())
    with x.device:
        if x.dtype != c.dtype:
            x = x.astype(c.dtype)
        if x.size == 0:
            return cupy.empty(kept + tail, dtype=dtype)
        load, word = load_of(scale)
        run, order = _reducer(x, c.axes, op, load)
        if run is None:  # no kernel takes the strides: the reduced axes last, contiguous
            last = tuple(range(x.ndim - len(c.axes), x.ndim))
            x = cupy.moveaxis(x, c.axes, last).copy()
            run, order = _reducer(x, last, op, load)
        y = cupy.empty(math.prod(x.shape[d] for d in order) * math.prod(tail), dtype=dtype)
        run(x, y, load=word)
        natural = sorted(order)
        if remember is not None and remember[0] is x and order == natural and not tail:
            keep_run(x, remember[1], _reduce_again(run, y.size, dtype, remember[3]),
                     _fast_op(remember[2], scale))
        # y holds the slices in the layout's order of the kept axes (by x's strides).
        y = y.reshape([x.shape[d] for d in order] + list(tail))
        if order != natural:
            perm = [order.index(d) for d in natural] + list(range(len(order), y.ndim))
            y = cupy.ascontiguousarray(y.transpose(perm))
        return y.reshape(kept + tail)


def mask_rows(w, shape):
    """(address, rdiv, msr, msc) of a bool CuPy mask `w` broadcast to `shape` and read over the
    rows of its last axis in C order (row r's element c at ``address + (r // rdiv) * msr + c *
    msc``, kernels/ops.cuh Masked), or None where its strides have no such form (a mask that
    varies along an axis after one it is broadcast over, such as (batch, 1, q, n))."""
    import cupy

    b = cupy.broadcast_to(w, shape)
    lead, strides = shape[:-1], b.strides[:-1]
    k, rdiv = len(lead), 1
    while k and (strides[k - 1] == 0 or lead[k - 1] == 1):  # broadcast over the last rows
        rdiv *= lead[k - 1]
        k -= 1
    msr = strides[k - 1] if k else 0
    step = msr
    for i in range(k - 1, -1, -1):  # the rest: one stride a row, C order
        if lead[i] != 1 and strides[i] != step:
            return None
        step *= lead[i]
    return (b.data.ptr, rdiv, msr, b.strides[-1])


def masked(c: "Call", w, op: str):
    """`op` (softmax or log_softmax) of a prepared GPU call with a bool CuPy mask `w`, by the
    kernels that take the Masked load (``planning.LOAD_KERNELS``; the policy's column for masked
    rows): the result (or `out`), or None where none takes it (the reduced axis not the last of
    a C-contiguous input, a mask ``mask_rows`` cannot read, or rows no such kernel holds)."""
    import cupy

    x = c.array
    if (c.axes != (x.ndim - 1,) or not x.flags.c_contiguous or x.dtype != c.dtype or x.size == 0
            or w.device.id != x.device.id):
        return None
    words = mask_rows(w, x.shape)
    if words is None:
        return None
    with x.device:
        y = cupy.empty(x.shape, x.dtype)  # C-contiguous as x: the rows of the mask's order
        tuning = planning.active()
        strides = _elem_strides(x)
        layout, plan = _plan(x.shape, strides, strides, c.axes, x.itemsize,
                             (x.data.ptr % 16, y.data.ptr % 16), x.device.id, None, tuning, op,
                             "Masked")
        if plan is None:
            return None
        _kernels.bind(plan, layout, x.dtype.name, x.device.id, tuning)(x, y, load=words)
        if c.out is None:
            return y if c.src.wrap is None else c.src.wrap(y)
        c.out[...] = y
    return c.out


def normalized(x, mk, op: str, scale=None):
    """`op` (softmax or log_softmax) of CuPy array x along its last axis from each slice's max
    and constant, ``mk`` (C-contiguous, the compute type, x's shape with a last axis of 2: m, k),
    by the normalize kernel: a new C-contiguous array like x, or None where x's leading axes are
    not rows at one stride or its dtype is not ``planning.FUSED_TYPES[op]``. ``scale``: as
    ``fused``, with m the max of the scaled values."""
    import cupy

    if x.dtype.name not in planning.FUSED_TYPES[op] or x.size == 0:
        return None
    shape, n = x.shape, x.shape[-1]
    if x.ndim != 2:
        if not x.flags.c_contiguous:
            return None
        x = x.reshape(-1, n)
    if x.strides[1] != x.itemsize or x.strides[0] % x.itemsize:
        return None
    with x.device:
        y = cupy.empty(x.shape, x.dtype)
        layout = Layout(x.shape[0], n, 1, (x.strides[0] // x.itemsize, 1), (n, 1))
        load, word = load_of(scale)
        run = _normalizer(layout, x.dtype.name, x.itemsize, (x.data.ptr % 16, y.data.ptr % 16),
                          x.device.id, planning.active(), op, load)
        run(x, mk, y, load=word)
    return y.reshape(shape)


@lru_cache(maxsize=1024)
def _normalizer(layout, dtype_name, itemsize, align, device_id, tuning, op, load):
    """The normalize kernel's ``run(x, mk, y)`` for one call signature."""
    plan = planning.normalize_plan(layout, itemsize, align, planning.device_limits(device_id),
                                   tuning, op, load)
    return _kernels.bind(plan, layout, dtype_name, device_id, tuning)


def vjp_gpu(c: "Call", g, op: str, remember=None):
    """dx of a backward pass (one of ``planning.VJPS``) of a prepared GPU call, `g` its dy in
    the call's dtype, by the vjp kernels: a new CuPy array. The kernels take y, dy and dx alike:
    the reduced axes as contiguous rows where moving them last gives that without a copy, else
    the arrays (C-contiguous copies where they are not alike and dense) over a strided axis
    (vjp_columns), else rows copied. ``remember``: (y, dy, axis) as the caller gave them, for
    vjp_fast's table where the launch took them as they are."""
    import cupy

    y = c.array.astype(c.dtype, copy=False)
    nd, axes = y.ndim, c.axes
    last = tuple(range(nd - len(axes), nd))
    n = math.prod(y.shape[a] for a in axes)
    rows = y.size // n if n else 0
    with y.device:
        if rows == 0:
            return cupy.empty(y.shape, dtype=c.dtype)
        tuning, limits = planning.active(), planning.device_limits(y.device.id)

        def planned(a, b, layout):
            dx = cupy.empty_like(a)  # a's strides where a is dense (order K)
            if layout is None or not _alike(dx, a):
                return None, None
            addresses = tuple(v.data.ptr % 16 for v in (a, b, dx))
            return planning.vjp_plan(layout, y.itemsize, addresses, limits, tuning, op), dx

        as_rows = Layout(rows, n, 1, (n, 1), (n, 1))
        moved = axes != last
        yt, gt = (cupy.moveaxis(y, axes, last), cupy.moveaxis(g, axes, last)) if moved else (y, g)
        if yt.flags.c_contiguous and gt.flags.c_contiguous:
            layout = as_rows
        else:
            yt, gt, moved = y, g, False
            if not _alike(y, g):
                yt, gt = cupy.ascontiguousarray(y), cupy.ascontiguousarray(g)
            strides = _elem_strides(yt)
            layout = collapse(y.shape, strides, strides, axes)
        plan, dxt = planned(yt, gt, layout)
        if plan is None:  # no kernel of the strided axis: rows copied
            yt = cupy.ascontiguousarray(cupy.moveaxis(y, axes, last))
            gt = cupy.ascontiguousarray(cupy.moveaxis(g, axes, last))
            layout, moved = as_rows, axes != last
            plan, dxt = planned(yt, gt, layout)
        run = _kernels.bind(plan, layout, y.dtype.name, y.device.id, tuning)
        run(yt, gt, dxt)
        if remember is not None:
            y0, dy0, axis = remember
            if _as_given(y0, yt) and _as_given(dy0, gt):
                keep_run(y0, axis, run, op, dy=dy0)
        return cupy.moveaxis(dxt, last, axes) if moved else dxt


def _alike(a, b) -> bool:
    """a and b have the same strides along every axis of more than one element."""
    return all(s == t for s, t, d in zip(a.strides, b.strides, a.shape) if d > 1)


def _as_given(given, used) -> bool:
    """True where the launch took the caller's CuPy array as it is (no copy, cast or view)."""
    return (type(given) is type(used) and given.data.ptr == used.data.ptr
            and given.shape == used.shape and given.strides == used.strides
            and given.dtype == used.dtype)


def _reducer(x, axes, op, load="Plain"):
    """(``run(x, y)`` or None, the kept axes of more than one element in the order of y's
    slices) for CuPy arrays like x (cached per call signature)."""
    tuning = planning.active()
    layout, plan, order = _reduce_plan(x.shape, _elem_strides(x), axes, x.itemsize,
                                       x.data.ptr % 16, x.device.id, tuning, op, load)
    if plan is None:
        return None, order
    return _kernels.bind(plan, layout, x.dtype.name, x.device.id, tuning), order


@lru_cache(maxsize=1024)
def _reduce_plan(shape, xs, axes, itemsize, align, device_id, tuning, op, load="Plain"):
    layout = collapse(shape, xs, xs, axes)
    plan = planning.reduce_plan(layout, itemsize, align, planning.device_limits(device_id), tuning,
                                op, load)
    kept = [d for d in range(len(shape)) if d not in axes and shape[d] != 1]
    order = sorted(kept, key=lambda d: -abs(xs[d]))  # collapse's order of the kept axes
    return layout, plan, order


def _elem_strides(a) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


def _fast_key(x, axis, op="softmax"):
    # The axis's type (its items' in a tuple) is part of the key: True == 1.0 == 1 as dict keys,
    # and axis=True or 1.0 must reach the general path's TypeError.
    kind = tuple(map(type, axis)) if type(axis) is tuple else type(axis)
    mem = x.data
    return (x.shape, x.strides, x.dtype, axis, kind, mem.ptr & 15, mem.device_id, _device(), op)


def keep_run(x, axis, run, op, dy=None) -> None:
    """Keep ``run`` for later calls like this one (a C-contiguous input on the current device
    gives a C-contiguous result, as cupy.empty makes it); a backward pass's keyed with its `dy`
    too (_vjp_key)."""
    global fast_type, _device
    import cupy

    fast_type, _device = cupy.ndarray, cupy.cuda.runtime.getDevice
    if len(_fast) < 4096 and x.flags.c_contiguous and x.device.id == _device():
        key = _fast_key(x, axis, op) if dy is None else _vjp_key(x, dy, axis, op)
        _fast[key] = (planning.active(), run)


def remembered(x, axis, op, dy=None):
    """The run remembered for a call like this one (x, and a backward pass's dy, cupy.ndarrays),
    or None."""
    try:
        hit = _fast.get(_fast_key(x, axis, op) if dy is None else _vjp_key(x, dy, axis, op))
    except TypeError:  # an unhashable axis (a list): the general path says what is wrong
        return None
    if hit is None or hit[0] is not planning.active():  # else planned again under this one
        return None
    return hit[1]


def _remembered_with(x, axis, op, scale):
    """(the run remembered for `op` of x with `scale`, the Scaled load's word or None), or None
    where there is none or the kernels do not take the scale (it goes the general way)."""
    word = None
    if scale is not None:
        scale = fused_scale(scale, x.dtype)
        if scale is None:
            return None
        word = _kernels.load_word("Scaled", scale)
    run = remembered(x, axis, _fast_op(op, scale))
    return None if run is None else (run, word)


def fast_call(x, axis, op, scale=None):
    """`op` of a CuPy array by a call remembered from an earlier one like it, or None (the
    caller has checked that x is a cupy.ndarray and that no other argument but `scale` is
    given)."""
    hit = _remembered_with(x, axis, op, scale)
    if hit is None:
        return None
    y = fast_type(x.shape, x.dtype)  # what cupy.empty makes, one call fewer
    hit[0](x, y, load=hit[1])
    return y


def _reduce_again(run, size, dtype, shape):
    """A reduction's fast-path run: ``again(x, word)`` returns a new result of `shape`."""
    import cupy

    new = cupy.ndarray

    def again(x, word=None):
        y = new(size, dtype)
        run(x, y, load=word)
        return y.reshape(shape)

    return again


def reduce_fast(x, axis, op, scale=None):
    """A reduction `op` (its key, as ``reduced``'s `remember` gave it) of a CuPy array by a call
    remembered from an earlier one like it, or None (the caller passes no other argument)."""
    hit = _remembered_with(x, axis, op, scale)
    return None if hit is None else hit[0](x, hit[1])


# NumPy calls seen before, by (op, shape, dtype, axis, the axis's type) -> (the reduced axes,
# the result's dtype): a call like an earlier one skips the argument rules it already passed.
_host_calls: dict = {}


def host_call(x, axis, op):
    """(axes, result dtype) of an earlier call of `op` like this one on a NumPy array, or None
    (`op` names it, with what else its rules read: a VJP's dy shape and dtype)."""
    try:
        return _host_calls.get((op, x.shape, x.dtype, axis, type(axis)))
    except TypeError:  # an unhashable axis (a list): the general path says what is wrong
        return None


def remember_host(x, axis, op, c: "Call") -> None:
    """Keep a checked NumPy call's (axes, result dtype) for ``host_call``."""
    if type(x) is np.ndarray and len(_host_calls) < 4096 and type(axis) is not tuple:
        _host_calls[op, x.shape, x.dtype, axis, type(axis)] = (c.axes, c.dtype)


def _vjp_key(y, dy, axis, op):
    """_fast_key's of y with dy's shape, strides, dtype, alignment and device."""
    g = dy.data
    return _fast_key(y, axis, op) + (dy.shape, dy.strides, dy.dtype, g.ptr & 15, g.device_id)


def vjp_fast(y, dy, axis, op):
    """dx of backward pass `op` by a call remembered from an earlier one like it (vjp_gpu), or
    None (the caller passes no `where` and no `out`). The public functions call it first: one
    call and the key's before the launch."""
    if type(y) is not fast_type or type(dy) is not fast_type:
        return None
    try:
        hit = _fast.get(_vjp_key(y, dy, axis, op))
    except TypeError:  # an unhashable axis (a list): the general path says what is wrong
        return None
    if hit is None or hit[0] is not planning.active():  # else planned again under this one
        return None
    dx = fast_type(y.shape, y.dtype)
    hit[1](y, dy, dx)
    return dx


@lru_cache(maxsize=4096)
def _plan(shape, xs, ys, axes, itemsize, align, device_id, method, tuning, op, load="Plain"):
    """Layout and plan for one call signature; addresses matter only modulo 16 (alignment)."""
    layout = collapse(shape, xs, ys, axes)
    limits = planning.device_limits(device_id)
    return layout, planning.plan(layout, itemsize, align, limits, method, tuning, op, load)


def _runner(x, y, axes, method, op, load="Plain"):
    """``run(x, y)`` for CuPy arrays like these (cached per call signature), or None when no
    kernel takes their strides."""
    tuning = planning.active()
    layout, plan = _plan(x.shape, _elem_strides(x), _elem_strides(y), axes, x.itemsize,
                         (x.data.ptr % 16, y.data.ptr % 16), x.device.id, method, tuning, op,
                         load)
    return None if plan is None else _kernels.bind(plan, layout, x.dtype.name, x.device.id, tuning)


def _gpu(x, axes, out, dtype, method, remember=None, op="softmax", scale=None):
    """`op` (softmax by default) of CuPy array x into out (or a new array). ``remember``: (the
    caller's x, axis) to enter the fast path's table, keyed by `op`, when this call qualifies;
    ``scale``: as ``fused``."""
    import cupy

    with x.device:
        if x.dtype != dtype:
            x = x.astype(dtype)
        y = cupy.empty_like(x) if out is None else out
        if x.size == 0:
            return y
        if out is not None and not _same_view(x, out) and cupy.may_share_memory(x, out):
            y = cupy.empty_like(x)  # a partial overlap: compute aside, then copy into out
        load, word = load_of(scale)
        run = _runner(x, y, axes, method, op, load)
        if run is None:
            _transposed(x, y, axes, method, op, load, word)
        else:
            run(x, y, load=word)
            if remember is not None and remember[0] is x and method is None:
                keep_run(x, remember[1], run, _fast_op(op, scale))
        if out is not None and y is not out:
            out[...] = y
        return y


def _same_view(a, b) -> bool:
    return a.data.ptr == b.data.ptr and a.strides == b.strides and a.shape == b.shape


def _transposed(x, y, axes, method, op, load="Plain", word=None):
    """Strides that no kernel takes: work on a contiguous copy with the reduced axes last (a
    new array even where x already is one: a forced "flat" on rows off 16-byte boundaries that
    lie unlike y's gets its copies aligned alike)."""
    import cupy

    last = tuple(range(x.ndim - len(axes), x.ndim))
    xt = cupy.moveaxis(x, axes, last).copy()
    yt = cupy.empty_like(xt)
    _runner(xt, yt, last, method, op, load)(xt, yt, load=word)  # contiguous rows: always a kernel
    cupy.moveaxis(y, axes, last)[...] = yt


def topk_fused(c: Call, ax: int, k: int, log: bool, renormalize: bool, remember=None,
           scale=None):
    """(values, indices) of a GPU call by the topk kernels, or None where no plan takes it (a
    dtype of ``planning.TOPK_TYPES``; rows contiguous along the axis, copied where not). The
    launch enters the fast path's table where `remember` is given and x is the caller's
    C-contiguous array reduced along its last axis. ``scale``: as ``fused``."""
    import cupy

    if c.dtype.name not in planning.TOPK_TYPES:
        return None
    x = c.array.astype(c.dtype, copy=False)
    last = ax == x.ndim - 1
    x = x if last else cupy.moveaxis(x, ax, -1)
    n = x.shape[-1]
    rows = x.size // n
    if x.flags.c_contiguous:
        ldx = n
    elif x.ndim == 2 and x.strides[1] == x.itemsize and x.strides[0] % x.itemsize == 0:
        ldx = x.strides[0] // x.itemsize  # rows at a stride: read in place
    else:
        x, ldx = cupy.ascontiguousarray(x), n
    device = x.device.id
    tuning = planning.active()
    load, word = load_of(scale)
    plan = planning.topk_plan(rows, n, ldx, k, renormalize, x.itemsize, x.data.ptr % 16,
                              planning.device_limits(device), tuning,
                              "log_softmax" if log else "softmax", load)
    if plan is None:
        return None
    launch = _kernels.bind(plan, None, c.dtype.name, device, tuning)
    shape, dtype, new = x.shape[:-1] + (k,), c.dtype, cupy.ndarray

    def run(x):
        values, indices = new(shape, dtype), new(shape, np.int64)
        launch(x, values, indices, load=word)
        return values, indices

    values, indices = run(x)
    if remember is not None and remember[0] is x:  # no conversion, move or copy was made
        keep_run(x, remember[1], run, remember[2])
    if last:
        return values, indices
    return cupy.moveaxis(values, -1, ax), cupy.moveaxis(indices, -1, ax)
