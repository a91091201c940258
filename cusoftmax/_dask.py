"""Dask arrays of CuPy or NumPy chunks: every function of the family, lazily.

Reduced axes inside one chunk: the ordinary function on each chunk, one task a chunk (CuPy
chunks take the GPU kernels). Reduced axes split over chunks: one read of each chunk for the
State of its part of every slice, a tree merge of the states (``dask.array.reduction``), and one
read and one write of each chunk to normalise from its slice's merged state; 2 reads + 1 write,
no rechunking of the input and no slice gathered onto one worker. The VJPs likewise: the slice
sums by a Dask reduction, then one pass per chunk. CuPy chunks without `where` and `b` (and with
no `scale` or a scalar one the kernels take, ``_engine.fused_scale``) take each chunk's states from
the reduce kernels (``slice_state``: one read), merge them by one fused kernel a merge, and
normalise by the normalize kernel where the axis is the last (one read, one write; float32
chunks of other axes by one fused elementwise pass); the rest by ``_composed``'s array
operations.
"""

from __future__ import annotations

import operator
from functools import lru_cache, partial, reduce
from numbers import Number
from typing import NamedTuple

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from . import _args, _arrays, _composed, _engine, _family, _host, _topk


def softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    return _normalized("softmax", x, axis, where, scale, out, method)


def log_softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    return _normalized("log_softmax", x, axis, where, scale, out, method)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, *, where=None,
              scale=None, out=None):
    shape = _args.with_weights(a, b)  # a and b broadcast together, as SciPy's
    if shape is not None and tuple(np.shape(a)) != shape:
        a = da.broadcast_to(a if isinstance(a, da.Array) else da.asarray(a), shape)
    a, c = _checked(a, axis, out, "logsumexp")
    axes, dtype = c.axes, c.dtype
    b, where, scale = (_operand(v, a, c, name) for v, name in ((b, "b"), (where, "where"),
                                                               (scale, "scale")))
    if _within_chunks(a, axes):
        shape = dict(chunks=_reduced_chunks(a, axes)) if keepdims else dict(drop_axis=axes)
        res = da.map_blocks(_on_chunk, a, b, where, scale, fn=_family.logsumexp,
                            keys=("b", "where", "scale"), axis=axes, keepdims=keepdims,
                            return_sign=return_sign, **shape,
                            meta=meta_from_array(a._meta, a.ndim - len(axes) * (not keepdims),
                                                 dtype))
    else:
        res = _states(a, axes, partial(_log_sum, return_sign=return_sign, result=dtype),
                      keepdims, meta_from_array(a._meta, a.ndim, dtype), b=b, where=where,
                      scale=scale)
    if not return_sign:
        return res
    meta = meta_from_array(a._meta, res.ndim, dtype)
    return tuple(res.map_blocks(operator.itemgetter(i), meta=meta) for i in (0, 1))


def softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    return _vjp(False, y, dy, axis, where, out)


def log_softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    return _vjp(True, y, dy, axis, where, out)


def softmax_topk(x, k, axis=-1, *, log=False, renormalize=False, where=None, scale=None,
                 out=None):
    """softmax_topk of Dask array ``x``: two lazy Dask arrays (values, indices). Slices inside
    one chunk: the ordinary function on each chunk. Slices split over chunks: each chunk's k
    best entries (positions along the whole axis) and its State, merged in a tree (candidates
    in chunk order, so ties keep the lower position), the values from the merged State. `axis`:
    an int (_topk.softmax_topk's check)."""
    _args.int_axis(axis)
    x, c = _checked(x, axis, out, "softmax_topk")
    ax = _args.one_axis(axis, c)
    if x.shape[ax] != x.shape[ax]:
        raise ValueError("softmax_topk needs the axis's length, unknown until computed "
                         "(compute_chunk_sizes())")
    k = _args.count_k(k, x.shape[ax])
    where, scale = _operand(where, x, c, "where"), _operand(scale, x, c, "scale")
    chunks = x.chunks[:ax] + ((k,),) + x.chunks[ax + 1:]
    flags = {"log": log, "renormalize": renormalize}
    if _within_chunks(x, (ax,)):
        fn = partial(_topk.softmax_topk, k=k, **flags)
        both = da.map_blocks(_on_chunk, x, where, scale, fn=fn, keys=("where", "scale"), axis=ax,
                             chunks=chunks, meta=x._meta)
    else:
        parts = da.map_blocks(_topk_part, x, where, scale, k=k, ax=ax,
                              chunks=_reduced_chunks(x, (ax,)), meta=x._meta)
        total = partial(_topk_total, k=k, ax=ax, dtype=x.dtype, **flags)
        both = da.reduction(parts, _state_as_is, total,
                            combine=partial(_topk_merged, k=k, ax=ax), axis=(ax,), keepdims=True,
                            concatenate=False, output_size=k, dtype=x.dtype, meta=x._meta)
    meta = meta_from_array(x._meta, x.ndim, x.dtype)
    return (both.map_blocks(operator.itemgetter(0), meta=meta),
            both.map_blocks(operator.itemgetter(1), meta=meta_from_array(x._meta, x.ndim, np.int64)))


