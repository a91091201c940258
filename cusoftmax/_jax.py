"""JAX tracers: the family inside ``jax.jit``, ``jax.vmap``, ``jax.grad`` / ``jax.vjp``,
``jax.lax.scan`` and ``jax.checkpoint``, as XLA operations in ``jax.numpy`` of ``_composed``:
``direct`` (one max, one sum, the map) for softmax, log_softmax and logsumexp without `b`, the
reference's state for logsumexp with `b` or `return_sign`, its VJPs for the VJPs; the same NaN,
inf and `where` rules as every other path. Not the kernels yet: XLA compiles and fuses these
operations for the backend.

softmax and log_softmax carry a ``jax.custom_vjp`` whose backward is the family's VJP formula
(``_composed.vjp``: one sum a slice, zero at masked positions), for `x` (and a Python scalar
`scale`); with an array `scale`, and for logsumexp and the VJPs, JAX differentiates the
reference. Sums accumulate in float64 only where JAX has x64 enabled (else in float32).

Eager JAX arrays do not come here: they reach the kernels through DLPack (``_arrays``).
"""

from __future__ import annotations

import contextlib
import warnings
from functools import lru_cache

import jax
import jax.numpy as jnp

from . import _args
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
    dtype = _args.result_dtype(x.dtype, False, op)
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
    return C.direct(jnp, op, x, axes, where=where, scale=scale)


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
    with _x64_as_configured():
        total = C.vjp_sum(jnp, y, dy, axes, where=w, log=log)
        return C.vjp(jnp, y, dy, total, where=w, log=log)


def softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    return _vjp("softmax_vjp", y, dy, axis, where, out)


def log_softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    return _vjp("log_softmax_vjp", y, dy, axis, where, out)
