"""The segment functions against SciPy's float64 softmax, log_softmax and logsumexp of each
segment taken alone (and the VJP formulas), on the host; the GPU's results against the host's."""

import doctest
import warnings

import numpy as np
import pytest
import scipy.special
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.exceptions import AxisError

import cusoftmax
from cusoftmax import _segment
from cusoftmax._accuracy import LOG_TOLERANCE, TOLERANCE, VJP_TOLERANCE
from cusoftmax.planning import segment as plans
from _support import BF16, assert_same_bits, requires_gpu, to_host
from test_family import check

inf, nan = np.inf, np.nan
FORWARD = {"softmax": (cusoftmax.segment_softmax, TOLERANCE),
           "log_softmax": (cusoftmax.segment_log_softmax, LOG_TOLERANCE)}


def members(ids=None, offsets=None, count=None, n=0):
    """The positions of each segment (a list of index arrays), from ids or offsets."""
    if offsets is not None:
        return [np.arange(offsets[i], offsets[i + 1]) for i in range(len(offsets) - 1)]
    count = (max(ids.max() + 1, 0) if ids.size else 0) if count is None else count
    return [np.flatnonzero(ids == i) for i in range(count)]


def ref_segments(op, v, groups, where=None, scale=None):
    """float64 SciPy of each segment alone along axis 0 of `v` (the values as the library rounds
    them); positions of no segment (and masked ones) 0 or -inf; logsumexp: one row a segment."""
    mask = np.ones(v.shape, bool) if where is None else np.broadcast_to(where, v.shape)
    if op == "logsumexp":
        res = np.full((len(groups),) + v.shape[1:], -inf)
    else:
        res = np.full(v.shape, 0.0 if op == "softmax" else -inf)
    with np.errstate(all="ignore"):
        for i, pos in enumerate(groups):
            seg = v[pos] * (1.0 if scale is None else np.float64(np.broadcast_to(
                scale, res.shape if op == "logsumexp" else (len(groups),) + v.shape[1:])[i]))
            keep = mask[pos]
            if op == "logsumexp":
                if len(pos):
                    res[i] = scipy.special.logsumexp(np.where(keep, seg, -inf), axis=0,
                                                     b=keep.astype(float))
                continue
            if not len(pos):
                continue
            fn = scipy.special.softmax if op == "softmax" else scipy.special.log_softmax
            y = fn(np.where(keep, seg, -inf), axis=0)
            res[pos] = np.where(keep, y, 0.0 if op == "softmax" else -inf)
    return res


