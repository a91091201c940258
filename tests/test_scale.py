"""``scale=`` in the kernels (the Scaled load): on every kernel path, float32 results have the
bits of the same call on the input scaled first (``float32(scale) * x``, as the kernels load
it, on the same plan); float16, bfloat16 and float64 are held to the accuracy bounds. Scales
the kernels do not take (zero, negative, non-finite in the compute type, one a slice) go to
array operations, which the family's tests check against SciPy."""

import dataclasses

import numpy as np
import pytest
import scipy.special

import cusoftmax
from cusoftmax import _engine, planning
from cusoftmax._accuracy import LOG_TOLERANCE, TOLERANCE, violations
from _support import BF16, assert_same_bits, requires_gpu, to_host

S = 0.3712  # not a power of two: the product rounds


@pytest.mark.parametrize("scale, dtype, fused", [
    (0.5, np.float32, True), (3, np.float16, True), (np.float32(0.125), np.float64, True),
    (np.float64(1e-50), np.float32, False),  # 0 in float32: the padding would be NaN
    (np.float64(1e-50), np.float64, True), (1e300, np.float32, False), (1e300, np.float64, True),
    (2.0**-150, np.float32, False), (np.nextafter(2.0**-150, 1), np.float32, True),
    (float(np.finfo(np.float32).max) + 2.0**103, np.float32, False),
    (np.nextafter(float(np.finfo(np.float32).max) + 2.0**103, 0), np.float32, True),
    (0.0, np.float32, False), (-1.0, np.float32, False), (np.inf, np.float64, False),
    (np.nan, np.float32, False), (True, np.float32, False), (np.ones(1), np.float32, False),
    (10**400, np.float64, False), (2, np.float64, True)])
def test_which_scales_the_kernels_take(scale, dtype, fused):
    got = _engine.fused_scale(scale, np.dtype(dtype))
    assert (got is not None) == fused
    if fused:
        assert got == float(scale)


