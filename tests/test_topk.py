"""softmax_topk against NumPy's stable argsort and SciPy's float64 softmax, on the host path and
on the GPU."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cusoftmax
from cusoftmax._accuracy import LOG_TOLERANCE, TOLERANCE
from cusoftmax._args import result_dtype
from _support import (BF16, FLOAT_DTYPES, INT_DTYPES, assert_same_bits, build, make_values,
                      requires_gpu, to_host, views)
from test_family import _on, _values, check, extras, ref_log_softmax, ref_softmax

inf, nan = np.inf, np.nan


def ref_topk(v, axis, k, where=None, log=False, renormalize=False):
    """float64 (values, indices) of the float64 entries `v` (``scale * x`` as the library rounds
    it): ``argsort(-v, kind="stable")[:k]`` over the kept positions of each slice, the rest -1;
    SciPy's softmax (or log_softmax) at those positions, or of the k chosen values."""
    keep = np.ones(v.shape, bool) if where is None else np.broadcast_to(where, v.shape)
    vt, kt = np.moveaxis(v, axis, -1), np.moveaxis(keep, axis, -1)
    idx = np.full(vt.shape[:-1] + (k,), -1, np.int64)
    for r in np.ndindex(vt.shape[:-1]):
        pos = np.flatnonzero(kt[r])
        order = pos[np.argsort(-vt[r][pos], kind="stable")][:k]
        idx[r][:len(order)] = order
    filled = idx >= 0
    safe = np.where(filled, idx, 0)
    fn = ref_log_softmax if log else ref_softmax
    if renormalize:
        y = fn(np.take_along_axis(vt, safe, -1), -1, filled)
        y = np.where(np.any(np.isnan(vt) & kt, axis=-1, keepdims=True), nan, y)
    else:
        y = np.take_along_axis(np.moveaxis(fn(v, axis, where), axis, -1), safe, -1)
    y = np.where(filled, y, -inf if log else 0.0)
    return np.moveaxis(y, -1, axis), np.moveaxis(idx, -1, axis)


def assert_topk(got, x, axis, k, where=None, scale=None, log=False, renormalize=False):
    """`got` is softmax_topk of `x` (any backend): exact indices, values within the bound."""
    dtype = result_dtype(x.dtype)
    values, indices = got
    assert type(values) is type(x) and type(indices) is type(x)
    shape = list(x.shape)
    shape[axis] = k
    assert values.shape == indices.shape == tuple(shape)
    assert values.dtype == dtype and indices.dtype == np.int64
    ref_v, ref_i = ref_topk(_values(x, dtype, scale), axis, k, where, log, renormalize)
    np.testing.assert_array_equal(to_host(indices), ref_i)
    check(values, ref_v, dtype, LOG_TOLERANCE if log else TOLERANCE)


@given(case=views(), data=st.data())
def test_matches_argsort_and_scipy(xp, case, data):
    x, axis = build(xp, case)
    if not isinstance(axis, int):
        axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    ax = axis % x.ndim
    k = data.draw(st.integers(1, x.shape[ax]))
    where, scale = data.draw(extras(x.shape, (ax,)))
    log, renormalize = data.draw(st.booleans()), data.draw(st.booleans())
    before = to_host(x).copy()
    got = cusoftmax.softmax_topk(x, k, axis, log=log, renormalize=renormalize,
                                 where=_on(xp, where), scale=_on(xp, scale))
    assert_topk(got, x, ax, k, where, scale, log, renormalize)
    assert_same_bits(x, before)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES, ids=str)
def test_ties_go_to_the_lower_index(xp, dtype):
    """Integer-valued logits, many equal: the exact order of NumPy's stable argsort, ties at the
    k-th place included, in every dtype."""
    rng = np.random.default_rng(3)
    a = rng.integers(0 if dtype.kind == "u" else -3, 4, size=(6, 40)).astype(dtype)
    x = xp.asarray(a)
    for k in (1, 2, 5, 13, 39, 40):
        values, indices = cusoftmax.softmax_topk(x, k)
        np.testing.assert_array_equal(to_host(indices),
                                      np.argsort(-a.astype(np.float64), 1, kind="stable")[:, :k])
        assert_topk((values, indices), x, 1, k)
    assert_topk(cusoftmax.softmax_topk(x.T, 3, axis=0), x.T, 0, 3)


