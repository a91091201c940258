"""The eager functions of the family but softmax_topk: softmax, log_softmax, logsumexp and the
two VJPs, on arrays of any framework but Dask (``_api`` sends those to ``_dask``).

Host arrays are computed by ``_host`` with NumPy. GPU arrays without `where` and `b`, and
with no `scale` or a scalar one that ``_engine.fused_scale`` passes, by the kernels
(``planning.FUSED_TYPES``: log_softmax by softmax's, logsumexp by the reduce family, the VJPs by
the vjp family; the scale by their Scaled load); the rest by ``_composed`` with CuPy (array
operations on the current stream).
"""

from __future__ import annotations

import numpy as np

from . import _args, _engine, _host, planning
from . import _composed as C
from ._args import Call


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
    if out is None and method is None and where is None:
        if type(x) is np.ndarray and scale is None:
            hit = _engine.host_call(x, axis, "softmax")
            if hit is not None:
                return _host.softmax_to(x, hit[0], hit[1])
        elif type(x) is _engine.fast_type:
            y = _engine.fast_call(x, axis, "softmax", scale)
            if y is not None:
                return y
    c = _args.prepare(x, axis, out, method, "softmax", where=where, scale=scale)
    if where is not None or scale is not None or not c.src.on_gpu:
        return forward("softmax", c, out, where, scale, method, remember=(x, axis))
    return _engine.fused(c, out, method, "softmax", remember=(x, axis))


def _finish(c: Call, out, y):
    """`out` where given (already written), else the result in the caller's framework."""
    return out if out is not None else (y if c.src.wrap is None else c.src.wrap(y))


def forward(op: str, c: Call, out, where, scale, method, remember=None):
    """softmax or log_softmax of a prepared call, with its `where` and `scale` (``softmax``
    sends here what its kernels do not take). ``remember``: (x, axis) as the caller gave them,
    for the fast path of later calls."""
    if not c.src.on_gpu and where is None and scale is None:  # the host's own path
        if remember is not None and out is None:
            _engine.remember_host(remember[0], remember[1], op, c)
        if op == "softmax":
            return _finish(c, out, _host.softmax_to(c.array, c.axes, c.dtype, c.out))
        return _finish(c, out, _host.log_softmax(c.array.astype(c.dtype, copy=False), c.axes,
                                                 out=c.out))
    w, s = c.where, c.scale
    fs = _engine.fused_scale(s, c.dtype)
    fused = c.src.on_gpu and c.dtype.name in planning.FUSED_TYPES.get(op, ())
    if fused and w is None and (s is None or fs is not None):
        return _engine.fused(c, out, method, op, remember, fs)
    if fused and s is None and method is None:
        y = _engine.masked(c, w, op)  # the kernels of the Masked load, where they hold the rows
        if y is not None:
            return out if out is not None else y
    _args.no_method(method, c, f"{op} of {c.dtype}" if where is None and scale is None
                    else f"{op} with where= or an array, zero, negative or non-finite scale=")
    xp = c.xp
    with c.device:
        x = c.array.astype(c.dtype, copy=False)
        if xp is np and op == "log_softmax" and w is None and s is None:
            y = _host.log_softmax(x, c.axes, out=c.out)  # in cache-sized pieces
        else:
            st = C.state(xp, x, c.axes, where=w, scale=s)
            y = C.normalize(xp, op, x, st, c.axes, where=w, scale=s, out=c.out)
    return _finish(c, out, y)