def test_the_bounds_are_float32s_rounding():
    import warnings

    for scale in (2.0**-150, np.nextafter(2.0**-150, 1), float(np.finfo(np.float32).max) + 2.0**103,
                  np.nextafter(float(np.finfo(np.float32).max) + 2.0**103, 0)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            v = np.float32(scale)
        assert (_engine.fused_scale(scale, np.dtype(np.float16)) is not None) == (0 < v < np.inf)


def test_the_load_word_is_the_scales_bits():
    from cusoftmax._kernels import load_word

    assert load_word("Plain") == 0
    assert np.int64(load_word("Scaled", S)).view(np.float64) == S


def test_plans_differ_only_in_the_load():
    from cusoftmax._layout import Layout

    limits = planning.Limits(132, 232448, (9, 0), 233472)
    layout = Layout(64, 3000, 1, (3000, 1), (3000, 1))
    plain = planning.plan(layout, 4, (0, 0), limits, op="log_softmax")
    scaled = planning.plan(layout, 4, (0, 0), limits, op="log_softmax", load="Scaled")
    assert scaled == dataclasses.replace(plain, ops=("Scaled", "LogSoftmax"))
    with pytest.raises(ValueError, match="takes no Scaled load"):
        planning.ops_of("softmax_vjp", "Scaled")


# ---- GPU: every kernel path

ROW_METHODS = ("registers", "flat", "tiles", "block", "cluster", "grid", "online")
WIDTHS = (1, 3, 33, 100, 1000, 3001, 20000, 70001, 300000)


def _rows(rng, cols, dtype):
    """Rows of `cols` values, a few -inf among them, a row of only -inf and one with +inf and
    NaN where there is room."""
    rows = max(2, min(64, 2**17 // cols))
    a = rng.standard_normal((rows, cols)) * 4
    a[rng.random(a.shape) < 0.05] = -np.inf
    if rows >= 4:
        a[1] = -np.inf
        a[2, cols // 2] = np.inf
        a[3, cols // 3] = np.nan
    return a.astype(dtype)


def _runnable(method, shape, axis, dtype):
    import cupy

    from cusoftmax._layout import collapse

    x = cupy.empty(shape, dtype)
    strides = tuple(s // x.itemsize for s in x.strides)
    layout = collapse(shape, strides, strides, (axis % len(shape),))
    try:
        planning.plan(layout, x.itemsize, (0, 0), planning.device_limits(x.device.id), method)
    except ValueError:
        return False
    return True


def _bounds(y, x, axis, dtype, op):
    compute = np.float64 if dtype == np.float64 else np.float32
    v = (to_host(x).astype(compute) * compute(S)).astype(np.float64)
    with np.errstate(all="ignore"):
        ref = getattr(scipy.special, op)(v, axis=axis)
    table = TOLERANCE if op == "softmax" else LOG_TOLERANCE
    msg = violations(to_host(y), ref, np.dtype(dtype).name, table)
    assert msg is None, msg


@requires_gpu
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64], ids=str)
def test_every_row_kernel_applies_the_scale(op, dtype):
    import cupy

    fn = getattr(cusoftmax, op)
    if op == "log_softmax" and dtype == np.float64:
        pytest.skip("float64 log_softmax is computed by array operations")
    rng = np.random.default_rng(5)
    for cols in WIDTHS:
        a = _rows(rng, cols, dtype)
        x = cupy.asarray(a)
        pre = cupy.asarray(a * np.float32(S)) if dtype == np.float32 else None
        for method in (None, *ROW_METHODS):
            if not _runnable(method, a.shape, -1, dtype):
                continue
            y = cupy.full(a.shape, np.nan, dtype)
            assert fn(x, scale=S, out=y, method=method) is y
            if pre is not None:
                assert_same_bits(y, fn(pre, method=method))
            else:
                _bounds(y, x, -1, dtype, op)
        assert_same_bits(x, a)


@requires_gpu
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=str)
@pytest.mark.parametrize("shape", [(4096, 8), (700, 3, 64), (33, 4000)])
def test_strided_axis_kernels_apply_the_scale(op, dtype, shape):
    import cupy

    fn = getattr(cusoftmax, op)
    rng = np.random.default_rng(6)
    a = rng.standard_normal(shape).astype(dtype) * 3
    a[5] = -np.inf
    x = cupy.asarray(a)
    for method in (None, "columns", "slab", "online"):
        if not _runnable(method, shape, 0, dtype):
            continue
        y = fn(x, axis=0, scale=S, method=method)
        if dtype == np.float32:
            assert_same_bits(y, fn(cupy.asarray(a * np.float32(S)), axis=0, method=method))
        else:
            _bounds(y, x, 0, dtype, op)


@requires_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=str)
@pytest.mark.parametrize("shape, axis", [((300, 40), -1), ((64, 5000), -1), ((3, 2**20 + 3), -1),
                                         ((5000, 24), 0), ((6, 7, 8), (0, 2)), ((999,), None)])
def test_logsumexp_kernels_apply_the_scale(dtype, shape, axis):
    import cupy

    rng = np.random.default_rng(7)
    a = (rng.standard_normal(shape) * 5).astype(dtype)
    a.reshape(-1)[::97] = -np.inf
    x = cupy.asarray(a)
    y = cusoftmax.logsumexp(x, axis=axis, scale=S)
    compute = np.float64 if dtype == np.float64 else np.float32
    v = a.astype(compute) * compute(S)
    if dtype != np.float16:
        assert_same_bits(y, cusoftmax.logsumexp(cupy.asarray(v.astype(dtype)), axis=axis))
    with np.errstate(all="ignore"):
        ref = scipy.special.logsumexp(v.astype(np.float64), axis=axis)
    msg = violations(np.atleast_1d(to_host(y)), np.atleast_1d(ref), np.dtype(dtype).name, LOG_TOLERANCE)
    assert msg is None, msg


@requires_gpu
@pytest.mark.parametrize("kernels", ["default", "block", "chunks"])
@pytest.mark.parametrize("log, renormalize", [(False, False), (True, False), (False, True)])
def test_topk_kernels_apply_the_scale(kernels, log, renormalize):
    import cupy

    from test_topk import TOPK_KERNELS

    rng = np.random.default_rng(8)
    tuning = planning.TUNING.vary(**TOPK_KERNELS[kernels])
    with planning.use(tuning):
        for rows, n, k in ((33, 64, 8), (300, 256, 3), (6, 3001, 64), (2, 50257, 256), (1, 70000, 16)):
            a = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
            a[0, :: 7] = -np.inf
            x, pre = cupy.asarray(a), cupy.asarray(a * np.float32(S))
            got = cusoftmax.softmax_topk(x, k, log=log, renormalize=renormalize, scale=S)
            want = cusoftmax.softmax_topk(pre, k, log=log, renormalize=renormalize)
            assert_same_bits(got[0], want[0])
            assert_same_bits(got[1], want[1])


@requires_gpu
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_the_fast_path_takes_each_calls_scale(op):
    """Repeated calls (the fast path after the first) write each call's own scale."""
    import cupy

    fn = getattr(cusoftmax, op)
    a = np.random.default_rng(9).standard_normal((4, 256)).astype(np.float32)
    x = cupy.asarray(a)
    for scale in (0.5, 0.5, np.float32(2.0), 3, 0.5):
        assert_same_bits(fn(x, scale=scale), fn(cupy.asarray(a * np.float32(scale))))
    np.testing.assert_allclose(to_host(fn(x, scale=-1.0)), to_host(fn(cupy.asarray(-a))), rtol=1e-5,
                               atol=1e-6)  # array operations
    assert_same_bits(fn(x), fn(cupy.asarray(a)))