@st.composite
def segment_cases(draw):
    """(x, how the segments are given, the groups, feature shape) with power-law-ish lengths,
    empty segments, out-of-range ids, unsorted ids and special values."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    count = draw(st.integers(0, 12))
    lengths = [int(rng.zipf(1.6)) % 40 if rng.random() < 0.85 else 0 for _ in range(count)]
    n_in = sum(lengths)
    before, after = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    n = n_in + before + after
    features = draw(st.sampled_from([(), (3,), (2, 2)]))
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    x = rng.normal(0, 4, (n,) + features).astype(dtype)
    if draw(st.booleans()) and x.size:
        flat = x.reshape(-1)
        for value in draw(st.lists(st.sampled_from([inf, -inf, nan]), max_size=3)):
            flat[rng.integers(flat.size)] = value
    if draw(st.booleans()):  # CSR offsets, positions before and after belonging to none
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64) + before
        return x, dict(offsets=offsets), members(offsets=offsets), features
    ids = np.concatenate([np.repeat(np.arange(count), lengths),
                          rng.choice([-1, -5, count, count + 3], before + after)]).astype(np.int64)
    if draw(st.booleans()):
        ids = rng.permutation(ids)
    given_count = draw(st.sampled_from([count, None]))
    groups = members(ids, count=given_count)
    return x, dict(segment_ids=ids, num_segments=given_count), groups, features


@settings(max_examples=60, deadline=None)
@given(case=segment_cases(), data=st.data())
def test_each_segment_is_the_family_on_it(case, data):
    x, how, groups, features = case
    where = data.draw(st.sampled_from([None, "mask"]))
    if where == "mask":
        where = np.random.default_rng(len(x)).random(x.shape) < 0.7
    before = x.copy()
    for op, (fn, table) in FORWARD.items():
        y = fn(x, **how, where=where)
        assert y.shape == x.shape and y.dtype == x.dtype
        check(y, ref_segments(op, x.astype(np.float64), groups, where), x.dtype, table)
    lse = cusoftmax.segment_logsumexp(x, **how, where=where)
    assert lse.shape == (len(groups),) + features and lse.dtype == x.dtype
    check(lse, ref_segments("logsumexp", x.astype(np.float64), groups, where), x.dtype,
          LOG_TOLERANCE)
    assert_same_bits(x, before)


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp"])
def test_scale_scalar_and_one_a_segment(op):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(9, 2))
    ids = np.array([0, 0, 1, 1, 1, 3, 3, 3, 3])
    groups = members(ids)
    fn = {"logsumexp": cusoftmax.segment_logsumexp, **{k: v[0] for k, v in FORWARD.items()}}[op]
    table = TOLERANCE if op == "softmax" else LOG_TOLERANCE
    for scale in (2.5, np.array([1.0, 2.0, 3.0, 0.5])[:, None], np.array([[0.5, 2.0]])):
        check(fn(x, ids, scale=scale), ref_segments(op, x, groups, scale=scale), x.dtype, table)
    with pytest.raises(ValueError, match="one value a segment"):
        fn(x, ids, scale=np.ones((9, 2)))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_other_axes_are_batched(axis):
    """A segment along `axis` of a 3-d array is the same as along axis 0 of its moved copy."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5, 6, 7))
    n = x.shape[axis]
    ids = rng.integers(-1, 3, n)
    moved = np.moveaxis(x, axis, 0)
    for fn in (cusoftmax.segment_softmax, cusoftmax.segment_log_softmax):
        np.testing.assert_array_equal(np.moveaxis(fn(x, ids, axis=axis), axis, 0),
                                      fn(moved, ids))
    lse = cusoftmax.segment_logsumexp(x, ids, axis=axis, num_segments=4)
    assert lse.shape[axis % 3] == 4
    np.testing.assert_array_equal(np.moveaxis(lse, axis, 0),
                                  cusoftmax.segment_logsumexp(moved, ids, num_segments=4))


def test_special_values_follow_softmax():
    x = np.array([1.0, inf, 0.0, -inf, -inf, nan, 1.0, -inf, 2.0, 5.0])
    off = np.array([0, 3, 5, 7, 9, 10])  # [1, inf, 0] [-inf, -inf] [nan, 1] [-inf, 2] [5]
    for op, (fn, _) in FORWARD.items():
        y = fn(x, offsets=off)
        family = getattr(cusoftmax, op)
        want = np.concatenate([family(x[a:b]) for a, b in zip(off[:-1], off[1:])])
        np.testing.assert_allclose(y, want, rtol=1e-15, atol=0)  # NaN and inf where they are
    np.testing.assert_allclose(cusoftmax.segment_logsumexp(x, offsets=off),
                               [cusoftmax.logsumexp(x[a:b]) for a, b in zip(off[:-1], off[1:])],
                               rtol=1e-15, atol=0)


def test_empty_and_missing_segments():
    x = np.array([1.0, 2.0, 3.0])
    ids = np.array([2, 2, 7])
    assert np.array_equal(cusoftmax.segment_logsumexp(x, ids, num_segments=4),
                          [-inf, -inf, np.logaddexp(1.0, 2.0), -inf])
    np.testing.assert_allclose(cusoftmax.segment_softmax(x, ids, num_segments=4),
                               [*cusoftmax.softmax(x[:2]), 0], rtol=1e-15, atol=0)
    assert np.array_equal(cusoftmax.segment_log_softmax(x, ids, num_segments=0), [-inf] * 3)
    assert cusoftmax.segment_logsumexp(x, ids, num_segments=0).shape == (0,)
    empty = np.zeros((0, 2))
    assert cusoftmax.segment_softmax(empty, np.zeros(0, int)).shape == (0, 2)
    assert np.array_equal(cusoftmax.segment_logsumexp(empty, offsets=[0, 0, 0]),
                          np.full((2, 2), -inf))
    # a fully masked segment: zeros, as softmax's fully masked slice
    y = cusoftmax.segment_softmax(x, offsets=[0, 2, 3], where=np.array([False, False, True]))
    assert np.array_equal(y, [0.0, 0.0, 1.0])