def log_softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    """Log of the softmax of ``scale * x`` along `axis`: ``v - logsumexp(v)`` per slice.

    Parameters
    ----------
    x : array_like
        As for :func:`cusoftmax.softmax` (CuPy, PyTorch, JAX, Numba or NumPy arrays, the same
        dtypes and promotion).
    axis : int, tuple of ints or None, optional
        The axis or axes of each slice; ``None`` for all elements. Default ``-1``.
    where : bool array_like, optional
        Broadcastable to `x` (never expanded in memory); False positions are left out of their
        slice and give -inf. A slice with no True position gives all -inf.
    scale : scalar or array_like, optional
        The function applies to ``scale * x`` (rounded to the compute type): a Python or NumPy
        real scalar, or an array with one value a slice (broadcastable to the shape of `x` with
        the reduced axes of length 1).
    out : array, optional
        As for :func:`cusoftmax.softmax`; checked before anything is written.
    method : str, optional
        As for :func:`cusoftmax.softmax`: forces one kernel family for a GPU `x` of float16,
        bfloat16 or float32 without `where`, with no `scale` or one the kernels take (see
        Notes); anything else with a method is a ValueError (float64, the masked forms and
        other scales are computed by array operations).

    Returns
    -------
    array
        The log-softmax, in the framework of `x`, or `out`.

    Raises
    ------
    numpy.exceptions.AxisError
        If an axis is out of range.
    TypeError
        For unsupported dtypes (as softmax), a `where` that is not bool, a `scale` that is not
        real, or a GPU `where`/`scale` with a host `x`.
    ValueError
        For a reduced axis of length 0, a `where` or `scale` that does not broadcast as above,
        `out` of the wrong shape or device, or a `method`.

    Notes
    -----
    The largest entry of a slice is ``-log1p(s)``, ``s`` the sum of the other terms over it, to
    the dtype's accuracy even where that is far below the dtype's epsilon (``x - logsumexp(x)``
    would round it to 0): so in float64 everywhere and on the host; the GPU kernels of the other
    types give it to about 4e-7 absolute (``-log`` of the slice's sum), inside their bound of
    1e-6. Other entries and the special values follow ``x - logsumexp(x)`` as
    SciPy's ``log_softmax``: a slice holding NaN is all NaN; with +inf, the +inf entries are NaN
    and the others -inf; a slice of all -inf is all NaN. On the GPU, float16, bfloat16 and
    float32 without `where` run softmax's fused kernels (one read and one write where softmax
    has them), which apply a scalar `scale` positive and finite in the compute type as they load
    `x`; float64, the masked forms and other scales are computed by array operations on CuPy's
    current stream. Half types are computed in float32, float64 in float64.

    Examples
    --------
    >>> import numpy as np, cusoftmax
    >>> cusoftmax.log_softmax(np.array([0.0, -50.0]))
    array([-1.92874985e-22, -5.00000000e+01])
    """
    if out is None and method is None and where is None:
        if type(x) is np.ndarray and scale is None:
            hit = _engine.host_call(x, axis, "log_softmax")
            if hit is not None:
                return _host.log_softmax(x.astype(hit[1], copy=False), hit[0])
        elif type(x) is _engine.fast_type:
            y = _engine.fast_call(x, axis, "log_softmax", scale)
            if y is not None:
                return y
    return forward("log_softmax", _args.prepare(x, axis, out, method, "log_softmax",
                                                where=where, scale=scale),
                   out, where, scale, method, remember=(x, axis))


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, *, where=None,
              scale=None, out=None):
    """``log(sum(b * exp(scale * a)))`` over `axis`, as ``scipy.special.logsumexp``.

    Parameters
    ----------
    a : array_like
        As `x` of :func:`cusoftmax.softmax` (real floats or integers, any framework).
    axis : int, tuple of ints or None, optional
        The reduced axes; default ``None``, all elements.
    b : array_like, optional
        Real weights broadcastable to `a`, negative allowed (see `return_sign`). Positions with
        ``b == 0`` are left out, an inf or NaN there included.
    keepdims : bool, optional
        Keep the reduced axes with length 1.
    return_sign : bool, optional
        Also return the sign of the sum: 1, -1, or 0 for a zero sum (whose log is -inf); NaN
        where the result is NaN. Without it, a negative sum gives NaN.
    where : bool array_like, optional
        Broadcastable to `a`; False positions are left out. A slice with none left gives -inf.
    scale : scalar or array_like, optional
        The sum is over ``exp(scale * a)`` (rounded to the compute type); one value a slice, as
        in :func:`log_softmax`.
    out : array or tuple of two arrays, optional
        Where to write the result (the log, and the sign with `return_sign`): the result's
        shape and dtype, the same framework and device as `a`.

    Returns
    -------
    res : array
        The log of the sum's magnitude, in `a`'s result dtype (as softmax: floats keep
        theirs, integers promote as ``numpy.exp``); a NumPy scalar for a 0-d NumPy result.
    sgn : array
        With `return_sign`: the sign, same shape and dtype.

    Raises
    ------
    numpy.exceptions.AxisError
        If an axis is out of range.
    TypeError
        For unsupported dtypes, a `where` that is not bool, a `b` or `scale` that is not real,
        or `out` of the wrong dtype or kind.
    ValueError
        For a reduced axis of length 0, `b`, `where` or `scale` that do not broadcast, or `out`
        of the wrong shape.

    Notes
    -----
    Computed as ``m + log(c) + log1p(s / c)``, ``m`` the largest term, ``c`` the sum of the
    weights at it and ``s`` the rest, so the dominant term loses nothing to rounding. As SciPy:
    NaN in a slice gives NaN; +inf gives +inf (NaN where weights of both signs meet at +inf); a
    slice of all -inf gives -inf. Unlike SciPy, the result's dtype is that of `a` (`b` does not
    promote it), and positions with ``b == 0`` are left out even where the result is infinite.
    On the GPU, without `b` and `where`, one kernel reads each element once (the reduce
    family: any axes, any strides), applying a scalar `scale` positive and finite in the compute
    type as it loads; with them, or another `scale`, it runs as array operations on CuPy's
    current stream.

    Examples
    --------
    >>> import numpy as np, cusoftmax
    >>> float(cusoftmax.logsumexp(np.array([1.0, 2.0]), b=np.array([1.0, -1.0]),
    ...                           return_sign=True)[1])
    -1.0
    """
    fast = (b is None and where is None and out is None and return_sign is False
            and (keepdims is True or keepdims is False))
    if fast and type(a) is _engine.fast_type:
        r = _engine.reduce_fast(a, axis, ("logsumexp", keepdims), scale)
        if r is not None:
            return r
    c = _args.prepare(a, axis, None, None, "logsumexp", empty_ok=True, where=where, scale=scale,
                      b=b)
    shape = c.sliced
    shape = shape if keepdims else tuple(n for d, n in enumerate(shape) if d not in c.axes)
    dst = _args.log_sum_out(out, c, shape, return_sign)
    w, s, wb = c.where, c.scale, c.b
    xp = c.xp
    with c.device:
        fs = _engine.fused_scale(s, c.dtype)
        if any(c.array.shape[d] == 0 for d in c.axes):  # empty sums: log 0, sign 0
            r = xp.full(shape, -np.inf, c.dtype)
            res = (r, xp.zeros(shape, c.dtype)) if return_sign else (r,)
        elif c.src.on_gpu and w is None and (s is None or fs is not None) and wb is None:
            remember = (a, axis, ("logsumexp", keepdims), shape) if fast else None
            r = _engine.reduced(c, "logsumexp", fs, remember)  # the reduce kernels
            res = (r, _sign_of(xp, r)) if return_sign else (r,)
        elif xp is np and w is None and s is None and wb is None:  # in cache-sized pieces
            res = _host.log_sum(c.array.astype(c.dtype, copy=False), c.axes, return_sign, c.dtype)
            res = res if return_sign else (res,)
        else:
            st = C.state(xp, c.array.astype(c.dtype, copy=False), c.axes, where=w, scale=s, b=wb)
            res = C.log_sum(xp, st, return_sign, dtype=c.dtype)
            res = res if return_sign else (res,)
        res = tuple(r.reshape(shape) for r in res)
        if dst is not None:
            for d, r in zip(dst, res):
                xp.copyto(d, r)
            return out
    wrap = c.src.wrap
    res = tuple(r[()] if c.src.framework == "numpy" and r.ndim == 0 else
                r if wrap is None else wrap(r)
                for r in res)
    return res if return_sign else res[0]


