"""JAX tracers: the family inside ``jax.jit``, ``jax.vmap``, ``jax.grad`` / ``jax.vjp``,
``jax.lax.scan`` and ``jax.checkpoint``.

On an NVIDIA GPU, softmax, log_softmax, logsumexp (without `b` or `return_sign`) and both VJPs,
without `where` and with a Python scalar `scale` or none, launch the family's own kernel from
the compiled program (``_xla``: an XLA custom call, planned at trace time for the traced shape)
where one launch over the dense operands takes the call. Everything else, and every call
lowered for another platform, runs as XLA operations in ``jax.numpy`` of ``_composed``:
``direct`` (one max, one sum, the map) for softmax, log_softmax and logsumexp without `b`, the
reference's state for logsumexp with `b` or `return_sign`, its VJPs for the VJPs; the same NaN,
inf and `where` rules as every other path.

softmax and log_softmax carry a ``jax.custom_vjp`` whose backward is the family's VJP (the VJP
kernel on the GPU where it takes the call, else ``_composed.vjp``: one sum a slice, zero at
masked positions), for `x` (and a Python scalar `scale`); with an array `scale`, and for
logsumexp and the VJPs, JAX differentiates the reference. softmax_topk's values are gathered
from those two, so they differentiate in `x` too. ``vmap`` of a kernel's call plans the batched
shape. Sums accumulate in float64 only where JAX has x64 enabled (else in float32).

Eager JAX arrays do not come here: they reach the kernels through DLPack (``_arrays``).
"""

from __future__ import annotations

import contextlib
import warnings
from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np

from . import _args, _xla
from . import _composed as C

_TRACER = getattr(jax.core, "Tracer", None) or jax._src.core.Tracer


def is_traced(o) -> bool:
    """Whether `o` is a JAX tracer (a value inside a JAX transformation)."""
    return isinstance(o, _TRACER)


@contextlib.contextmanager
def _x64_as_configured():
    """The reference asks for float64 sums; without x64 JAX gives float32 and warns each time:
    the warning says what the module docstring says already."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Explicitly requested dtype float64")
        yield


def _x(x, axis, out, method, op, empty_ok=False):
    """(x in its result dtype, the reduced axes) by the family's rules."""
    if out is not None:
        _args.no_jax_out()
    if method is not None:
        raise ValueError("method= chooses a GPU kernel; inside JAX transformations the family "
                         "runs as XLA operations")
    x = jnp.asarray(x)
    # the family's result dtype as JAX holds it: float64 only where x64 is enabled
    dtype = jax.dtypes.canonicalize_dtype(_args.result_dtype(x.dtype, False, op))
    return x.astype(dtype), _args.axes_rule(axis, x.shape, op, empty_ok)


def _where(where, x):
    if where is None:
        return None
    w = jnp.asarray(where)
    _args.mask_rule(w, x.shape)
    return w


def _scale(scale, x, axes):
    """A Python or NumPy real scalar as a float; an array (one value a slice) as it is."""
    if scale is None:
        return None
    if _args.scalar_scale(scale):
        return float(scale)
    s = jnp.asarray(scale)
    _args.scale_rule(s, tuple(1 if d in axes else n for d, n in enumerate(x.shape)))
    return s


def _forward(op, x, axes, where, scale):
    if where is None and (scale is None or isinstance(scale, float)):
        return _routed(op, axes, scale)(x)
    return C.direct(jnp, op, x, axes, where=where, scale=scale)


def _reference(op: str, axes: tuple, scale, *operands):
    """`op` of `operands` (x, or y and dy) as XLA operations; logsumexp without its axes."""
    if op in ("softmax_vjp", "log_softmax_vjp"):
        y, dy = operands
        log = op == "log_softmax_vjp"
        with _x64_as_configured():
            return C.vjp(jnp, y, dy, C.vjp_sum(jnp, y, dy, axes, log=log), log=log)
    y = C.direct(jnp, op, operands[0], axes, scale=scale)
    return y.squeeze(axes) if op == "logsumexp" else y