@pytest.mark.parametrize("log", [False, True])
def test_vjps_match_the_formula(log):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(30, 3))
    ids = rng.permutation(rng.integers(-1, 6, 30))
    where = rng.random(x.shape) < 0.8
    fwd = cusoftmax.segment_log_softmax if log else cusoftmax.segment_softmax
    vjp = cusoftmax.segment_log_softmax_vjp if log else cusoftmax.segment_softmax_vjp
    y = fwd(x, ids, where=where)
    dy = rng.normal(size=x.shape)
    dx = vjp(y, dy, ids, where=where)
    want = np.zeros_like(x)
    for pos in members(ids):
        yy, g, keep = y[pos], dy[pos], where[pos]
        if log:
            total = np.sum(np.where(keep, g, 0), axis=0)
            want[pos] = np.where(keep, g - np.exp(yy) * total, 0)
        else:
            total = np.sum(np.where(keep, g * yy, 0), axis=0)
            want[pos] = np.where(keep, yy * (g - total), 0)
    check(dx, want, x.dtype, VJP_TOLERANCE, of=np.abs(dy) + np.abs(want))


def test_vjp_is_the_gradient():
    """Central differences of sum(dy * segment_softmax(x)) against the VJP."""
    rng = np.random.default_rng(4)
    x, dy = rng.normal(size=12), rng.normal(size=12)
    off = np.array([0, 5, 5, 9, 12])
    for fwd, vjp in ((cusoftmax.segment_softmax, cusoftmax.segment_softmax_vjp),
                     (cusoftmax.segment_log_softmax, cusoftmax.segment_log_softmax_vjp)):
        dx = vjp(fwd(x, offsets=off), dy, offsets=off)
        h, num = 1e-6, np.empty(12)
        for i in range(12):
            e = np.zeros(12)
            e[i] = h
            num[i] = (dy @ fwd(x + e, offsets=off) - dy @ fwd(x - e, offsets=off)) / (2 * h)
        np.testing.assert_allclose(dx, num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", ["float16", "float32", "int16", "int64"] + (["bf16"] if BF16 else []))
def test_dtypes(dtype):
    dtype = BF16 if dtype == "bf16" else np.dtype(dtype)
    x = (np.arange(20) % 7 - 3).astype(dtype)
    ids = np.arange(20) // 6
    y = cusoftmax.segment_softmax(x, ids)
    assert y.dtype == cusoftmax.softmax(x).dtype
    check(y, ref_segments("softmax", x.astype(np.float64), members(ids)), y.dtype, TOLERANCE)


def test_out_in_place_and_byte_order():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(8, 2))
    ids = np.array([1, 0, 1, 0, 2, 2, 1, 0])
    want = cusoftmax.segment_softmax(x, ids)
    out = np.empty_like(x)
    assert cusoftmax.segment_softmax(x, ids, out=out) is out
    np.testing.assert_array_equal(out, want)
    swapped = np.empty(x.shape, x.dtype.newbyteorder())
    cusoftmax.segment_softmax(x, ids, out=swapped)
    np.testing.assert_array_equal(swapped, want)
    y = x.copy()
    assert cusoftmax.segment_softmax(y, ids, out=y) is y
    np.testing.assert_array_equal(y, want)
    lse = np.empty((3, 2))
    assert cusoftmax.segment_logsumexp(x, ids, out=lse) is lse
    np.testing.assert_array_equal(lse, cusoftmax.segment_logsumexp(x, ids))
    np.testing.assert_array_equal(cusoftmax.segment_softmax(x.astype(">f8"), ids), want)


def test_deterministic():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(5000, 4)).astype(np.float32)
    ids = rng.integers(0, 300, 5000)
    runs = [cusoftmax.segment_log_softmax(x, ids) for _ in range(2)]
    assert_same_bits(*runs)