def _sign_of(xp, r):
    """The sign of sums of positive terms from their logs `r`: 1, 0 where r is -inf (a zero
    sum), NaN where r is NaN (as ``_composed.log_sum``)."""
    one = xp.where(r == -np.inf, r.dtype.type(0), r.dtype.type(1))
    return xp.where(xp.isnan(r), r.dtype.type(np.nan), one)


def _vjp(y, dy, axis, where, out, log: bool, op: str):
    c = _args.prepare(y, axis, out, None, op, where=where, dy=dy)
    g, w = c.dy, c.where
    xp = c.xp
    with c.device:
        if c.src.on_gpu and w is None and c.dtype.name in planning.FUSED_TYPES[op]:
            dx = _engine.vjp_gpu(c, g, op, remember=(y, dy, axis) if out is None else None)
            if c.out is None:
                return dx if c.src.wrap is None else c.src.wrap(dx)
            c.out[...] = dx
            return out
        yy = c.array.astype(c.dtype, copy=False)
        if xp is np and w is None:
            if out is None and type(dy) is np.ndarray:
                _engine.remember_host(y, axis, (op, dy.shape, dy.dtype), c)
            return _finish(c, out, _host.vjp(yy, g, c.axes, log, out=c.out))
        total = C.vjp_sum(xp, yy, g, c.axes, where=w, log=log)
        dx = C.vjp(xp, yy, g, total, where=w, log=log, out=c.out)
    return _finish(c, out, dx)


