"""The public functions: each hands its arguments to the eager function of its op (arrays of
CuPy, NumPy or any framework DLPack reaches) or to a front (``front``): the Dask wrapper (Dask
arrays), the JAX front (tracers, inside jax.jit and the other transformations) or the torch
operators (torch tensors), and returns what it returns. The docstrings are the eager
functions'."""

from __future__ import annotations

import functools

from . import _family, _segment, _topk


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


def _public(eager):
    """The public function of `eager`: its name, signature and docstring."""
    return functools.wraps(eager, assigned=("__name__", "__qualname__", "__doc__"), updated=())


@_public(_family.softmax)
def softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    if (f := front(x, where, scale)) is not None:
        return _module(f).softmax(x, axis, where=where, scale=scale, out=out, method=method)
    return _family.softmax(x, axis, where=where, scale=scale, out=out, method=method)


@_public(_family.log_softmax)
def log_softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    if (f := front(x, where, scale)) is not None:
        return _module(f).log_softmax(x, axis, where=where, scale=scale, out=out,
                                      method=method)
    return _family.log_softmax(x, axis, where=where, scale=scale, out=out, method=method)


@_public(_family.logsumexp)
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, *, where=None,
              scale=None, out=None):
    if (f := front(a, b, where, scale)) is not None:
        return _module(f).logsumexp(a, axis, b, keepdims, return_sign, where=where, scale=scale,
                                    out=out)
    return _family.logsumexp(a, axis, b, keepdims, return_sign, where=where, scale=scale,
                             out=out)


@_public(_family.softmax_vjp)
def softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    if (f := front(y, dy, where)) is not None:
        return _module(f).softmax_vjp(y, dy, axis, where=where, out=out)
    return _family.softmax_vjp(y, dy, axis, where=where, out=out)


@_public(_family.log_softmax_vjp)
def log_softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    if (f := front(y, dy, where)) is not None:
        return _module(f).log_softmax_vjp(y, dy, axis, where=where, out=out)
    return _family.log_softmax_vjp(y, dy, axis, where=where, out=out)


@_public(_topk.softmax_topk)
def softmax_topk(x, k, axis=-1, *, log=False, renormalize=False, where=None, scale=None,
                 out=None):
    if (f := front(x, where, scale)) == "jax":
        raise TypeError("softmax_topk is not available inside JAX transformations yet: call it "
                        "on concrete arrays")
    if f is not None:
        return _module(f).softmax_topk(x, k, axis, log=log, renormalize=renormalize,
                                       where=where, scale=scale, out=out)
    return _topk.softmax_topk(x, k, axis, log=log, renormalize=renormalize, where=where,
                              scale=scale, out=out)


def _eager_only(fn):
    """A segment function: Dask arrays (whose segments would cross chunks) and JAX tracers
    (no traced segment path yet) are refused."""
    @functools.wraps(fn)
    def public(x, *args, **kwargs):
        f = front(x, *args, *kwargs.values())
        if f == "dask":
            raise TypeError(f"{fn.__name__} does not take Dask arrays: compute them first")
        if f == "jax":
            raise TypeError(f"{fn.__name__} is not available inside JAX transformations yet: "
                            f"call it on concrete arrays")
        return fn(x, *args, **kwargs)

    return public


segment_softmax = _eager_only(_segment.segment_softmax)
segment_log_softmax = _eager_only(_segment.segment_log_softmax)
segment_logsumexp = _eager_only(_segment.segment_logsumexp)
segment_softmax_vjp = _eager_only(_segment.segment_softmax_vjp)
segment_log_softmax_vjp = _eager_only(_segment.segment_log_softmax_vjp)