def test_longdouble_on_the_host():
    """Wider than float64: ordered by the ranks of the values (NaN last, -0.0 tied with 0.0)."""
    a = np.array([[1.0, nan, 3.0, -inf, 3.0, -0.0, 0.0, nan, 2.0]], np.longdouble)
    for k in (1, 4, 9):
        for scale in (None, -1.0):
            values, indices = cusoftmax.softmax_topk(a, k, scale=scale)
            assert values.dtype == np.longdouble
            v = a if scale is None else scale * a
            np.testing.assert_array_equal(indices, np.argsort(-v, 1, kind="stable")[:, :k])
            assert np.isnan(values).all()
    values, indices = cusoftmax.softmax_topk(a[:, 2:7], 3, renormalize=True)
    np.testing.assert_array_equal(indices, [[0, 2, 3]])
    e = np.exp(3.0)
    np.testing.assert_allclose(values.astype(np.float64), [[e, e, 1.0]] / (2 * e + 1), rtol=1e-15)


def test_long_rows_with_ties_at_the_boundary(xp):
    """Rows far longer than k, whose k-th value is shared by hundreds of positions."""
    rng = np.random.default_rng(8)
    a = rng.integers(-2, 3, size=(3, 5001)).astype(np.float32)
    a[1, 4000:] = 7.0
    x = xp.asarray(a)
    for k in (1, 64, 999, 2500):
        for log in (False, True):
            assert_topk(cusoftmax.softmax_topk(x, k, log=log), x, 1, k, log=log)


