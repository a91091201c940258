"""The public functions: each hands its arguments to the eager function of its op (arrays of
CuPy, NumPy or any framework DLPack reaches) or to the Dask wrapper (Dask arrays), and returns
what it returns. The docstrings are the eager functions'."""

from __future__ import annotations

import functools

from . import _family, _segment, _topk


def is_dask(*objs) -> bool:
    """Whether any of ``objs`` is a Dask collection (by its type's module: Dask itself is
    imported only when one is passed)."""
    for o in objs:
        if o is not None and type(o).__module__.startswith("dask."):
            return True
    return False


def _dask():
    """The Dask wrapper, imported with the first Dask array (Dask is an optional dependency)."""
    from . import _dask

    return _dask


def _public(eager):
    """The public function of `eager`: its name, signature and docstring."""
    return functools.wraps(eager, assigned=("__name__", "__qualname__", "__doc__"), updated=())


@_public(_family.softmax)
def softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    if is_dask(x, where, scale):
        return _dask().softmax(x, axis, where=where, scale=scale, out=out, method=method)
    return _family.softmax(x, axis, where=where, scale=scale, out=out, method=method)


@_public(_family.log_softmax)
def log_softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    if is_dask(x, where, scale):
        return _dask().log_softmax(x, axis, where=where, scale=scale, out=out, method=method)
    return _family.log_softmax(x, axis, where=where, scale=scale, out=out, method=method)


@_public(_family.logsumexp)
def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, *, where=None,
              scale=None, out=None):
    if is_dask(a, b, where, scale):
        return _dask().logsumexp(a, axis, b, keepdims, return_sign, where=where, scale=scale,
                                 out=out)
    return _family.logsumexp(a, axis, b, keepdims, return_sign, where=where, scale=scale,
                             out=out)


@_public(_family.softmax_vjp)
def softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    if is_dask(y, dy, where):
        return _dask().softmax_vjp(y, dy, axis, where=where, out=out)
    return _family.softmax_vjp(y, dy, axis, where=where, out=out)


@_public(_family.log_softmax_vjp)
def log_softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    if is_dask(y, dy, where):
        return _dask().log_softmax_vjp(y, dy, axis, where=where, out=out)
    return _family.log_softmax_vjp(y, dy, axis, where=where, out=out)


@_public(_topk.softmax_topk)
def softmax_topk(x, k, axis=-1, *, log=False, renormalize=False, where=None, scale=None,
                 out=None):
    if is_dask(x, where, scale):
        return _dask().softmax_topk(x, k, axis, log=log, renormalize=renormalize, where=where,
                                    scale=scale, out=out)
    return _topk.softmax_topk(x, k, axis, log=log, renormalize=renormalize, where=where,
                              scale=scale, out=out)


def _no_dask(fn):
    """A segment function: Dask arrays are refused (their segments would cross chunks)."""
    @functools.wraps(fn)
    def public(x, *args, **kwargs):
        if is_dask(x, *args, *kwargs.values()):
            raise TypeError(f"{fn.__name__} does not take Dask arrays: compute them first")
        return fn(x, *args, **kwargs)

    return public


segment_softmax = _no_dask(_segment.segment_softmax)
segment_log_softmax = _no_dask(_segment.segment_log_softmax)
segment_logsumexp = _no_dask(_segment.segment_logsumexp)
segment_softmax_vjp = _no_dask(_segment.segment_softmax_vjp)
segment_log_softmax_vjp = _no_dask(_segment.segment_log_softmax_vjp)
