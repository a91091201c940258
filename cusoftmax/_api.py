"""The public functions: each hands its arguments to the eager function of its op (arrays of
CuPy, NumPy or any framework DLPack reaches) or to a front (``front``): the Dask wrapper (Dask
arrays), the JAX front (tracers, inside jax.jit and the other transformations) or the torch
operators (torch tensors), and returns what it returns. The docstrings are the eager
functions'."""

from __future__ import annotations

import functools

from . import _family, _segment, _topk
from ._ops import EAGER_TAKES, OPS, refused


def front(*objs) -> str | None:
    """The front of a call by its arrays: "dask" where any is a Dask collection, "jax" where
    one is a JAX tracer, "torch" where the first is a torch tensor, else None (the eager
    functions). By each type's module first: Dask, JAX and torch are imported only where one is
    passed."""
    for i, o in enumerate(objs):
        if o is None:
            continue
        module = type(o).__module__
        if module.startswith("dask."):
            return "dask"
        if module.startswith("jax.") and _module("jax").is_traced(o):
            return "jax"
        if i == 0 and (module == "torch" or module.startswith("torch.")):
            return "torch"
    return None


def _module(name: str):
    """The front of that name, imported at its first call: its framework is an optional
    dependency."""
    if name == "dask":
        from . import _dask as front_module
    elif name == "jax":
        from . import _jax as front_module
    else:
        from . import _torch as front_module
    return front_module


def _front_for(name: str, f: str):
    """The front module that computes op `name` on arrays of front `f`, or None where the eager
    function takes them (``_ops``: the op's fronts; else a TypeError for Dask and JAX)."""
    if f in OPS[name].fronts:
        return _module(f)
    if f in EAGER_TAKES:
        return None
    raise TypeError(refused(name, f))


def _public(eager):
    """The public function of `eager`: its name, signature and docstring."""
    return functools.wraps(eager, assigned=("__name__", "__qualname__", "__doc__"), updated=())


@_public(_family.softmax)
def softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    if (f := front(x, where, scale)) and (m := _front_for("softmax", f)):
        return m.softmax(x, axis, where=where, scale=scale, out=out, method=method)
    return _family.softmax(x, axis, where=where, scale=scale, out=out, method=method)


@_public(_family.log_softmax)
def log_softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    if (f := front(x, where, scale)) and (m := _front_for("log_softmax", f)):
        return m.log_softmax(x, axis, where=where, scale=scale, out=out, method=method)
    return _family.log_softmax(x, axis, where=where, scale=scale, out=out, method=method)


@_public(_family.logsumexp)
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, *, where=None,
              scale=None, out=None):
    if (f := front(a, b, where, scale)) and (m := _front_for("logsumexp", f)):
        return m.logsumexp(a, axis, b, keepdims, return_sign, where=where, scale=scale, out=out)
    return _family.logsumexp(a, axis, b, keepdims, return_sign, where=where, scale=scale,
                             out=out)


@_public(_family.softmax_vjp)
def softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    if (f := front(y, dy, where)) and (m := _front_for("softmax_vjp", f)):
        return m.softmax_vjp(y, dy, axis, where=where, out=out)
    return _family.softmax_vjp(y, dy, axis, where=where, out=out)


@_public(_family.log_softmax_vjp)
def log_softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    if (f := front(y, dy, where)) and (m := _front_for("log_softmax_vjp", f)):
        return m.log_softmax_vjp(y, dy, axis, where=where, out=out)
    return _family.log_softmax_vjp(y, dy, axis, where=where, out=out)


@_public(_topk.softmax_topk)
def softmax_topk(x, k, axis=-1, *, log=False, renormalize=False, where=None, scale=None,
                 out=None):
    if (f := front(x, where, scale)) and (m := _front_for("softmax_topk", f)):
        return m.softmax_topk(x, k, axis, log=log, renormalize=renormalize, where=where,
                              scale=scale, out=out)
    return _topk.softmax_topk(x, k, axis, log=log, renormalize=renormalize, where=where,
                              scale=scale, out=out)


def _segments(fn):
    """A segment function: its arrays' front as ``_front_for`` says (none has one yet)."""
    @functools.wraps(fn)
    def public(x, *args, **kwargs):
        f = front(x, *args, *kwargs.values())
        if f and (m := _front_for(fn.__name__, f)):
            return getattr(m, fn.__name__)(x, *args, **kwargs)
        return fn(x, *args, **kwargs)

    return public


segment_softmax = _segments(_segment.segment_softmax)
segment_log_softmax = _segments(_segment.segment_log_softmax)
segment_logsumexp = _segments(_segment.segment_logsumexp)
segment_softmax_vjp = _segments(_segment.segment_softmax_vjp)
segment_log_softmax_vjp = _segments(_segment.segment_log_softmax_vjp)