@lru_cache(maxsize=None)
def _routed(op: str, axes: tuple, scale):
    """`op` (one of ``_xla.OPS``) over `axes` with `scale` (None or a Python float) as a
    function of its operands: the kernel's custom call where the program is lowered for the
    GPU and the kernels take the call, else ``_reference``. vmap calls it again on the batched
    operands (the batch axis first); JAX differentiates the reference."""
    reference = partial(_reference, op, axes, scale)
    if not _xla.usable():
        return reference

    def kernel(*operands):
        x = operands[0]
        shape = tuple(n for d, n in enumerate(x.shape) if d not in axes) if op == "logsumexp" \
            else x.shape
        y = _xla.call(op, operands, shape, x.dtype, axes, scale)
        return reference(*operands) if y is None else y

    @jax.custom_batching.custom_vmap
    def batched(*operands):
        return jax.lax.platform_dependent(*operands, default=reference,
                                          **{_xla.PLATFORM: kernel})

    @batched.def_vmap
    def _(size, in_batched, *operands):
        operands = [a if b else jnp.broadcast_to(a, (size,) + a.shape)
                    for a, b in zip(operands, in_batched)]
        return _routed(op, tuple(d + 1 for d in axes), scale)(*operands), True

    f = jax.custom_vjp(batched)
    f.defvjp(lambda *operands: (batched(*operands), operands),
             lambda operands, g: jax.vjp(reference, *operands)[1](g))
    return f


# The backward of softmax and log_softmax by the VJP kernel, else XLA's formula, which XLA fuses
# with what computes dy: the gradient of a cross-entropy ran 1.1 to 1.8x faster with XLA's from
# 1,024 columns on [jax-4].
KERNEL_BACKWARD = False


@lru_cache(maxsize=None)
def _with_vjp(op: str, axes: tuple, scale):
    """softmax or log_softmax over `axes` with a static scale (None or a float), whose backward
    is the family's VJP (times the scale)."""

    @jax.custom_vjp
    def f(x, where):
        return _forward(op, x, axes, where, scale)

    def fwd(x, where):
        y = f(x, where)
        return y, (y, where)

    def bwd(res, dy):
        y, where = res
        dy = dy.astype(y.dtype)
        log = op == "log_softmax"
        if where is None and KERNEL_BACKWARD:
            dx = _routed(f"{op}_vjp", axes, None)(y, dy)
        else:
            with _x64_as_configured():
                total = C.vjp_sum(jnp, y, dy, axes, where=where, log=log)
                dx = C.vjp(jnp, y, dy, total, where=where, log=log)
        return (dx if scale is None else dx * jnp.asarray(scale, dx.dtype)), None

    f.defvjp(fwd, bwd)
    return f


def _normalized(op, x, axis, where, scale, out, method):
    x, axes = _x(x, axis, out, method, op)
    w, s = _where(where, x), _scale(scale, x, axes)
    if s is None or isinstance(s, float):
        return _with_vjp(op, axes, s)(x, w)
    return _forward(op, x, axes, w, s)


def softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    return _normalized("softmax", x, axis, where, scale, out, method)


def log_softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    return _normalized("log_softmax", x, axis, where, scale, out, method)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, *, where=None,
              scale=None, out=None):
    shape = _args.with_weights(a, b)
    a, axes = _x(a if shape is None else jnp.broadcast_to(a, shape), axis, out, None,
                 "logsumexp", empty_ok=True)
    w, s = _where(where, a), _scale(scale, a, axes)
    if b is not None:
        b = jnp.asarray(b)
        _args.real_rule(b, "b", bool_ok=True)
    if b is None and not return_sign and w is None and (s is None or isinstance(s, float)):
        res = _routed("logsumexp", axes, s)(a)
        return jnp.expand_dims(res, axes) if keepdims else res
    if b is None and not return_sign:
        res = C.direct(jnp, "logsumexp", a, axes, where=w, scale=s)
    else:  # signed weights: the state's sum, its sign kept apart
        with _x64_as_configured():
            st = C.state(jnp, a, axes, where=w, scale=s, b=b)
            res = C.log_sum(jnp, st, return_sign, dtype=a.dtype)
    if keepdims:
        return res
    return tuple(r.squeeze(axes) for r in res) if return_sign else res.squeeze(axes)


