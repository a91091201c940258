"""Shared test helpers: GPU detection, the float64 SciPy reference, array cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
from hypothesis import strategies as st

from cusoftmax._accuracy import TOLERANCE, violations
from cusoftmax._arrays import no_gpu_reason

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes comes with the test extra
    BF16 = None


GPU_REASON = no_gpu_reason()
requires_gpu = pytest.mark.skipif(GPU_REASON is not None, reason=f"needs a GPU: {GPU_REASON}")

FLOAT_DTYPES = [np.dtype(d) for d in ("float16", "float32", "float64")] + ([BF16] if BF16 else [])
INT_DTYPES = [np.dtype(d) for d in ("int8", "uint8", "int16", "uint16", "int32", "int64", "uint64")]


def block_max_cols(limits, itemsize, vec):
    """The longest row (elements) the block kernel holds under ``limits``, in packs of `vec`."""
    from cusoftmax.planning import TUNING

    return (limits.smem_per_block - TUNING.block.scratch) // (vec * itemsize) * vec


def cluster_held_cols(limits, itemsize, vec):
    """The longest row a cluster holds on chip under ``limits``: slices of
    cluster_blocks_per_sm blocks an SM on the largest cluster (longer rows spill)."""
    from cusoftmax.planning import TUNING as t
    from cusoftmax.planning.common import BLOCK_RESERVED

    block = limits.smem_per_sm // t.cluster.blocks_per_sm - BLOCK_RESERVED - t.block.scratch
    return limits.max_cluster * (block // (vec * itemsize)) * vec


def cluster_policy_cols(limits, itemsize, vec):
    """The longest row the policy sends to a cluster under ``limits`` (a forced cluster takes
    any): each block's spill at most cluster_spill_max times the packs it holds."""
    from cusoftmax.planning import TUNING

    held = cluster_held_cols(limits, itemsize, vec) // (limits.max_cluster * vec)
    return limits.max_cluster * math.floor(held * (1 + TUNING.cluster.spill_max)) * vec


def to_host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def assert_same_bits(a, b):
    """Bitwise equality of two arrays (NaN payloads and bfloat16 included)."""
    a, b = np.ascontiguousarray(to_host(a)), np.ascontiguousarray(to_host(b))
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


def reference(x, axes) -> np.ndarray:
    """float64 SciPy softmax of the (already dtype-rounded) input."""
    with np.errstate(all="ignore"):
        return scipy.special.softmax(np.asarray(to_host(x), dtype=np.float64), axis=axes)


def assert_softmax(y, x, axis, dtype=None):
    """y is softmax(x) within the dtype's bound (dtype: the result's dtype)."""
    y = to_host(y)
    dtype = np.dtype(dtype or y.dtype)
    assert y.dtype == dtype
    msg = violations(y, reference(x, axis), dtype.name)
    assert msg is None, msg


def assert_sums_to_one(y, axis):
    y = to_host(y)
    rtol = 1e-13 if y.dtype == np.float64 else TOLERANCE[y.dtype.name][0]
    s = np.sum(y.astype(np.float64), axis=axis)
    finite = ~np.isnan(s)
    assert np.all(np.abs(s[finite] - 1.0) <= rtol), np.abs(s[finite] - 1.0).max()


def make_values(rng, shape, dtype, scale=3.0, specials=0.0):
    """Random values in `dtype` (never all zeros), with a fraction of +-inf / NaN entries."""
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -40
        return rng.integers(lo, 40, size=shape).astype(dtype)
    v = rng.standard_normal(shape) * scale
    if specials:
        hit = rng.random(shape) < specials
        v[hit] = rng.choice([np.inf, -np.inf, np.nan, -np.inf], size=int(hit.sum()))
    return v.astype(dtype)


@st.composite
def views(draw, dtypes=None, max_side=7, widths=(1, 2, 3, 5, 8, 17, 33, 64)):
    """(base values, slicing, permutation, axis): a random strided view and reduction axes."""
    ndim = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, max_side)) for _ in range(ndim)]
    shape[draw(st.integers(0, ndim - 1))] = draw(st.sampled_from(widths))
    dtype = draw(st.sampled_from(dtypes or FLOAT_DTYPES + INT_DTYPES))
    perm = draw(st.permutations(range(ndim)))
    pre = [0] * ndim
    for i, p in enumerate(perm):
        pre[p] = shape[i]
    slices, base_shape = [], []
    for n in pre:
        start, step = draw(st.integers(0, 1)), draw(st.sampled_from([1, 1, 2, -1]))
        base_shape.append(start + n * abs(step) + draw(st.integers(0, 1)))
        if step > 0:
            slices.append(slice(start, start + n * step, step))
        else:
            slices.append(slice(start + n - 1, start - 1 if start else None, -1))
    axis = draw(
        st.one_of(
            st.none(),
            st.integers(-ndim, ndim - 1),
            st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(tuple),
        )
    )
    seed = draw(st.integers(0, 2**32 - 1))
    specials = draw(st.sampled_from([0.0, 0.0, 0.05, 0.3]))
    scale = draw(st.sampled_from([1.0, 5.0, 50.0]))
    base = make_values(np.random.default_rng(seed), tuple(base_shape), dtype, scale, specials)
    return base, tuple(slices), tuple(perm), axis


def build(xp, case):
    """The view described by `case` on the backend `xp` (numpy or cupy)."""
    base, slices, perm, axis = case
    x = xp.asarray(base)[slices].transpose(perm)
    return x, axis