def _normalized(op, x, axis, where, scale, out, method):
    """softmax or log_softmax (``op``) of Dask array ``x``."""
    x, c = _checked(x, axis, out, op, method)
    axes, dtype = c.axes, c.dtype
    where, scale = _operand(where, x, c, "where"), _operand(scale, x, c, "scale")
    meta = meta_from_array(x._meta, x.ndim, dtype)
    if _within_chunks(x, axes):
        return da.map_blocks(_on_chunk, x, where, scale, fn=getattr(_family, op),
                             keys=("where", "scale"), axis=axes, method=method, meta=meta)
    if method is not None:
        raise ValueError("method= chooses the kernel of whole slices; these slices are split "
                         "over Dask chunks")
    total = _states(x, axes, partial(_normalizing, op=op, axes=axes), where=where, scale=scale)
    return da.map_blocks(_normalize_chunk, x, total, where, scale, op=op, axes=axes, meta=meta)


def _vjp(log, y, dy, axis, where, out):
    y, c = _checked(y, axis, out, "log_softmax_vjp" if log else "softmax_vjp")
    axes, dtype = c.axes, c.dtype
    dy, where = _operand(dy, y, c, "dy").astype(dtype), _operand(where, y, c, "where")
    meta = meta_from_array(y._meta, y.ndim, dtype)
    if _within_chunks(y, axes):
        fn = _family.log_softmax_vjp if log else _family.softmax_vjp
        return da.map_blocks(_on_chunk, y, dy, where, fn=fn, keys=("where",), axis=axes,
                             meta=meta)
    # The partial sums keep their accumulation type through Dask's sum (its dtype is the meta's).
    acc = meta_from_array(y._meta, y.ndim, _composed.compute_types(dtype)[1])
    parts = da.map_blocks(_vjp_sum_chunk, y, dy, where, axes=axes, log=log,
                          chunks=_reduced_chunks(y, axes), meta=acc)
    total = da.reduction(parts, _quiet_sum, _quiet_sum, axis=axes, keepdims=True,
                         dtype=parts.dtype, meta=acc)
    return da.map_blocks(_vjp_chunk, y, dy, total, where, log=log, meta=meta)


def _checked(x, axis, out, op, method=None):
    """(x in its result dtype, the prepared call) by the ordinary argument rules, checked on a
    stand-in of x's shape and dtype."""
    if out is not None:
        raise TypeError("out= cannot be used with Dask arrays: the result is a new lazy array")
    if not isinstance(x, da.Array):
        x = da.asarray(x)
    xp = _module(x._meta)
    if xp is np and not isinstance(x._meta, np.ndarray):
        raise TypeError(f"Dask chunks must be CuPy or NumPy arrays, not {type(x._meta).__name__}")
    shape = tuple(1 if n != n else n for n in x.shape)  # NaN: a length unknown until computed
    c = _args.prepare(_stand_in(xp, shape, x.dtype), axis, None, method, op)
    return x.astype(c.dtype), c


def _stand_in(xp, shape, dtype):
    """An array of this shape and dtype that holds one element (a broadcast view)."""
    return xp.broadcast_to(xp.empty((), dtype), shape)


_RULES = {"where": _args.checked_where, "scale": _args.checked_scale, "b": _args.checked_weights,
          "dy": _args.checked_dy}