def _vjp(op, y, dy, axis, where, out):
    y, axes = _x(y, axis, out, None, op)
    dy = jnp.asarray(dy)
    _args.dy_rule(dy, y.shape)
    w, log = _where(where, y), op == "log_softmax_vjp"
    dy = dy.astype(y.dtype)
    if w is None:
        return _routed(op, axes, None)(y, dy)
    with _x64_as_configured():
        total = C.vjp_sum(jnp, y, dy, axes, where=w, log=log)
        return C.vjp(jnp, y, dy, total, where=w, log=log)


def softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    return _vjp("softmax_vjp", y, dy, axis, where, out)


def log_softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    return _vjp("log_softmax_vjp", y, dy, axis, where, out)


def softmax_topk(x, k, axis=-1, *, log=False, renormalize=False, where=None, scale=None,
                 out=None):
    """The eager function's order and values (``_topk``): the integer keys of
    ``_topk._order_key``, complemented, so that ``lax.top_k`` (ties to the lower index) takes
    the k smallest; the values gathered from softmax or log_softmax of the whole slice (the
    custom VJP above, so they differentiate in `x`), or with `renormalize` of the k chosen.
    `k` is static; the indices are JAX's default integer (int32 without x64, else int64)."""
    from . import _topk

    op = "softmax_topk"
    _args.int_axis(axis)
    if is_traced(k):
        raise TypeError(f"{op} inside JAX transformations needs k, a static int")
    x, axes = _x(x, axis, out, None, op)
    if not axes:
        raise np.exceptions.AxisError(axis, 0, f"{op} needs an axis: x is 0-d")
    ax, n = axes[0], x.shape[axes[0]]
    k = _args.count_k(k, n)
    w, s = _where(where, x), _scale(scale, x, axes)
    compute, _ = C.compute_types(x.dtype)
    v = C.scaled(jnp, x, s, compute)
    keep = None if w is None else jnp.broadcast_to(w, v.shape)
    key, nan_key, out_key = _topk._order_key(jnp, jax.lax.stop_gradient(v), keep)
    key = jnp.moveaxis(key, ax, -1)
    top = jax.lax.top_k(~key, k)[1]
    last, fn = (v.ndim - 1,), "log_softmax" if log else "softmax"
    kept = None if keep is None else jnp.take_along_axis(key, top, axis=-1) != out_key
    if renormalize:
        chosen = jnp.take_along_axis(jnp.moveaxis(v, ax, -1), top, axis=-1)
        values = _with_vjp(fn, last, None)(chosen, kept)
        has_nan = jnp.any(key == nan_key, axis=-1, keepdims=True)
        has_nan = has_nan if kept is None else has_nan & kept
        values = jnp.where(has_nan, compute.type(np.nan), values)
    else:
        y = _with_vjp(fn, axes, None)(v, keep)
        values = jnp.take_along_axis(jnp.moveaxis(y, ax, -1), top, axis=-1)
    top = top.astype(jax.dtypes.canonicalize_dtype(np.int64))  # the eager int64 where x64 is
    indices = top if kept is None else jnp.where(kept, top, -1)
    return (jnp.moveaxis(values.astype(x.dtype), -1, ax), jnp.moveaxis(indices, -1, ax))


# The segment functions: jax.ops's segment reductions (XLA's scatter), the shift and the map
# as ``_composed.direct``'s; `num_segments` must be a static int where the ids are traced.

