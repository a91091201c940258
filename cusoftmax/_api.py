"""The public function and its argument rules (axis, dtype, out=, empty inputs, errors)."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from . import _arrays, _family, _host, _kernels, planning
from .planning import METHODS
from ._layout import Layout, collapse, normalize_axes

# Float types kept by the result, by dtype name (ml_dtypes is not imported for them: an input
# of its types comes from a caller that imported it). The kernels take GPU_FLOATS; the host
# also computes longdouble (in longdouble, where it is wider than float64) and ml_dtypes' 8-bit
# floats (in float32, one rounding at the store, as the half types).
GPU_FLOATS = ("float16", "bfloat16", "float32", "float64")
LONGDOUBLE = np.dtype(np.longdouble)
FLOAT8 = ("float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
          "float8_e5m2", "float8_e5m2fnuz", "float8_e5m3fnu")
HOST_FLOATS = FLOAT8 + ((LONGDOUBLE.name,) if LONGDOUBLE.name not in GPU_FLOATS else ())


def result_dtype(dtype, on_gpu: bool = False, op: str = "softmax") -> np.dtype:
    """The result's dtype, in native byte order (as NumPy's ufuncs make theirs): floats keep
    theirs, integers promote as NumPy's ``exp`` does. ``on_gpu``: refuse the host-only types;
    ``op`` names the function in messages."""
    try:
        return _RESULT_DTYPES[dtype, on_gpu]
    except (KeyError, TypeError):  # not seen yet, or not a hashable dtype
        pass
    got = _result_dtype(np.dtype(dtype), on_gpu, op)
    _RESULT_DTYPES[np.dtype(dtype), on_gpu] = got
    return got


_RESULT_DTYPES: dict = {}  # (dtype, on_gpu) -> result dtype, for the types taken


def _result_dtype(dtype: np.dtype, on_gpu: bool, op: str) -> np.dtype:
    if dtype.name in GPU_FLOATS:
        return dtype.newbyteorder("=")
    if dtype.name in HOST_FLOATS:
        if on_gpu:
            raise TypeError(f"{op}: {dtype} is computed on the host only: pass a NumPy array")
        return dtype.newbyteorder("=")
    if dtype.kind in "iu":
        return np.result_type(dtype, np.float16).newbyteorder("=")
    if dtype.name == "float8_e8m0fnu":  # powers of two only
        raise TypeError(f"{op}: {dtype} holds no zero (the result of -inf entries and of tiny "
                        f"ones)")
    raise TypeError(f"{op} takes real floating-point or integer arrays, not {dtype}")


# Calls seen before on C-contiguous CuPy arrays (_fast_key) -> (the tuning they were planned
# with, run(x, y) writing into y, a new array like x; softmax_topk's key holds k and its flags
# and its run(x) returns the pair; a backward pass's key holds dy's too (_vjp_key), its run(y,
# dy, dx)). `_fast_type` (cupy.ndarray) and `_device` (CuPy's getDevice)
# are set with the first entry; until then no input takes the fast path.
_fast: dict = {}
_fast_type = None
_device = None


def softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    """Softmax of ``scale * x`` along `axis`: ``exp(x - max) / sum(exp(x - max))`` per slice.

    Parameters
    ----------
    x : array_like
        A CuPy array; a PyTorch, JAX or Numba CUDA array (taken without a copy through DLPack
        or ``__cuda_array_interface__``); or a NumPy array or anything ``numpy.asarray``
        accepts, computed on the host. float16, bfloat16 (``ml_dtypes``), float32 and float64
        keep their dtype; integers are promoted as ``numpy.exp`` promotes them. On the host
        only: longdouble (computed in longdouble) and the 8-bit floats of ``ml_dtypes``
        (``float8_e4m3fn``, ``float8_e5m2``, ...; computed in float32 and rounded once to their
        type; not ``float8_e8m0fnu``, which holds no zero). A non-native byte order gives a
        result in native order.
    axis : int, tuple of ints or None, optional
        The axis or axes of each slice (negative counts from the end; ``bool`` is not an
        axis). ``None`` takes all elements as one slice. On a 0-d `x`, the int 0 or -1 also
        takes its one element (as NumPy's reductions), so the default gives 1.0 (NaN for a NaN
        or infinite value) as SciPy does. Default ``-1``.
    where : bool array_like, optional
        Broadcastable to `x` (never expanded in memory); False positions are left out of their
        slice and give 0. A slice with no True position gives all zeros.
    scale : scalar or array_like, optional
        The softmax of ``scale * x`` (rounded to the compute type): a Python or NumPy real
        scalar, or an array with one value a slice (broadcastable to the shape of `x` with the
        reduced axes of length 1).
    out : array, optional
        Where to write the result: an array (not a list or a scalar) of the same shape as `x`,
        the result's dtype in either byte order, the same framework and device. It may be `x`
        itself (in place). Checked before anything is written.
    method : {None, 'registers', 'flat', 'tiles', 'block', 'cluster', 'grid', 'online', 'columns', 'slab'}, optional
        GPU only, without `where` (and a `scale` only where the kernels take it, see Notes):
        force one kernel instead of the dispatcher's
        choice (for tests and benchmarks). ``'registers'`` holds a row in registers (rows up
        to 16384 elements),
        ``'flat'`` stages runs of rows that lie back to back by 16-byte copies (rows up to 1024
        elements; other layouts are copied first), ``'tiles'`` stages several short rows per
        warp in shared memory, ``'block'`` holds a
        row in one block's shared memory, ``'cluster'`` across the
        shared memory of a thread-block cluster (compute capability 9.0 and newer),
        ``'grid'`` in chunks across the shared memory of blocks all over the GPU (rows up to
        two chunks of 32 KiB per resident block), ``'online'`` runs the two-pass tiled kernel on any
        row, ``'columns'`` reduces a strided axis in place of a transposing copy (two reads),
        ``'slab'`` holds strips of a strided axis across the shared memory of a thread-block
        cluster (compute capability 9.0 and newer; float types of at most 4 bytes).

    Returns
    -------
    array
        The softmax, in the framework of `x` (CuPy, PyTorch, JAX, Numba or NumPy; a 0-d array
        for a 0-d `x`), or `out`.

    Raises
    ------
    numpy.exceptions.AxisError
        If an axis is out of range.
    TypeError
        For bool, complex or other non-numeric dtypes, a host-only float type in a GPU array,
        an `axis` that is not an integer (bool included), an `out` that is not an array
        or has the wrong dtype or kind, a `where` that is not bool or a `scale` that is not real.
    ValueError
        If a reduced axis has length 0, `out` has the wrong shape or device, `where` or `scale`
        does not broadcast as above, or `method` is not one of the names above (checked for
        every input), is given for an input computed on the host or with `where` or a `scale`
        the kernels do not take, or cannot run on this input.

    Notes
    -----
    As ``scipy.special.softmax``: a slice holding NaN or +inf is all NaN, a slice of all -inf is
    all NaN, and -inf entries of other slices give 0 (with `where`: among the positions left
    in). GPU work runs on CuPy's current stream. A scalar `scale`, positive and finite in the
    compute type, is applied by the kernels as they load `x`. `where` without `scale` is read by
    the kernels for rows along the last axis of a C-contiguous `x` that a block or a cluster of
    blocks holds with a byte a place beside them (on an H200 up to 367,677 float32 elements),
    with a mask of `x`'s shape or one broadcast over a block of the leading axes (``(n,)``,
    ``(batch, 1, ..., 1, n)``); other masks and scales are computed by array operations.
    Float16, bfloat16 and the 8-bit floats are computed in float32, with one rounding when
    stored. On the host, float32 sums stay within a few ulps at any length: pairwise along a
    contiguous run, else float32 blocks of at most 16 terms added in float64.

    Examples
    --------
    >>> import numpy as np, cusoftmax
    >>> cusoftmax.softmax(np.array([0.0, np.log(3.0)]))
    array([0.25, 0.75])
    """
    if type(x) is np.ndarray and out is None and method is None and where is None and scale is None:
        hit = host_call(x, axis, "softmax")
        if hit is not None:
            return _host.softmax_to(x, hit[0], hit[1])
    elif type(x) is _fast_type and out is None and method is None and where is None:
        if scale is None:
            try:
                hit = _fast.get(_fast_key(x, axis))
            except TypeError:  # an unhashable axis (a list): the general path says what is wrong
                hit = None
            if hit is not None and hit[0] is planning.active():  # else planned again under this one
                y = _fast_type(x.shape, x.dtype)  # what cupy.empty makes, one call fewer
                hit[1](x, y)
                return y
        else:
            y = fast_call(x, axis, "softmax", scale)
            if y is not None:
                return y
    if _arrays.is_dask(x, where, scale):
        return _arrays.dask_call("softmax", x, axis, where=where, scale=scale, out=out,
                                 method=method)
    c = prepare(x, axis, out, method, "softmax")
    if where is not None or scale is not None or not c.src.on_gpu:
        return _family.forward("softmax", c, out, where, scale, method, remember=(x, axis))
    arr, axes, dtype, dst = c.array, c.axes, c.dtype, c.out
    if dst is None:
        y = _gpu(arr, axes, None, dtype, method, remember=(x, axis))
        return c.src.wrap(y)
    _gpu(arr, axes, dst, dtype, method)
    return out


def fused(c: "Call", out, method, op: str, remember=None, scale=None):
    """`op` of a prepared GPU call by its fused kernel (``planning.FUSED_TYPES[op]`` holds the
    call's dtype): the result in the caller's framework, or `out`. ``remember``: as ``_gpu``;
    ``scale``: a float that ``fused_scale`` passed, applied by the kernels' load."""
    remember = remember if out is None else None
    y = _gpu(c.array, c.axes, c.out, c.dtype, method, remember, op, scale)
    return out if c.out is not None else c.src.wrap(y)


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


def _load(scale) -> tuple[str, int | None]:
    """(the load functor's name, its launch word or None) for a call's fused scale."""
    return ("Plain", None) if scale is None else ("Scaled", _kernels.load_word("Scaled", scale))


def _fast_op(op: str, scale) -> str | tuple[str, str]:
    """The fast path's key part for `op`, with the Scaled load where a scale is fused."""
    return op if scale is None else (op, "Scaled")


def reduced(c: "Call", op: str, scale=None):
    """`op` (one of ``planning.REDUCTIONS``) of each slice of a prepared GPU call, by the reduce
    kernels: a new CuPy array of the kept axes' shape, in the call's dtype (``slice_state``:
    float64, with a last axis of 3 for each slice's (m, c, s)); ``scale``: as ``fused``."""
    import cupy

    x = c.array
    kept = tuple(x.shape[d] for d in range(x.ndim) if d not in c.axes)
    dtype, tail = (np.dtype(np.float64), (3,)) if op == "slice_state" else (c.dtype, ())
    with x.device:
        if x.dtype != c.dtype:
            x = x.astype(c.dtype)
        if x.size == 0:
            return cupy.empty(kept + tail, dtype=dtype)
        load, word = _load(scale)
        run, order = _reducer(x, c.axes, op, load)
        if run is None:  # no kernel takes the strides: the reduced axes last, contiguous
            last = tuple(range(x.ndim - len(c.axes), x.ndim))
            x = cupy.moveaxis(x, c.axes, last).copy()
            run, order = _reducer(x, last, op, load)
        y = cupy.empty(math.prod(x.shape[d] for d in order) * math.prod(tail), dtype=dtype)
        run(x, y, load=word)
        # y holds the slices in the layout's order of the kept axes (by x's strides).
        y = y.reshape([x.shape[d] for d in order] + list(tail))
        natural = sorted(order)
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
            return c.src.wrap(y)
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
        load, word = _load(scale)
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
                _remember(y0, axis, run, op, dy=dy0)
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


def host_method(method) -> None:
    """`method` names a GPU kernel: refused for an input computed on the host."""
    if method is not None:
        raise ValueError("method= chooses a GPU kernel; this input is computed on the host")


class Call(NamedTuple):
    """A call's arguments after every rule: what the computation needs and nothing else."""

    src: _arrays.Adapted  # the input as adapted, with its framework's wrapper for the result
    array: Any  # the input as a cupy.ndarray (GPU) or a numpy.ndarray (host)
    axes: tuple[int, ...]  # the reduced axes, sorted and non-negative
    dtype: np.dtype  # the result's dtype
    out: Any  # the array behind `out` (same kind as `array`), or None
    op: str = "softmax"  # the function called, for messages

    @property
    def input_name(self) -> str:
        """The name of the function's first argument (``a``, ``y`` or ``x``)."""
        return INPUT_NAMES.get(self.op, "x")


INPUT_NAMES = {"logsumexp": "a", "softmax_vjp": "y", "log_softmax_vjp": "y"}


def prepare(x, axis, out, method, op: str, shape=None, empty_ok=False) -> Call:
    """The argument rules shared by the functions that reduce slices of `x` (`op` names the
    function in messages): every check runs here, before anything is computed or written.
    ``shape``: `x` broadcast to it first (logsumexp's `a` with its `b`); ``empty_ok``: a reduced
    axis of length 0 is allowed (an empty sum)."""
    if method is not None and method not in METHODS:
        raise ValueError(f"method must be None or one of {', '.join(map(repr, METHODS))}, "
                         f"got {method!r}")
    src = _arrays.adapt(x)
    arr = src.array
    dtype = result_dtype(arr.dtype, src.on_gpu, op)
    if shape is not None and arr.shape != shape:
        xp = _arrays.cupy_or_none() if src.on_gpu else np
        arr = xp.broadcast_to(arr, shape)
    axes = normalize_axes(axis, arr.ndim)
    if not empty_ok and any(arr.shape[a] == 0 for a in axes):
        raise ValueError(f"{op} over an axis of length 0 (shape {arr.shape}, axis {axis})")
    return Call(src, arr, axes, dtype, _check_out(out, src, arr.shape, dtype), op)


def _check_out(out, src, shape, dtype):
    """The array behind `out` (CuPy or NumPy), after every check, or None."""
    if out is None:
        return None
    if src.framework in ("jax", "jaxlib"):
        raise TypeError("out= cannot be used with JAX arrays: they are immutable")
    try:
        dst = _arrays.adapt(out, arrays_only=True)
    except TypeError as e:
        raise TypeError(f"out must be an array of the same kind as x: {e}") from None
    if dst.on_gpu != src.on_gpu or dst.framework != src.framework:
        raise TypeError(
            f"out must be an array of the same kind as x ({src.framework}), "
            f"got {type(out).__name__}"
        )
    arr = dst.array
    if arr.shape != tuple(shape):
        raise ValueError(f"out has shape {arr.shape}, the result has shape {tuple(shape)}")
    if arr.dtype.newbyteorder("=") != dtype:  # either byte order: the store swaps the bytes
        raise TypeError(f"out has dtype {arr.dtype}, the result has dtype {dtype}")
    if src.on_gpu and arr.device.id != src.array.device.id:
        raise ValueError(f"out is on device {arr.device.id}, x on device {src.array.device.id}")
    if not src.on_gpu and not arr.flags.writeable:
        raise ValueError("out is read-only")
    return arr


def _elem_strides(a) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


def _fast_key(x, axis, op="softmax"):
    # The axis's type (its items' in a tuple) is part of the key: True == 1.0 == 1 as dict keys,
    # and axis=True or 1.0 must reach the general path's TypeError.
    kind = tuple(map(type, axis)) if type(axis) is tuple else type(axis)
    mem = x.data
    return (x.shape, x.strides, x.dtype, axis, kind, mem.ptr & 15, mem.device_id, _device(), op)


def _remember(x, axis, run, op, dy=None) -> None:
    """Keep ``run`` for later calls like this one (a C-contiguous input on the current device
    gives a C-contiguous result, as cupy.empty makes it); a backward pass's keyed with its `dy`
    too (_vjp_key)."""
    global _fast_type, _device
    import cupy

    _fast_type, _device = cupy.ndarray, cupy.cuda.runtime.getDevice
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


def fast_call(x, axis, op, scale=None):
    """`op` of a CuPy array by a call remembered from an earlier one like it, or None (the
    caller has checked that x is a cupy.ndarray and that no other argument but `scale` is
    given; a scale the kernels do not take goes the general way)."""
    if scale is not None:
        scale = fused_scale(scale, x.dtype)
        if scale is None:
            return None
    run = remembered(x, axis, _fast_op(op, scale))
    if run is None:
        return None
    y = _fast_type(x.shape, x.dtype)  # what cupy.empty makes, one call fewer
    if scale is None:
        run(x, y)
    else:
        run(x, y, load=_kernels.load_word("Scaled", scale))
    return y


# NumPy calls seen before, by (op, shape, dtype, axis, the axis's type) -> (the reduced axes,
# the result's dtype): a call like an earlier one skips the argument rules it already passed.
_host_calls: dict = {}


def host_call(x, axis, op):
    """(axes, result dtype) of an earlier call of `op` like this one on a NumPy array, or None."""
    try:
        return _host_calls.get((op, x.shape, x.dtype, axis, type(axis)))
    except TypeError:  # an unhashable axis (a list): the general path says what is wrong
        return None


def remember_host(x, axis, op, c: "Call") -> None:
    """Keep a checked NumPy call's (axes, result dtype) for ``host_call``."""
    if type(x) is np.ndarray and len(_host_calls) < 4096 and type(axis) is not tuple:
        _host_calls[op, x.shape, x.dtype, axis, type(axis)] = (c.axes, c.dtype)


def _vjp_key(y, dy, axis, op):
    """_fast_key's of y with dy's shape, strides, dtype, alignment and device, as one tuple."""
    kind = tuple(map(type, axis)) if type(axis) is tuple else type(axis)
    m, g = y.data, dy.data
    return (y.shape, y.strides, y.dtype, axis, kind, m.ptr & 15, m.device_id, _device(), op,
            dy.shape, dy.strides, dy.dtype, g.ptr & 15, g.device_id)


def vjp_fast(y, dy, axis, op):
    """dx of backward pass `op` by a call remembered from an earlier one like it (vjp_gpu), or
    None (the caller passes no `where` and no `out`). The public functions call it first: one
    call and the key's before the launch."""
    if type(y) is not _fast_type or type(dy) is not _fast_type:
        return None
    try:
        hit = _fast.get(_vjp_key(y, dy, axis, op))
    except TypeError:  # an unhashable axis (a list): the general path says what is wrong
        return None
    if hit is None or hit[0] is not planning.active():  # else planned again under this one
        return None
    dx = _fast_type(y.shape, y.dtype)
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
        load, word = _load(scale)
        run = _runner(x, y, axes, method, op, load)
        if run is None:
            _transposed(x, y, axes, method, op, load, word)
        else:
            run(x, y, load=word)
            if remember is not None and remember[0] is x and method is None:
                _remember(x, remember[1], run, _fast_op(op, scale))
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