def _operand(v, x, c, name):
    """`where`, `scale`, `b` or `dy` (``name``) checked by the ordinary rules (on a stand-in of
    its shape and dtype) and aligned with x's chunks; a scalar `scale` as it is."""
    if v is None:
        return None
    if isinstance(v, (Number, np.bool_)):
        return _RULES[name](v, c)
    v = v if hasattr(v, "dtype") else np.asarray(v)
    if any(n != n for n in v.shape):  # NaN: a Dask array's length unknown until computed
        raise ValueError(f"{name} of shape {v.shape} cannot be aligned with x's chunks until its "
                         f"chunk sizes are known (compute_chunk_sizes())")
    _RULES[name](_stand_in(_module(c.array), v.shape, v.dtype), c)
    return _aligned(v, x, name)


def _aligned(v, x, name):
    """Array ``v`` (whose shape broadcasts to x's) broadcast to Dask array ``x``: in x's chunks
    and x's chunk type. Only v is rechunked, never x; its dims of length 1 stay one chunk (a
    broadcast, no copy)."""
    xp = _module(x._meta)
    if not isinstance(v, da.Array):
        v = xp.asarray(v)
    v = v[(None,) * (x.ndim - v.ndim)]
    chunks = tuple((1,) if n == 1 else c for n, c in zip(v.shape, x.chunks))
    try:
        v = v.rechunk(chunks) if isinstance(v, da.Array) else da.from_array(v, chunks=chunks)
        v = da.broadcast_to(v, x.shape, chunks=x.chunks)
    except ValueError as e:
        raise ValueError(f"{name} of shape {v.shape} and chunks {getattr(v, 'chunks', None)} "
                         f"cannot be aligned with x's shape {x.shape} and chunks {x.chunks}: "
                         f"{e}") from None
    if _module(v._meta) is not xp:
        v = v.map_blocks(xp.asarray, meta=meta_from_array(x._meta, v.ndim, v.dtype))
    return v


def _within_chunks(x, axes) -> bool:
    return all(x.numblocks[a] == 1 for a in axes)


def _reduced_chunks(x, axes):
    """x's chunks with one chunk of length 1 per block along ``axes`` (a keepdims partial)."""
    return tuple((1,) * n if i in axes else c for i, (c, n) in
                 enumerate(zip(x.chunks, x.numblocks)))


def _module(a):
    """cupy for a CuPy array, else numpy."""
    cupy = _arrays.cupy_or_none()
    return cupy if cupy is not None and isinstance(a, cupy.ndarray) else np


def _states(x, axes, aggregate=None, keepdims=True, meta=None, **extras):
    """The State of every slice over all of its chunks: a Dask array with one block (a State of
    keepdims arrays) per block of the kept axes; or, given ``aggregate(state)``, its value on
    each merged State (squeezed along ``axes`` unless ``keepdims``).

    Without array extras each chunk's State is the reduction's own chunk step: one layer of
    tasks, not a layer of ours fused with the reduction's into subgraphs run by Dask's
    ``execute_graph`` (ordered again at every run)."""
    total = _merged if aggregate is None else partial(_merged_then, aggregate)
    common = dict(combine=_merged, axis=axes, keepdims=keepdims, concatenate=False,
                  dtype=x.dtype, meta=x._meta if meta is None else meta)
    if not any(isinstance(v, da.Array) for v in extras.values()):
        return da.reduction(x, partial(_state_of_chunk, **extras), total, **common)
    parts = da.map_blocks(_state_chunk, x, *extras.values(), keys=tuple(extras), axes=axes,
                          chunks=_reduced_chunks(x, axes), meta=x._meta)
    return da.reduction(parts, _state_as_is, total, **common)


# Block functions: what each task runs.

def _on_chunk(x, *arrays, fn, keys, **kw):
    """``fn`` on one chunk; Dask aligns only positional arrays, so the keyword arrays come last
    in the order of ``keys``. An array `scale` arrives broadcast to the chunk (_aligned); ``fn``
    takes one value a slice, its first along the reduced axes (``kw["axis"]``)."""
    pos = len(arrays) - len(keys)
    named = dict(zip(keys, arrays[pos:]))
    scale = named.get("scale")
    if scale is not None and getattr(scale, "ndim", 0) == x.ndim:
        axes = kw["axis"] if isinstance(kw["axis"], tuple) else (kw["axis"],)
        named["scale"] = scale[tuple(slice(0, 1) if d in axes else slice(None)
                                     for d in range(x.ndim))]
    return fn(x, *arrays[:pos], **named, **kw)