def test_sorted_and_unsorted_ids_agree():
    """Unsorted ids give, at each position, the result of the same segments sorted (the
    stable sort keeps each segment's positions in order, so the bits agree)."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=100)
    ids = rng.integers(0, 9, 100)
    order = np.argsort(ids, kind="stable")
    y = cusoftmax.segment_softmax(x, ids)
    assert_same_bits(y[order], cusoftmax.segment_softmax(x[order], ids[order],
                                                         indices_are_sorted=True))
    off = np.searchsorted(ids[order], np.arange(10))
    assert_same_bits(y[order], cusoftmax.segment_softmax(x[order], offsets=off))


@pytest.mark.parametrize("call, error, match", [
    (lambda x, i: cusoftmax.segment_softmax(x), TypeError, "segment_ids or as offsets"),
    (lambda x, i: cusoftmax.segment_softmax(x, i, offsets=[0, 4]), TypeError, "one of them"),
    (lambda x, i: cusoftmax.segment_softmax(x, i.astype(float)), TypeError, "integers"),
    (lambda x, i: cusoftmax.segment_softmax(x, i > 0), TypeError, "integers"),
    (lambda x, i: cusoftmax.segment_softmax(x, i[:3]), ValueError, "3 entries"),
    (lambda x, i: cusoftmax.segment_softmax(x, i[None]), ValueError, "1-d"),
    (lambda x, i: cusoftmax.segment_softmax(x, offsets=[0, 3, 2, 4]), ValueError, "non-decreasing"),
    (lambda x, i: cusoftmax.segment_softmax(x, offsets=[0, 5]), ValueError, "at most"),
    (lambda x, i: cusoftmax.segment_softmax(x, offsets=[-1, 4]), ValueError, "at least 0"),
    (lambda x, i: cusoftmax.segment_softmax(x, offsets=[]), ValueError, "at least one"),
    (lambda x, i: cusoftmax.segment_softmax(x, offsets=[0, 4], num_segments=2), ValueError,
     "num_segments=2"),
    (lambda x, i: cusoftmax.segment_softmax(x, i, num_segments=-1), ValueError, "at least 0"),
    (lambda x, i: cusoftmax.segment_softmax(x, i, num_segments=2.0), TypeError, "integer"),
    (lambda x, i: cusoftmax.segment_softmax(x, i[::-1], indices_are_sorted=True), ValueError,
     "not sorted"),
    (lambda x, i: cusoftmax.segment_softmax(x, i, axis=None), TypeError, "one axis"),
    (lambda x, i: cusoftmax.segment_softmax(x, i, axis=(0,)), TypeError, "one axis"),
    (lambda x, i: cusoftmax.segment_softmax(x, i, axis=1), AxisError, "out of bounds"),
    (lambda x, i: cusoftmax.segment_softmax(np.float64(1.0), i), AxisError, "needs an axis"),
    (lambda x, i: cusoftmax.segment_softmax(x.astype(complex), i), TypeError, "complex"),
    (lambda x, i: cusoftmax.segment_softmax(x, i, where=np.ones(3, bool)), ValueError,
     "broadcast"),
    (lambda x, i: cusoftmax.segment_softmax(x, i, where=np.ones(4)), TypeError, "bool"),
    (lambda x, i: cusoftmax.segment_softmax(x, i, out=np.empty(3)), ValueError, "shape"),
    (lambda x, i: cusoftmax.segment_logsumexp(x, i, out=np.empty(4)), ValueError, "shape"),
    (lambda x, i: cusoftmax.segment_softmax_vjp(x, x[:2], i), ValueError, "dy has shape"),
])
def test_bad_calls_raise_before_anything_is_written(call, error, match):
    x = np.array([0.0, 1.0, 2.0, 3.0])
    ids = np.array([0, 0, 1, 1])
    before = x.copy()
    with pytest.raises(error, match=match):
        call(x, ids)
    assert_same_bits(x, before)


def test_dask_is_refused():
    da = pytest.importorskip("dask.array")
    with pytest.raises(TypeError, match="Dask"):
        cusoftmax.segment_softmax(da.ones(4, chunks=2), np.zeros(4, int))


def test_no_warnings():
    x = np.array([inf, -inf, nan, 1.0, -inf, -inf])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fn in (cusoftmax.segment_softmax, cusoftmax.segment_log_softmax,
                   cusoftmax.segment_logsumexp):
            fn(x, offsets=[0, 2, 4, 6])
        cusoftmax.segment_softmax_vjp(x, x, offsets=[0, 2, 4, 6])


def test_docstring_examples():
    for name in ("segment_softmax", "segment_log_softmax", "segment_logsumexp",
                 "segment_softmax_vjp", "segment_log_softmax_vjp"):
        fn = getattr(_segment, name)
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
        for test in doctest.DocTestFinder().find(fn, name, globs={}):
            result = runner.run(test)
            assert result.failed == 0 and result.attempted > 0, name


@requires_gpu
def test_gpu_arrays_give_the_hosts_results():
    import cupy

    rng = np.random.default_rng(8)
    x = rng.normal(size=(50, 3)).astype(np.float32)
    ids = rng.integers(-1, 7, 50)
    where = rng.random(x.shape) < 0.9
    for fn in (cusoftmax.segment_softmax, cusoftmax.segment_log_softmax,
               cusoftmax.segment_logsumexp):
        y = fn(cupy.asarray(x), cupy.asarray(ids), where=cupy.asarray(where))
        assert isinstance(y, cupy.ndarray)
        assert_same_bits(y, fn(x, ids, where=where))
    out = cupy.empty(x.shape, np.float32)
    assert cusoftmax.segment_softmax(cupy.asarray(x), ids, out=out) is out  # the kernels
    check(out, ref_segments("softmax", x.astype(np.float64), members(ids)), "float32", TOLERANCE)
    ref = cusoftmax.segment_softmax_vjp(to_host(out).astype(np.float64),
                                        to_host(out).astype(np.float64), ids)
    check(cusoftmax.segment_softmax_vjp(out, out, ids), ref, "float32", VJP_TOLERANCE,
          of=np.full(ref.shape, np.abs(ref).max()))


def _lengths(kind, rng):
    """Segment lengths: short ones (0 to 6), ones past a tile (up to 40,000), or a mix with
    one segment of 300,000 rows (a tile is 256 threads' 1 to 16 rows)."""
    if kind == "short":
        return rng.integers(0, 7, 3000)
    if kind == "long":
        return rng.integers(3000, 40_000, 8)
    return np.concatenate([rng.integers(0, 40, 500), [300_000], rng.integers(1, 5000, 20),
                           rng.integers(0, 3, 2000)])


@requires_gpu
@pytest.mark.parametrize("lengths", ["short", "long", "mixed"])
@pytest.mark.parametrize("given", ["sorted", "shuffled", "offsets"])
@pytest.mark.parametrize("cols", [1, 3, 8])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"] + (["bf16"] if BF16 else []))
def test_kernels_match_scipy(dtype, cols, given, lengths, monkeypatch):
    """The segment kernels (no host fallback) against SciPy float64 of each segment, with ids
    outside the segments at both ends (or offsets that leave rows out), int32 and int64."""
    import cupy

    dtype = BF16 if dtype == "bf16" else np.dtype(dtype)
    monkeypatch.setattr(_segment, "_prepared", None)  # the host path would fail
    rng = np.random.default_rng(hash((str(dtype), cols, given, lengths)) % 2**32)
    lens = _lengths(lengths, rng)
    count = lens.size
    ids = np.concatenate([[-1] * 5, np.repeat(np.arange(count), lens), [count + 2] * 3])
    n = ids.size
    x = rng.normal(scale=3.0, size=(n, cols) if cols > 1 else n).astype(dtype)
    v = x.astype(np.float64)
    id_type = np.int32 if cols != 3 else np.int64
    if given == "offsets":
        offsets = np.concatenate([[5], 5 + np.cumsum(lens)]).astype(id_type)
        kw, groups = {"offsets": cupy.asarray(offsets)}, members(offsets=offsets)
    else:
        use = ids if given == "sorted" else rng.permutation(ids)
        kw = {"segment_ids": cupy.asarray(use.astype(id_type)), "num_segments": count}
        groups = members(use, count=count)
        ids = use
    scale = 0.75 if lengths == "mixed" else None
    xc = cupy.asarray(x)
    for op in ("softmax", "log_softmax", "logsumexp"):
        fn = getattr(cusoftmax, f"segment_{op}")
        if dtype.name not in plans.TYPES[f"segment_{op}"]:  # the host's, by the dtype rule
            monkeypatch.undo()
        y = fn(xc, **kw, scale=scale)
        table = TOLERANCE if op == "softmax" else LOG_TOLERANCE
        ref = ref_segments(op, v, groups, scale=scale)
        check(y, ref, dtype, table)
        assert_same_bits(y, fn(xc, **kw, scale=scale))  # deterministic
        monkeypatch.setattr(_segment, "_prepared", None)
        if op == "logsumexp":
            continue
        dy = rng.normal(size=x.shape).astype(dtype)
        yh = to_host(y)
        vjp = getattr(cusoftmax, f"segment_{op}_vjp")
        dx = vjp(y, cupy.asarray(dy), **kw)
        # the float64 host path of the same inputs (checked against the formula on the host)
        kw64 = {k: to_host(a) if hasattr(a, "get") else a for k, a in kw.items()}
        monkeypatch.undo()
        ref = vjp(yh.astype(np.float64), dy.astype(np.float64), **kw64)
        monkeypatch.setattr(_segment, "_prepared", None)
        size = np.full(ref.shape, np.abs(ref).max() + np.finfo(np.float64).tiny)
        check(dx, ref, dtype, VJP_TOLERANCE, of=size)
        assert_same_bits(dx, vjp(y, cupy.asarray(dy), **kw))


@requires_gpu
def test_kernels_special_values_and_other_axes(monkeypatch):
    """NaN, +inf and -inf in segments (NaN alone, NaN beside -inf), an empty segment, and the
    axis not first."""
    import cupy

    monkeypatch.setattr(_segment, "_prepared", None)
    x = np.array([1.0, inf, 2.0, nan, 0.5, -inf, -inf, 3.0, -inf, 2.0, nan, -inf, nan],
                 np.float32)
    ids = np.array([0, 0, 1, 1, 2, 3, 3, 5, 6, 6, 7, 8, 8])
    groups = members(ids, count=9)
    for op in ("softmax", "log_softmax", "logsumexp"):
        y = getattr(cusoftmax, f"segment_{op}")(cupy.asarray(x), cupy.asarray(ids), num_segments=9)
        ref = ref_segments(op, x.astype(np.float64), groups)
        np.testing.assert_array_equal(np.isnan(to_host(y)), np.isnan(ref))
        fin = ~np.isnan(ref)
        np.testing.assert_allclose(to_host(y)[fin], ref[fin], rtol=1e-5, atol=1e-6)
    x2 = np.random.default_rng(3).normal(size=(4, 300)).astype(np.float32)
    ids2 = np.repeat(np.arange(30), 10)
    y = cusoftmax.segment_softmax(cupy.asarray(x2), cupy.asarray(ids2), axis=1)
    ref = ref_segments("softmax", x2.T.astype(np.float64), members(ids2)).T
    check(y, ref, np.float32, TOLERANCE)


@requires_gpu
@pytest.mark.parametrize("at", [3, 8, 2048, -1])
def test_kernels_find_ids_out_of_order(at, monkeypatch):
    """Sorted ids but for one descent (inside a thread's rows, between two threads, across the
    edge of a tile of 256 threads of 8 float32 rows, at the last id: then not the largest), and
    no num_segments: the kernels find it, the call sorts the ids and runs them again; with
    indices_are_sorted=True it is a ValueError."""
    import cupy

    rng = np.random.default_rng(at % 97)
    ids = np.repeat(np.arange(900), 5)
    ids[at] = ids[at - 1] - 3 if at != -1 else 2
    x = rng.normal(size=ids.size).astype(np.float32)
    xc, ic = cupy.asarray(x), cupy.asarray(ids)
    monkeypatch.setattr(_segment, "_prepared", None)  # the host path would fail
    for op in ("softmax", "log_softmax", "logsumexp"):
        y = getattr(cusoftmax, f"segment_{op}")(xc, ic)
        ref = ref_segments(op, x.astype(np.float64), members(ids))
        check(y, ref, np.float32, TOLERANCE if op == "softmax" else LOG_TOLERANCE)
        with pytest.raises(ValueError, match="not sorted"):
            getattr(cusoftmax, f"segment_{op}")(xc, ic, indices_are_sorted=True)
    sorted_ids = cupy.asarray(np.sort(ids))
    check(cusoftmax.segment_softmax(xc, sorted_ids, indices_are_sorted=True),
          ref_segments("softmax", x.astype(np.float64), members(np.sort(ids))), np.float32,
          TOLERANCE)


@requires_gpu
def test_kernels_take_strided_and_broadcast_ids():
    """Ids and offsets that are views (a column, reversed, broadcast) give the contiguous
    arrays' result: the kernels read a contiguous copy."""
    import cupy

    rng = np.random.default_rng(4)
    x = cupy.asarray(rng.normal(size=(3000, 2)).astype(np.float32))
    ids = np.repeat(np.arange(300), 10)
    want = cusoftmax.segment_softmax(x, cupy.asarray(ids), num_segments=300)
    column = cupy.asarray(np.stack([ids, np.full_like(ids, 999)], 1))[:, 0]
    reversed_view = cupy.asarray(ids[::-1].copy())[::-1]
    for view in (column, reversed_view):
        assert not view.flags.c_contiguous
        assert_same_bits(cusoftmax.segment_softmax(x, view, num_segments=300), want)
    off = np.arange(0, 3001, 10)
    strided = cupy.asarray(np.stack([off, off], 1))[:, 1]
    assert_same_bits(cusoftmax.segment_softmax(x, offsets=strided), want)
    one = cupy.broadcast_to(cupy.zeros(1, cupy.int64), (3000,))
    check(cusoftmax.segment_log_softmax(x, one), cusoftmax.log_softmax(x.astype(np.float64), 0)
          .get(), np.float32, LOG_TOLERANCE)


@pytest.mark.parametrize("count", [50, 70_000])
def test_many_segments_unsorted(count):
    """Ids of one and of two 16-bit radix digits give each segment the softmax of its
    positions in their order (two columns: the path that sorts)."""
    rng = np.random.default_rng(9)
    ids = rng.integers(-2, count + 2, 200_000)
    x = rng.normal(size=(ids.size, 2))
    y = cusoftmax.segment_softmax(x, ids, num_segments=count)
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    inside = (s >= 0) & (s < count)
    off = np.searchsorted(s[inside], np.arange(count + 1))
    assert_same_bits(y[order][inside], cusoftmax.segment_softmax(x[order][inside], offsets=off))
    assert not y[order][~inside].any()
    flat = cusoftmax.segment_softmax(x[:, 0], ids, num_segments=count)  # in place, no sort
    np.testing.assert_allclose(flat, y[:, 0], rtol=1e-12, atol=0)  # other summation order


@pytest.mark.parametrize("dtype, itemsize", [("float32", 4), ("float64", 8), ("bfloat16", 2)])
def test_kernel_plans(dtype, itemsize):
    """The segment kernels take rows of 1 to 8 elements, int32 and int64 ids or offsets, and
    name only instantiations the library compiles; wider rows, other index types or a
    misaligned x go to the host."""
    from cusoftmax import _kernels
    from cusoftmax.planning import TUNING, segment

    compiled = {(k, d, t, o) for k, d, t, o in _kernels.instantiations()}
    for op in segment.EPILOGUES:
        if dtype not in segment.TYPES[op]:  # float64 log_softmax and logsumexp: the host
            assert segment.plan(op, 100, 2, 3, itemsize, np.int64, False, True, TUNING) is None
            assert op in ("segment_log_softmax", "segment_logsumexp") and dtype == "float64"
            continue
        for cols in range(1, 9):
            for ids in (np.int32, np.int64):
                for offsets in (False, True):
                    p = segment.plan(op, 100_000, cols, 77, itemsize, ids, offsets, True, TUNING)
                    assert p is not None and p.tiles.grid * p.tiles.block * p.tiles.rows >= 100_000
                    for launch in (p.tiles, p.fold, p.fixup):
                        if launch is not None:
                            assert (launch.kernel, dtype, launch.template, launch.ops) in compiled
        assert segment.plan(op, 100, 9, 3, itemsize, np.int64, False, True, TUNING) is None
        assert segment.plan(op, 100, 2, 3, itemsize, np.int16, False, True, TUNING) is None
        assert segment.plan(op, 100, 2, 3, itemsize, np.int64, False, False, TUNING) is None


def test_segment_counts_fit_an_int64():
    """num_segments, or the largest id + 1, of 2**63 or more is a ValueError (the kernels and
    NumPy count segments in int64), not a count that wraps."""
    x = np.zeros(4)
    with pytest.raises(ValueError, match="do not fit an int64"):
        cusoftmax.segment_softmax(x, np.zeros(4, np.int64), num_segments=2**64)
    with pytest.raises(ValueError, match="do not fit an int64"):
        cusoftmax.segment_softmax(x, np.full(4, 2**63 - 1, np.int64))