def test_special_values(xp):
    rows = np.array([[1.0, nan, 3.0, -inf, 3.0, nan, 0.0],   # NaN: NaN values, NaN sorted last
                     [-inf, 0.0, -inf, 1.0, -inf, -inf, -inf],  # -inf entries: 0, after numbers
                     [-inf] * 7,                               # all -inf: NaN, as SciPy
                     [inf, 1.0, inf, 2.0, 0.0, 0.0, 0.0],      # +inf: NaN, as softmax
                     [-0.0, 0.0, -0.0, 0.0, 1.0, 1.0, 1.0]])   # -0.0 ties with 0.0
    x = xp.asarray(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p, i = (to_host(a) for a in cusoftmax.softmax_topk(x, 7))
        lp, _ = (to_host(a) for a in cusoftmax.softmax_topk(x, 7, log=True))
    np.testing.assert_array_equal(i, np.argsort(-rows, 1, kind="stable"))
    np.testing.assert_array_equal(i[0], [2, 4, 0, 6, 3, 1, 5])
    np.testing.assert_array_equal(i[4], [4, 5, 6, 0, 1, 2, 3])
    assert np.isnan(p[[0, 2, 3]]).all() and np.isnan(lp[[0, 2]]).all()
    np.testing.assert_array_equal(lp[3], [nan, nan] + [-inf] * 5)  # as log_softmax
    np.testing.assert_allclose(p[1], [1 / (1 + np.exp(-1)), 1 / (1 + np.e)] + [0] * 5, rtol=1e-15)
    np.testing.assert_array_equal(lp[1, 2:], -inf)
    for log in (False, True):
        for renormalize in (False, True):
            assert_topk(cusoftmax.softmax_topk(x, 3, log=log, renormalize=renormalize), x, 1, 3,
                        log=log, renormalize=renormalize)


def test_masked_slots_hold_zero_and_minus_one(xp):
    rows = np.array([[5.0, 1.0, 2.0, 3.0], [5.0, 1.0, 2.0, 3.0], [nan, 1.0, 2.0, 3.0],
                     [-inf, 1.0, 2.0, 3.0]])
    where = np.array([[True, False, False, True], [False] * 4, [True, True, False, False],
                      [True, False, False, True]])
    x, w = xp.asarray(rows), xp.asarray(where)
    p, i = (to_host(a) for a in cusoftmax.softmax_topk(x, 3, where=w))
    lp, li = (to_host(a) for a in cusoftmax.softmax_topk(x, 3, where=w, log=True,
                                                          renormalize=True))
    np.testing.assert_array_equal(i, [[0, 3, -1], [-1, -1, -1], [1, 0, -1], [3, 0, -1]])
    np.testing.assert_array_equal(li, i)
    np.testing.assert_array_equal(p[:, 2], 0.0)
    np.testing.assert_array_equal(lp[:, 2], -inf)
    np.testing.assert_array_equal(p[1], 0.0)   # a fully masked slice: zeros and -inf, not NaN
    np.testing.assert_array_equal(lp[1], -inf)
    assert np.isnan(p[2, :2]).all() and np.isnan(lp[2, :2]).all()  # a kept NaN: NaN values
    np.testing.assert_array_equal(p[3], [1.0, 0.0, 0.0])  # a kept -inf is chosen, value 0
    np.testing.assert_allclose(np.exp(lp[0, :2]).sum(), 1.0, rtol=1e-15)
    for log in (False, True):
        for renormalize in (False, True):
            assert_topk(cusoftmax.softmax_topk(x, 3, where=w, log=log, renormalize=renormalize),
                        x, 1, 3, where, log=log, renormalize=renormalize)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_values_are_the_family_at_the_chosen_positions(xp, dtype):
    """k = n gives every entry: the family's own values, reordered (bitwise on the host)."""
    rng = np.random.default_rng(6)
    x = xp.asarray(make_values(rng, (4, 9, 5), dtype, 3.0, 0.1))
    where = xp.asarray(rng.random((9, 5)) < 0.8)
    scale = xp.asarray(rng.uniform(-2, 2, (4, 1, 5)))
    for log, fn in ((False, cusoftmax.softmax), (True, cusoftmax.log_softmax)):
        values, indices = cusoftmax.softmax_topk(x, 9, 1, log=log, where=where, scale=scale)
        full = fn(x, 1, where=where, scale=scale)
        kept = to_host(indices) >= 0
        got = np.where(kept, to_host(values), -inf if log else 0.0).astype(values.dtype)
        expect = np.take_along_axis(to_host(full), np.where(kept, to_host(indices), 0), 1)
        expect = np.where(kept, expect, -inf if log else 0.0).astype(values.dtype)
        if xp is np:
            assert_same_bits(got, expect)
        check(got, expect.astype(np.float64), dtype, LOG_TOLERANCE if log else TOLERANCE)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_renormalized_values_sum_to_one(xp, dtype):
    rng = np.random.default_rng(2)
    x = xp.asarray(make_values(rng, (7, 50), dtype))
    p, _ = cusoftmax.softmax_topk(x, 4, renormalize=True)
    lp, _ = cusoftmax.softmax_topk(x, 4, log=True, renormalize=True)
    rtol = 1e-13 if dtype == np.float64 else 2 * TOLERANCE[dtype.name][0]
    np.testing.assert_allclose(to_host(p).astype(np.float64).sum(1), 1.0, rtol=rtol)
    np.testing.assert_allclose(np.exp(to_host(lp).astype(np.float64)).sum(1), 1.0, rtol=4 * rtol)


def test_negative_scale_takes_the_smallest(xp):
    a = np.array([[3.0, -1.0, 2.0, -1.0, 0.5]])
    _, i = cusoftmax.softmax_topk(xp.asarray(a), 3, scale=-2.0)
    np.testing.assert_array_equal(to_host(i), [[1, 3, 4]])
    assert_topk(cusoftmax.softmax_topk(xp.asarray(a), 3, scale=-2.0), xp.asarray(a), 1, 3,
                scale=-2.0)


def test_strided_views_give_the_contiguous_result(xp):
    a = make_values(np.random.default_rng(9), (6, 11, 8), np.dtype(np.float32), 1.0, 0.1)
    x = xp.asarray(a)[::-1, 1::2].transpose(2, 0, 1)
    for k in (1, 3, 6):
        got = cusoftmax.softmax_topk(x, k, axis=1)
        same = cusoftmax.softmax_topk(xp.ascontiguousarray(x), k, axis=1)
        for g, s in zip(got, same):
            assert_same_bits(g, s)
        assert_topk(got, x, 1, k)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_out_pair(xp, dtype):
    x = xp.asarray(make_values(np.random.default_rng(4), (5, 9), dtype))
    for kw in ({}, {"log": True, "renormalize": True, "scale": 0.5}):
        expect = cusoftmax.softmax_topk(x, 4, **kw)
        out = (xp.full((5, 4), np.nan, dtype), xp.zeros((5, 4), np.int64))
        assert cusoftmax.softmax_topk(x, 4, out=out, **kw) is out
        for o, e in zip(out, expect):
            assert_same_bits(o, e)


def test_other_axis_of_length_zero(xp):
    values, indices = cusoftmax.softmax_topk(xp.ones((0, 4), np.float16), 2)
    assert values.shape == indices.shape == (0, 2)
    assert values.dtype == np.float16 and indices.dtype == np.int64


def _bad_calls(xp):
    """(function of out, error) for arguments refused before anything is written."""
    x = xp.ones((3, 4), np.float32)
    v, i = xp.zeros((3, 2), np.float32), xp.zeros((3, 2), np.int64)
    topk = cusoftmax.softmax_topk
    return [
        (lambda out: topk(x, 5, out=out), ValueError),
        (lambda out: topk(x, 0, out=out), ValueError),
        (lambda out: topk(x, -1, out=out), ValueError),
        (lambda out: topk(x, True, out=out), TypeError),
        (lambda out: topk(x, 2.0, out=out), TypeError),
        (lambda out: topk(x, 2, axis=(1,), out=out), TypeError),
        (lambda out: topk(x, 2, axis=None, out=out), TypeError),
        (lambda out: topk(x, 2, axis=2, out=out), np.exceptions.AxisError),
        (lambda out: topk(x, 2, axis=True, out=out), TypeError),
        (lambda out: topk(x, 2, out=(v, i.astype(np.int32))), TypeError),
        (lambda out: topk(x, 2, out=(v.astype(np.float64), i)), TypeError),
        (lambda out: topk(x, 2, out=(xp.zeros((3, 3), np.float32), i)), ValueError),
        (lambda out: topk(x, 2, out=(v, xp.zeros((2, 2), np.int64))), ValueError),
        (lambda out: topk(x, 2, out=v), TypeError),
        (lambda out: topk(x, 2, out=out + (i,)), TypeError),
        (lambda out: topk(x, 2, where=xp.ones(3, bool), out=out), ValueError),
        (lambda out: topk(x, 2, where=xp.ones(4), out=out), TypeError),
        (lambda out: topk(x, 2, scale=xp.ones((3, 4)), out=out), ValueError),
        (lambda out: topk(x, 2, scale=True, out=out), TypeError),
        (lambda out: topk(x.astype(np.complex64), 2, out=out), TypeError),
        (lambda out: topk(xp.ones((3, 0)), 1), ValueError),
        (lambda out: topk(xp.asarray(1.0), 1), np.exceptions.AxisError),
    ], (v, i)


def test_bad_input_raises_before_anything_is_written(xp):
    calls, out = _bad_calls(xp)
    for call, err in calls:
        with pytest.raises(err):
            call(out)
        assert not to_host(out[0]).any() and not to_host(out[1]).any()


DASK_LAYOUTS = {  # id: (chunks of a (5, 37) array, axis)
    "inside-one-chunk": ((2, 37), 1),
    "split": ((2, 8), 1),
    "uneven-with-a-one-element-chunk": (((2, 3), (10, 1, 20, 6)), 1),
    "axis0-split": (((1, 3, 1), 37), 0),
}


@pytest.mark.parametrize("layout", DASK_LAYOUTS.values(), ids=DASK_LAYOUTS.keys())
def test_dask_arrays_give_the_arrays_result(xp, layout):
    """Dask arrays of NumPy or CuPy chunks, slices inside one chunk or split over several: the
    same indices as the array itself (ties across chunks to the lower position, NaN and -inf
    rows, masks in other chunks, a scale a slice, every flag), values within 1e-12 (float64),
    lazily."""
    da = pytest.importorskip("dask.array")
    import dask

    chunks, axis = layout
    rng = np.random.default_rng(17)
    a = rng.integers(-3, 4, (5, 37)).astype(np.float64)  # ties everywhere
    a[0, 30], a[1, 5], a[2], a[3, ::3] = inf, nan, -inf, -inf
    where = rng.random((5, 37)) < 0.7
    where[4] = False  # a fully masked slice
    scale = rng.uniform(0.5, 2.0, (5, 1) if axis == 1 else (1, 37))
    x = da.from_array(xp.asarray(a), chunks=chunks)
    w = da.from_array(xp.asarray(where), chunks=(3, 10))
    for extra in ({}, {"where": w}, {"scale": scale}, {"where": w, "scale": scale, "log": True},
                  {"renormalize": True}, {"renormalize": True, "log": True, "where": w}):
        for k in (1, 5, a.shape[axis]):
            got = cusoftmax.softmax_topk(x, k, axis=axis, **extra)
            assert all(isinstance(g, da.Array) for g in got)
            values, indices = (to_host(g) for g in dask.compute(*got, scheduler="threads"))
            plain = {key: (where if key == "where" else v) for key, v in extra.items()}
            ref_v, ref_i = cusoftmax.softmax_topk(a, k, axis=axis, **plain)
            np.testing.assert_array_equal(indices, ref_i)
            np.testing.assert_allclose(values, ref_v, rtol=1e-12, atol=1e-300, equal_nan=True)


def test_dask_chunks_keep_their_type_and_errors_are_eager():
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.zeros((4, 6), np.float32), chunks=(2, 3))
    values, indices = cusoftmax.softmax_topk(x, 2)
    assert values.dtype == np.float32 and indices.dtype == np.int64
    assert values.chunks == indices.chunks == ((2, 2), (2,))
    assert isinstance(values._meta, np.ndarray)
    with pytest.raises(ValueError, match="between 1"):
        cusoftmax.softmax_topk(x, 7)
    with pytest.raises(TypeError, match="one axis"):
        cusoftmax.softmax_topk(x, 2, axis=(0, 1))
    with pytest.raises(TypeError, match="out="):
        cusoftmax.softmax_topk(x, 2, out=(np.zeros((4, 2)), np.zeros((4, 2), np.int64)))