def _state_chunk(x, *arrays, keys, axes):
    xp = _module(x)
    compute, acc = _composed.compute_types(x.dtype)
    shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
    if any(x.shape[a] == 0 for a in axes):  # an empty chunk: the merge's identity, m = -inf
        return _composed.State(xp.full(shape, -np.inf, compute), xp.zeros(shape, acc),
                               xp.zeros(shape, acc))
    named = dict(zip(keys, arrays))
    scale = named.pop("scale", None)
    fs = None if scale is None else _engine.fused_scale(scale, x.dtype)
    if xp is not np and all(a is None for a in named.values()) and (scale is None or fs is not None):
        # the reduce kernels, one read (a scalar scale applied as they load)
        st = _engine.reduced(_args.prepare(x, axes, None, None, "logsumexp"), "slice_state", fs)
        m, c, s = (st[..., i].reshape(shape) for i in range(3))
        return _composed.State(m.astype(compute, copy=False), c.astype(acc, copy=False),
                               s.astype(acc, copy=False))
    if xp is np and all(a is None for a in arrays):
        return _host.state_of(x, axes)  # in cache-sized pieces
    return _composed.state(xp, x, axes, **dict(zip(keys, arrays)))


class _Part(NamedTuple):
    """A piece of softmax_topk's slices: their State, and their k best entries in key order
    (values in the compute type, positions along the whole axis, whether each is left in)."""

    st: _composed.State
    values: object
    pos: object
    kept: object


def _topk_part(x, where, scale, *, k, ax, block_info=None):
    xp = _module(x)
    st = _state_chunk(x, where, scale, keys=("where", "scale"), axes=(ax,))
    compute = _composed.compute_types(x.dtype)[0]
    kc = min(k, x.shape[ax])
    if xp is not np and where is None and scale is None and kc:  # the topk kernels: one read
        top = _topk.softmax_topk(x, kc, axis=ax)[1]
        values, kept = xp.take_along_axis(x, top, axis=ax).astype(compute), None
    elif kc:
        keep = None if where is None else xp.broadcast_to(where, x.shape)
        v = _composed.scaled(xp, x, scale, compute)
        values, top, kept, _ = _topk.choose(xp, v, keep, kc, ax)
    else:  # an empty chunk: no candidate
        values, top, kept = x.astype(compute), xp.zeros(x.shape, np.int64), None
    kept = xp.ones(values.shape, bool) if kept is None else kept
    return _Part(st, values, top + block_info[0]["array-location"][ax][0], kept)


def _topk_merged(parts, axis, keepdims, *, k, ax):
    """The Part of several pieces in order (a nested list): States merged, candidates
    concatenated in order and chosen again (ties to the earlier, the lower position)."""
    parts = _leaves(parts)
    xp = _module(parts[0].values)
    st = reduce(partial(_composed.merge, xp), [p.st for p in parts])
    values, pos, kept = (xp.concatenate([getattr(p, f) for p in parts], axis=ax)
                         for f in ("values", "pos", "kept"))
    values, top, kept, _ = _topk.choose(xp, values, kept, min(k, values.shape[ax]), ax)
    return _Part(st, values, xp.take_along_axis(pos, top, axis=ax), kept)


def _topk_total(parts, axis, keepdims, *, k, ax, log, renormalize, dtype):
    """(values, indices) of whole slices from their pieces. A NaN left in anywhere in a slice
    makes its State's s NaN (and its max, where array operations took the State; the reduce
    kernels' max passes over NaN), +inf neither."""
    p = _topk_merged(parts, axis, keepdims, k=k, ax=ax)
    xp = _module(p.values)
    st = None if renormalize else p.st
    has_nan = xp.logical_or(xp.isnan(p.st.m), xp.isnan(p.st.s))
    values = _topk.finish(xp, "log_softmax" if log else "softmax", p.values, p.kept, (ax,), st,
                          has_nan)
    return values.astype(dtype, copy=False), xp.where(p.kept, p.pos, np.int64(-1))