def _segments(op, x, segment_ids, offsets, num_segments, axis, indices_are_sorted, where=None,
              scale=None, dy=None):
    """(x in its result dtype with `axis` first, the ids of its positions, whether they are
    sorted, the number of segments, where and scale in that layout (a scale a position),
    dy likewise), by the segment functions' rules."""
    _args.segments_given(segment_ids, offsets, op)
    _args.int_axis(axis, op)
    x, axes = _x(x, axis, None, None, op, empty_ok=True)
    if not axes:
        raise np.exceptions.AxisError(axis, 0, f"{op} needs an axis: x is 0-d")
    ax = axes[0]
    n = x.shape[ax]
    count = _args.count_rule(num_segments, op)
    given = segment_ids if offsets is None else offsets
    if not is_traced(given):  # values known while tracing: the host's rules on them, each one
        _args.segmented(None if offsets is not None else np.asarray(segment_ids),
                        None if offsets is None else np.asarray(offsets), num_segments, n,
                        indices_are_sorted, op)
    if offsets is not None:
        off = jnp.asarray(offsets)
        _args.index_rule(off, "offsets", op)
        if off.shape[0] == 0:
            raise ValueError(f"{op}: offsets needs at least one entry (num_segments + 1)")
        if count is not None and count != off.shape[0] - 1:
            raise ValueError(f"{op}: num_segments={count} but offsets has {off.shape[0]} "
                             f"entries (num_segments + 1)")
        count = off.shape[0] - 1
        # positions before offsets[0] get -1, from offsets[-1] on `count`: in no segment
        ids, is_sorted = jnp.searchsorted(off, jnp.arange(n), side="right") - 1, True
    else:
        ids = jnp.asarray(segment_ids)
        _args.index_rule(ids, "segment_ids", op)
        if ids.shape[0] != n:
            raise ValueError(f"{op}: segment_ids has {ids.shape[0]} entries, the axis {n}")
        if count is None:
            if is_traced(ids):
                raise TypeError(f"{op} inside JAX transformations needs num_segments, a "
                                f"static int")
            count = max(int(np.max(np.asarray(ids))) + 1, 0) if n else 0
        is_sorted = False  # a promise JAX would not check: not passed on
    shape = x.shape[:ax] + (count,) + x.shape[ax + 1:]
    w = _where(where, x)
    w = None if w is None else jnp.moveaxis(jnp.broadcast_to(w, x.shape), ax, 0)
    s = scale
    if s is not None and not _args.scalar_scale(s):
        s = jnp.asarray(s)
        _args.scale_rule(s, shape, "segment")
        s = jnp.moveaxis(jnp.broadcast_to(s, shape), ax, 0)
    elif s is not None:
        s = float(s)
    g = None
    if dy is not None:
        g = jnp.asarray(dy)
        _args.dy_rule(g, x.shape)
        g = jnp.moveaxis(g.astype(x.dtype), ax, 0)
    return jnp.moveaxis(x, ax, 0), ids.astype(jnp.int32), is_sorted, count, w, s, g, ax


def _per_position(ids, count, lead):
    """(the segment of each position, clipped into range, for gathers; whether it is in one,
    shaped to broadcast over the other axes)."""
    inside = (ids >= 0) & (ids < count)
    return jnp.where(inside, ids, 0), inside.reshape((ids.shape[0],) + (1,) * lead)