@requires_gpu
def test_torch_pair_in_and_out():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    x = (torch.randn(9, 300, device="cuda") * 4).to(torch.bfloat16)
    values, indices = cusoftmax.softmax_topk(x, 8, log=True)
    assert isinstance(values, torch.Tensor) and values.device == x.device
    assert values.dtype == torch.bfloat16 and indices.dtype == torch.int64
    a = x.float().cpu().numpy()  # bfloat16 values are exact in float32
    ref_v, ref_i = ref_topk(a.astype(np.float64), 1, 8, log=True)
    np.testing.assert_array_equal(indices.cpu().numpy(), ref_i)
    check(values.float().cpu().numpy(), ref_v, BF16, LOG_TOLERANCE)
    out = (torch.empty_like(values), torch.empty_like(indices))
    assert cusoftmax.softmax_topk(x, 8, log=True, out=out) is out
    assert torch.equal(out[0], values) and torch.equal(out[1], indices)


# Tunings that send every call to one topk kernel (planning/topk.py): the default order,
# topk_block alone, topk_block with rows cut in many chunks (the workspace merge).
TOPK_KERNELS = {"default": {}, "block": {"topk_lane_max_k": 0},
                "chunks": {"topk_lane_max_k": 0, "topk_min_chunk": 64, "topk_items_per_sm": 10**6}}