def _state_as_is(st, axis, keepdims):
    return st


def _state_of_chunk(x, axis, keepdims, **extras):
    """The reduction's chunk step: the State of x's part of each slice (``extras``: None or a
    scalar scale)."""
    return _state_chunk(x, *extras.values(), keys=tuple(extras), axes=axis)


def _merged_then(fn, parts, axis, keepdims):
    """``fn`` of the merged State (an array or a tuple of arrays), squeezed along ``axis``
    unless ``keepdims``."""
    res = fn(_merged(parts, axis, keepdims))
    if keepdims:
        return res
    return tuple(r.squeeze(axis=axis) for r in res) if isinstance(res, tuple) else \
        res.squeeze(axis=axis)


def _merged(parts, axis, keepdims):
    """The merge of the States in a nested list (one level per reduced axis); CuPy states by
    one fused kernel a merge (``_composed.merge`` traced by ``cupy.fuse``)."""
    states = _leaves(parts)
    xp = _module(states[0].m)
    if xp is np:
        return reduce(partial(_composed.merge, np), states)
    fused = _fused_merge()
    return reduce(lambda p, q: _composed.State(*fused(*p, *q)), states)


@lru_cache(maxsize=None)
def _fused_merge():
    import cupy

    def merge_states(pm, pc, ps, qm, qc, qs):  # the kernel takes the function's name
        return tuple(_composed.merge(cupy, _composed.State(pm, pc, ps), _composed.State(qm, qc, qs)))

    return cupy.fuse(merge_states)


def _leaves(parts):
    return [s for p in parts for s in _leaves(p)] if isinstance(parts, list) else [parts]


def _normalizing(st, *, op, axes):
    """A merged State with, for CuPy slices, each one's constant k and, along the last axis, the
    normalize kernel's (m, k) (computed once, not by each chunk of the slices)."""
    xp = _module(st.m)
    if xp is np:
        return st, None, None
    k = _composed.constant(xp, op, st)
    last = axes == (st.m.ndim - 1,)
    return st, k, xp.stack((st.m.reshape(-1), k.reshape(-1)), axis=-1) if last else None


def _normalize_chunk(x, total, where, scale, *, op, axes):
    xp = _module(x)
    st, k, mk = total
    fs = None if scale is None else _engine.fused_scale(scale, x.dtype)
    if xp is not np and where is None and (scale is None or fs is not None):
        if mk is not None:  # the normalize kernel: rows from their (m, k)
            y = _engine.normalized(x, mk, op, fs)
            if y is not None:
                return y
        if x.dtype == np.float32 and scale is None:
            return _fused_normalize(op)(x, st.m.astype(x.dtype), k)
    if xp is np and where is None and scale is None:
        return _host.normalize(op, x, st, axes)  # in cache-sized pieces
    return _composed.normalize(xp, op, x, st, axes, where=where, scale=scale)


@lru_cache(maxsize=None)
def _fused_normalize(op):
    """``f(x, m, k)``: softmax ``exp(x - m) * k`` or log_softmax ``(x - m) - k`` in one
    elementwise CuPy kernel (one read of x, one write), m and k broadcast along the slices."""
    import cupy

    def softmax_from_state(x, m, k):  # the kernel takes the function's name
        return cupy.exp(x - m) * k

    def log_softmax_from_state(x, m, k):
        return (x - m) - k

    return cupy.fuse(softmax_from_state if op == "softmax" else log_softmax_from_state)


def _log_sum(st, *, return_sign, result):
    return _composed.log_sum(_module(st.m), st, return_sign=return_sign, dtype=result)


def _quiet_sum(x, axis, keepdims):
    """The sum of partial sums: +inf and -inf in different chunks of a slice give NaN, without
    the warning the plain call does not give either."""
    with np.errstate(all="ignore"):
        return x.sum(axis=axis, keepdims=keepdims)


def _vjp_sum_chunk(y, dy, where, *, axes, log):
    return _composed.vjp_sum(_module(y), y, dy, axes, where=where, log=log)


def _vjp_chunk(y, dy, total, where, *, log):
    return _composed.vjp(_module(y), y, dy, total, where=where, log=log)