_VJP_DOC = """The gradient of {fn} with respect to its input, from the output `y` and the
    gradient `dy` with respect to `y`: ``{formula}`` over each slice.

    Parameters
    ----------
    y : array_like
        The {fn} output (any framework and dtype that :func:`cusoftmax.softmax` takes).
    dy : array_like
        Same shape as `y`, cast to `y`'s result dtype; a host `dy` with a GPU `y` is copied to
        the GPU, a GPU `dy` with a host `y` is a TypeError.
    axis : int, tuple of ints or None, optional
        The axes {fn} reduced. Default ``-1``.
    where : bool array_like, optional
        The forward pass's mask: False positions are left out of the sum and give 0.
    out : array, optional
        As for :func:`cusoftmax.softmax`; may be `y` or `dy`.

    Returns
    -------
    array
        The gradient, in `y`'s framework and result dtype, or `out`.

    Raises
    ------
    numpy.exceptions.AxisError
        If an axis is out of range.
    TypeError
        For unsupported dtypes, a `where` that is not bool, or a `dy` that is not real or is
        on the GPU with `y` on the host.
    ValueError
        For a `dy` of another shape, a `where` that does not broadcast, or `out` of the wrong
        shape.

    Notes
    -----
    Sums accumulate in float64 (half types and float32 compute in float32; on the GPU, float32
    sums within a few packs of a thread, then float64). On the GPU without `where`, one kernel
    reads `y` and `dy` and writes dx, over any axis: once where a slice fits a warp's lanes
    or a block holds it (32 to 128 KiB of each array, many such slices), else twice (the
    second time from L2 where it still holds them); `where` runs as array operations on
    CuPy's current stream.
    """


def _vjp_seen(y, dy, axis, op: str, log: bool):
    """dx of a call like an earlier one (no `where`, no `out`): NumPy arrays by the host's
    VJP with the axes and dtype that call's rules gave (keyed by dy's shape and dtype too), GPU
    arrays by the launch it kept (``_engine.vjp_fast``); else None."""
    if type(y) is np.ndarray and type(dy) is np.ndarray:
        hit = _engine.host_call(y, axis, (op, dy.shape, dy.dtype))
        if hit is None:
            return None
        axes, dtype = hit
        return _host.vjp(y.astype(dtype, copy=False), dy.astype(dtype, copy=False), axes, log)
    return _engine.vjp_fast(y, dy, axis, op)


def softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    if where is None and out is None:  # a call like an earlier one: no frame more than needed
        dx = _vjp_seen(y, dy, axis, "softmax_vjp", False)
        if dx is not None:
            return dx
    return _vjp(y, dy, axis, where, out, False, "softmax_vjp")


def log_softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    if where is None and out is None:
        dx = _vjp_seen(y, dy, axis, "log_softmax_vjp", True)
        if dx is not None:
            return dx
    return _vjp(y, dy, axis, where, out, True, "log_softmax_vjp")


softmax_vjp.__doc__ = _VJP_DOC.format(fn="softmax", formula="y * (dy - sum(dy * y))")
log_softmax_vjp.__doc__ = _VJP_DOC.format(fn="log_softmax", formula="dy - exp(y) * sum(dy)")