def _rows(rng, rows, n, kind):
    if kind == "normal":
        return rng.standard_normal((rows, n)) * 3
    if kind == "ties":  # the k-th value shared by many positions
        return rng.integers(-3, 4, size=(rows, n)).astype(np.float64)
    if kind == "ascending":  # every element beats the warps' bounds: merges all the way
        return np.broadcast_to(np.arange(n, dtype=np.float64) / n, (rows, n)).copy()
    a = rng.standard_normal((rows, n))  # special rows among ordinary ones
    a[0, n // 3] = nan
    a[min(1, rows - 1), ::2] = -inf
    a[min(2, rows - 1), n - 1] = inf
    a[min(3, rows - 1)] = -inf
    return a


@requires_gpu
@pytest.mark.parametrize("kernels", sorted(TOPK_KERNELS))
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16), BF16], ids=str)
def test_every_topk_kernel_matches_argsort_and_scipy(kernels, dtype):
    """Each kernel of the topk family (forced by its tuning) on short, long and very long rows,
    k from 1 to 256 and every flag: indices exactly NumPy's, values within the bounds; the same
    bits on a second call."""
    import cupy

    from cusoftmax import planning

    rng = np.random.default_rng(21)
    tuning = planning.TUNING.vary(**TOPK_KERNELS[kernels])
    shapes = [(5, 7), (33, 64), (300, 256), (4, 257), (6, 3001), (2, 50257), (1, 70000)]
    with planning.use(tuning):
        for rows, n in shapes:
            for kind in ("normal", "ties", "ascending", "special"):
                a = _rows(rng, rows, n, kind).astype(dtype)
                x = cupy.asarray(a)
                for k in sorted({1, 3, 8, 32, 33, 64, 200, 256, n} & set(range(1, min(n, 256) + 1))):
                    plan = planning.topk_plan(rows, n, n, k, False, dtype.itemsize, x.data.ptr % 16,
                                              planning.device_limits(x.device.id))
                    assert plan is not None
                    if kernels != "default":
                        assert plan.kernel == "topk_block"
                    if kernels == "chunks" and n >= 3001:
                        assert plan.chunks > 1
                    log, renormalize = bool(k % 2), k in (3, 64, n)
                    got = cusoftmax.softmax_topk(x, k, log=log, renormalize=renormalize)
                    assert_topk(got, x, 1, k, log=log, renormalize=renormalize)
                    again = cusoftmax.softmax_topk(x, k, log=log, renormalize=renormalize)
                    assert_same_bits(again[0], to_host(got[0]))
                    np.testing.assert_array_equal(to_host(again[1]), to_host(got[1]))