def _segment_map(op, x, segment_ids, offsets, num_segments, axis, indices_are_sorted, where,
                 scale):
    xm, ids, is_sorted, count, w, s, _, ax = _segments(op, x, segment_ids, offsets,
                                                       num_segments, axis, indices_are_sorted,
                                                       where, scale)
    compute, _ = C.compute_types(xm.dtype)
    inf = compute.type(np.inf)
    if count == 0:  # no segment: nothing to gather from
        if op == "segment_logsumexp":
            return jnp.moveaxis(jnp.zeros((0,) + xm.shape[1:], xm.dtype), 0, ax)
        fill = 0 if op == "segment_softmax" else -inf
        return jnp.moveaxis(jnp.full(xm.shape, fill, xm.dtype), 0, ax)
    safe, inside = _per_position(ids, count, xm.ndim - 1)
    v = xm.astype(compute)
    if s is not None:
        v = v * (s[safe] if not isinstance(s, float) else compute.type(s))
    keep = inside if w is None else inside & w
    v = jnp.where(keep, v, -inf)
    m = jax.ops.segment_max(v, ids, count, indices_are_sorted=is_sorted)
    if op == "segment_softmax":
        t = jnp.exp(v - m[safe])
        total = jax.ops.segment_sum(t, ids, count, indices_are_sorted=is_sorted)
        y, fill = t / total[safe], compute.type(0)
    else:
        m = jnp.where(jnp.isfinite(m), m, compute.type(0))  # as _composed.direct
        lse = jnp.log(jax.ops.segment_sum(jnp.exp(v - m[safe]), ids, count,
                                          indices_are_sorted=is_sorted))
        if op == "segment_logsumexp":
            return jnp.moveaxis((m + lse).astype(xm.dtype), 0, ax)
        y, fill = (v - m[safe]) - lse[safe], -inf
    return jnp.moveaxis(jnp.where(keep, y, fill).astype(xm.dtype), 0, ax)


def segment_softmax(x, segment_ids=None, *, offsets=None, num_segments=None, axis=0,
                    indices_are_sorted=False, where=None, scale=None, out=None):
    _no_out(out)
    return _segment_map("segment_softmax", x, segment_ids, offsets, num_segments, axis,
                        indices_are_sorted, where, scale)


def segment_log_softmax(x, segment_ids=None, *, offsets=None, num_segments=None, axis=0,
                        indices_are_sorted=False, where=None, scale=None, out=None):
    _no_out(out)
    return _segment_map("segment_log_softmax", x, segment_ids, offsets, num_segments, axis,
                        indices_are_sorted, where, scale)


def segment_logsumexp(x, segment_ids=None, *, offsets=None, num_segments=None, axis=0,
                      indices_are_sorted=False, where=None, scale=None, out=None):
    _no_out(out)
    return _segment_map("segment_logsumexp", x, segment_ids, offsets, num_segments, axis,
                        indices_are_sorted, where, scale)


def _segment_vjp(op, y, dy, segment_ids, offsets, num_segments, axis, indices_are_sorted, where,
                 out):
    _no_out(out)
    ym, ids, is_sorted, count, w, _, g, ax = _segments(op, y, segment_ids, offsets,
                                                       num_segments, axis, indices_are_sorted,
                                                       where, dy=dy)
    compute, _ = C.compute_types(ym.dtype)
    if count == 0:  # no segment: every gradient 0
        return jnp.moveaxis(jnp.zeros(ym.shape, ym.dtype), 0, ax)
    safe, inside = _per_position(ids, count, ym.ndim - 1)
    keep = inside if w is None else inside & w
    yc, gc = ym.astype(compute), g.astype(compute)
    log = op == "segment_log_softmax_vjp"
    t = jnp.where(keep, gc if log else gc * yc, compute.type(0))
    total = jax.ops.segment_sum(t, ids, count, indices_are_sorted=is_sorted)[safe]
    dx = gc - jnp.exp(yc) * total if log else yc * (gc - total)
    return jnp.moveaxis(jnp.where(keep, dx, compute.type(0)).astype(ym.dtype), 0, ax)


def segment_softmax_vjp(y, dy, segment_ids=None, *, offsets=None, num_segments=None, axis=0,
                        indices_are_sorted=False, where=None, out=None):
    return _segment_vjp("segment_softmax_vjp", y, dy, segment_ids, offsets, num_segments, axis,
                        indices_are_sorted, where, out)


def segment_log_softmax_vjp(y, dy, segment_ids=None, *, offsets=None, num_segments=None,
                            axis=0, indices_are_sorted=False, where=None, out=None):
    return _segment_vjp("segment_log_softmax_vjp", y, dy, segment_ids, offsets, num_segments,
                        axis, indices_are_sorted, where, out)


def _no_out(out):
    if out is not None:
        _args.no_jax_out()
