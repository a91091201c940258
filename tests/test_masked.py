"""``where=`` in the kernels (the Masked load: the registers family, and the block and cluster
kernels with the keep bytes staged beside the row): rows of up to what the cluster holds with a
mask of x's shape, one broadcast along the rows ((n,), (batch, 1, ..., n)) or a row mask;
left-out places exactly 0 (softmax) or -inf (log_softmax), whole rows left out included; the
rest within the bounds against SciPy on the kept entries. Masks the kernels cannot read, and
longer rows, go to array operations (tests/test_family.py)."""


import numpy as np
import pytest
import scipy.special

import cusoftmax
from cusoftmax import _args, _engine, planning
from cusoftmax._accuracy import LOG_TOLERANCE, TOLERANCE, violations
from _support import BF16, assert_same_bits, requires_gpu, to_host


@requires_gpu
def test_mask_rows_reads_broadcast_masks():
    import cupy

    a = cupy.zeros((3, 1, 1, 5), dtype=bool)
    ptr = a.data.ptr
    assert _engine.mask_rows(a, (3, 4, 2, 5)) == (ptr, 8, 5, 1)
    assert _engine.mask_rows(a[0, 0, 0], (3, 4, 2, 5)) == (ptr, 24, 0, 1)
    full = cupy.zeros((3, 4, 5), dtype=bool)
    assert _engine.mask_rows(full, (3, 4, 5)) == (full.data.ptr, 1, 5, 1)
    assert _engine.mask_rows(cupy.zeros((3, 1, 5), dtype=bool)[:, :, ::-1], (3, 4, 5))[3] == -1
    assert _engine.mask_rows(cupy.zeros((3, 1, 2, 5), dtype=bool), (3, 4, 2, 5)) is None  # varies after a broadcast axis
    assert _engine.mask_rows(cupy.zeros((1, 4, 1), dtype=bool), (3, 4, 5)) is None  # one a row, broadcast over columns


def _check(y, x, where, op, dtype):
    compute = np.float64 if dtype == np.float64 else np.float32
    v = to_host(x).astype(compute).astype(np.float64)
    w = np.broadcast_to(to_host(where), v.shape)
    with np.errstate(all="ignore"):
        ref = getattr(scipy.special, op)(np.where(w, v, -np.inf), axis=-1)
    gone = 0.0 if op == "softmax" else -np.inf
    ref = np.where(w, ref, gone)
    got = to_host(y)
    assert np.all(got[~w] == gone), "a left-out place is not exactly 0 / -inf"
    table = TOLERANCE if op == "softmax" else LOG_TOLERANCE
    msg = violations(got, ref, np.dtype(dtype).name, table)
    assert msg is None, msg


# The default's families, then block and cluster at every width (no registers rows: where a
# cluster holds the row, or a block below cluster_min_bytes).
STAGED = planning.TUNING.vary(masked_registers_max_cols=0)


@requires_gpu
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64], ids=str)
@pytest.mark.parametrize("n", [1, 7, 32, 100, 513, 1000, 4096, 16384, 16385, 32768, 65536, 100003])
@pytest.mark.parametrize("tuning", ["default", "staged"])
def test_masks_in_the_kernels(op, dtype, n, tuning):
    if op == "log_softmax" and dtype == np.float64:
        pytest.skip("float64 log_softmax is computed by array operations")
    if tuning == "staged" and n == 1:
        pytest.skip("rows of one element stay in registers")
    with planning.use(STAGED if tuning == "staged" else planning.TUNING):
        _masks_in_the_kernels(op, dtype, n, tuning)


def _masks_in_the_kernels(op, dtype, n, tuning):
    import cupy

    rng = np.random.default_rng(n)
    b, h = 3, 4
    a = (rng.standard_normal((b, h, n)) * 4).astype(dtype)
    a[0, 1, n // 2] = np.inf
    a[1, 2, :] = -np.inf
    a[2, 3, n // 3] = np.nan
    x = cupy.asarray(a)
    strides = _engine._elem_strides(x)
    kernel = _engine._plan(x.shape, strides, strides, (2,), x.itemsize, (0, 0), x.device.id, None,
                        planning.active(), op, "Masked")[1].kernel
    staged = tuning == "staged" or n > planning.TUNING.masked.registers_max_cols
    assert kernel in (("block", "cluster") if staged else ("registers", "short_spans")), kernel
    masks = {"full": rng.random((b, h, n)) < 0.6, "padding": rng.random((b, 1, n)) < 0.7,
             "columns": rng.random(n) < 0.5,
             # rows one byte off their alignment: the keep bytes read one by one
             "unaligned": (rng.random((b, h, n + 1)) < 0.6)[..., 1:]}
    masks["full"][0, 0] = False  # a whole row left out
    masks["full"][1, 2, : n // 2 + 1] = False  # a row of -inf, partly left out
    for name, mask in masks.items():
        m = cupy.asarray(np.ascontiguousarray(mask)) if name != "unaligned" else cupy.asarray(
            np.ascontiguousarray(np.pad(mask, ((0, 0), (0, 0), (1, 0)))))[..., 1:]
        c = _args.prepare(x, -1, None, None, op)
        y = _engine.masked(c, m, op)
        assert y is not None, name  # the kernels took it
        _check(y, x, mask, op, dtype)
        public = getattr(cusoftmax, op)(x, where=m)
        assert_same_bits(public, y)
        out = cupy.full(x.shape, np.nan, dtype)
        assert getattr(cusoftmax, op)(x, where=m, out=out) is out
        assert_same_bits(out, y)


@requires_gpu
def test_masks_the_kernels_do_not_take_run_as_array_operations():
    import cupy

    rng = np.random.default_rng(3)
    x = cupy.asarray(rng.standard_normal((2, 3, 4, 100)).astype(np.float32))
    cases = [(x[..., ::2], rng.random((2, 1, 1, 50)) < 0.5, -1),  # x not C-contiguous
             (x, rng.random((2, 1, 4, 100)) < 0.5, -1),  # varies after a broadcast axis
             (x, rng.random((2, 3, 4, 100)) < 0.5, 2),  # not the last axis
             # longer than a cluster holds with its keep bytes (a spill's plan)
             (cupy.asarray(rng.standard_normal((2, 2**20)).astype(np.float32)), rng.random(2**20) < 0.5, -1)]
    for xv, mask, axis in cases:
        where = cupy.asarray(mask)
        c = _args.prepare(xv, axis, None, None, "softmax")
        assert _engine.masked(c, where, "softmax") is None
        y = cusoftmax.softmax(xv, axis=axis, where=where)
        w = np.broadcast_to(mask, xv.shape)
        with np.errstate(all="ignore"):
            ref = scipy.special.softmax(np.where(w, to_host(xv).astype(np.float64), -np.inf), axis=axis)
        msg = violations(to_host(y), np.where(w, ref, 0.0), "float32", TOLERANCE)
        assert msg is None, msg