@requires_gpu
def test_topk_kernels_on_strided_rows_and_other_axes():
    """Rows at a stride are read in place, an axis other than the last through a copy: the
    results of the contiguous rows."""
    import cupy

    rng = np.random.default_rng(5)
    a = cupy.asarray(rng.standard_normal((40, 3000)).astype(np.float32))
    for view, axis in ((a[:, 7:2007], 1), (a[::3, :], 1), (a[:, :64].T, 0), (a[:, 1:100].T, 0)):
        for k in (1, 5, 40):
            assert_topk(cusoftmax.softmax_topk(view, k, axis=axis), view, axis, k)


@requires_gpu
def test_topk_fast_path_gives_the_first_calls_result():
    """A second call like the first is launched from the fast path's table, with the same bits;
    a call that differs in k, a flag or the type of k misses it."""
    import cupy

    from cusoftmax import _engine

    x = cupy.asarray(np.random.default_rng(2).standard_normal((6, 300)).astype(np.float32))
    first = cusoftmax.softmax_topk(x, 5, renormalize=True)
    assert _engine._fast_key(x, -1, ("softmax_topk", 5, int, False, True)) in _engine._fast
    again = cusoftmax.softmax_topk(x, 5, renormalize=True)
    assert again[0] is not first[0]
    assert_same_bits(again[0], to_host(first[0]))
    np.testing.assert_array_equal(to_host(again[1]), to_host(first[1]))
    assert_topk(cusoftmax.softmax_topk(x, 5), x, 1, 5)
    assert_topk(cusoftmax.softmax_topk(x, 5, log=True), x, 1, 5, log=True)
    with pytest.raises(TypeError, match="bool"):
        cusoftmax.softmax_topk(x, True)
