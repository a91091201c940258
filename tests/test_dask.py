"""Dask arrays of NumPy (host) or CuPy (GPU) chunks through every function of the family: results
against SciPy after compute(), on the local threaded and the distributed scheduler; laziness, the
graph's size, the chunk type and the errors."""

import subprocess
import warnings
import sys

import numpy as np
import pytest
import scipy.special as sp

da = pytest.importorskip("dask.array", reason="needs dask: pip install 'cusoftmax[dask]'")
import dask  # noqa: E402
from dask.callbacks import Callback  # noqa: E402

import cusoftmax  # noqa: E402
from cusoftmax import _composed, _host  # noqa: E402
from cusoftmax._accuracy import TOLERANCE  # noqa: E402
from _support import FLOAT_DTYPES, assert_same_bits, assert_softmax, make_values, to_host  # noqa: E402

F64 = np.dtype(np.float64)
RTOL, ATOL = 1e-12, 1e-13  # float64 results; VJP entries near 0 need the atol


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed", reason="needs dask's distributed scheduler")
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=None, set_as_default=False) as c:
        yield c


@pytest.fixture(params=["threads", "distributed"])
def compute(request):
    """compute(*results) on the local threaded scheduler or a small in-process cluster."""
    scheduler = "threads" if request.param == "threads" else request.getfixturevalue("client").get
    return lambda *rs: tuple(to_host(r) for r in dask.compute(*rs, scheduler=scheduler))


def _dask(xp, a, chunks):
    return da.from_array(xp.asarray(a), chunks=chunks)


def _close(got, ref):
    got = to_host(got)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL, equal_nan=True)


def _masked_references(x, axis, where, scale):
    """SciPy's softmax, log_softmax and logsumexp of ``scale * x`` with `where`'s False positions
    left out; a fully masked slice gives zeros, -inf and -inf."""
    v = np.where(where, scale * x, -np.inf)
    dead = ~np.any(where, axis=axis, keepdims=True)
    with np.errstate(all="ignore"):
        y = np.where(dead, 0.0, sp.softmax(v, axis=axis))
        logy = np.where(where & ~dead, sp.log_softmax(v, axis=axis), -np.inf)
        return y, logy, sp.logsumexp(v, axis=axis)


CASES = {  # id: (shape, chunks, axis)
    "inside-one-chunk": ((6, 40), (4, 40), -1),
    "split": ((6, 40), (4, 8), -1),
    "uneven-with-a-one-element-chunk": ((5, 37), ((2, 3), (10, 1, 20, 6)), 1),
    "axis0-split": ((37, 3), ((1, 30, 6), (2, 1)), 0),
    "tuple-axes-chunked-and-not": ((4, 12, 9), (2, 5, 9), (1, 2)),
    "axis-None": ((7, 9), (3, 4), None),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_family_against_scipy(xp, compute, case):
    shape, chunks, axis = case
    rng = np.random.default_rng(len(shape) * 100 + shape[0])
    x, dy = make_values(rng, shape, F64), make_values(rng, shape, F64, 1.0)
    y, logy = sp.softmax(x, axis=axis), sp.log_softmax(x, axis=axis)
    dx, ddy = _dask(xp, x, chunks), _dask(xp, dy, chunks)
    got = compute(cusoftmax.softmax(dx, axis=axis), cusoftmax.log_softmax(dx, axis=axis),
                  cusoftmax.logsumexp(dx, axis=axis),
                  cusoftmax.logsumexp(dx, axis=axis, keepdims=True),
                  cusoftmax.softmax_vjp(_dask(xp, y, chunks), ddy, axis=axis),
                  cusoftmax.log_softmax_vjp(_dask(xp, logy, chunks), ddy, axis=axis))
    assert_softmax(got[0], x, axis)
    _close(got[1], logy)
    _close(got[2], sp.logsumexp(x, axis=axis))
    _close(got[3], sp.logsumexp(x, axis=axis, keepdims=True))
    _close(got[4], y * (dy - np.sum(dy * y, axis=axis, keepdims=True)))
    _close(got[5], dy - y * np.sum(dy, axis=axis, keepdims=True))


@pytest.mark.parametrize("dtype", [d for d in FLOAT_DTYPES if d != F64], ids=str)
def test_narrow_dtypes_as_the_ordinary_functions(dtype):
    """float32 and the half types over a split axis: softmax within the dtype's bound, the rest
    as the ordinary functions give them on the whole array (float64 sums either way)."""
    rng = np.random.default_rng(6)
    x, dy = make_values(rng, (3, 50), dtype), make_values(rng, (3, 50), dtype, 1.0)
    y = cusoftmax.softmax(x)
    dx, ddy, dyy = (da.from_array(a, chunks=(2, 9)) for a in (x, dy, y))
    got = dask.compute(cusoftmax.softmax(dx), cusoftmax.log_softmax(dx),
                       cusoftmax.logsumexp(dx, axis=1), cusoftmax.softmax_vjp(dyy, ddy),
                       scheduler="threads")
    assert_softmax(got[0], x, -1)
    rtol = TOLERANCE[dtype.name][0]
    for g, ref in zip(got[1:], (cusoftmax.log_softmax(x), cusoftmax.logsumexp(x, axis=1),
                                cusoftmax.softmax_vjp(y, dy))):
        assert g.dtype == dtype
        ref = ref.astype(F64)
        np.testing.assert_allclose(g.astype(F64), ref, rtol=rtol, atol=rtol * np.abs(ref).max())


@pytest.mark.parametrize("axis", [1, 0])
def test_bad_values_in_one_chunk_of_several(axis):
    """NaN, +inf and -inf in one chunk of a slice make the whole slice what SciPy makes it;
    a chunk of all -inf adds nothing to its slice."""
    x = make_values(np.random.default_rng(1), (6, 24), F64)
    x[0, 13] = np.nan
    x[1, 2] = np.inf
    x[2, [3, 20]] = -np.inf
    x[3] = -np.inf
    x[4, 6:12] = -np.inf  # exactly one whole chunk
    x = x if axis == 1 else np.ascontiguousarray(x.T)
    dx = da.from_array(x, chunks=6)  # four chunks along the reduced axis
    y, logy, lse = dask.compute(cusoftmax.softmax(dx, axis=axis),
                                cusoftmax.log_softmax(dx, axis=axis),
                                cusoftmax.logsumexp(dx, axis=axis), scheduler="threads")
    assert_softmax(y, x, axis)
    with np.errstate(all="ignore"):
        _close(logy, sp.log_softmax(x, axis=axis))
        _close(lse, sp.logsumexp(x, axis=axis))


@pytest.mark.parametrize("xchunks", [(3, 7), (3, 30)], ids=["split", "inside-one-chunk"])
@pytest.mark.parametrize("form", ["dask-other-chunks", "numpy"])
def test_fully_masked_slices_over_chunks(form, xchunks):
    """where and a scale a row, slices split over chunks or inside one (where the ordinary
    function runs on each chunk, the scale as one value a slice)."""
    rng = np.random.default_rng(2)
    x, dy = make_values(rng, (6, 30), F64), make_values(rng, (6, 30), F64, 1.0)
    where = rng.random((6, 30)) < 0.6
    where[1] = False  # a fully masked slice over all five chunks
    where[2, 7:14] = False  # one chunk of a live slice fully masked
    scale = rng.uniform(0.5, 2.0, (6, 1))
    y, logy, lse = _masked_references(x, 1, where, scale)
    dx = da.from_array(x, chunks=xchunks)
    w = da.from_array(where, chunks=(2, 10)) if form != "numpy" else where
    s = da.from_array(scale, chunks=(4, 1)) if form != "numpy" else scale
    got = dask.compute(cusoftmax.softmax(dx, axis=1, where=w, scale=s),
                       cusoftmax.log_softmax(dx, axis=1, where=w, scale=s),
                       cusoftmax.logsumexp(dx, axis=1, where=w, scale=s),
                       cusoftmax.softmax_vjp(da.from_array(y, chunks=xchunks), dy, axis=1,
                                             where=w), scheduler="threads")
    for g, ref in zip(got, (y, logy, lse)):
        _close(g, ref)
    assert not np.isnan(got[0]).any() and np.all(got[0][1] == 0) and np.all(got[1][1] == -np.inf)
    _close(got[3], np.where(where, y * (dy - np.sum(np.where(where, dy * y, 0), 1,
                                                    keepdims=True)), 0))


@pytest.mark.parametrize("cols", [5, 33], ids=["split", "inside-one-chunk"])
@pytest.mark.parametrize("form", ["dask-other-chunks", "numpy-broadcast"])
def test_logsumexp_weights_of_both_signs(compute, form, cols):
    rng = np.random.default_rng(3)
    x = make_values(rng, (5, 33), F64)
    b = rng.choice([0.0, 0.5, 2.0, -1.0, -3.0], size=(5, 33))
    b[0, :] = np.abs(b[0])  # one slice of a positive sum, the others of either sign
    if form != "dask-other-chunks":
        b = b[2]  # one row of weights for every slice
    db = da.from_array(b, chunks=(2, 11)) if b.ndim == 2 else b
    dx = da.from_array(x, chunks=(2, cols))
    lse, sign = cusoftmax.logsumexp(dx, axis=1, b=db, return_sign=True)
    got = compute(lse, sign, cusoftmax.logsumexp(dx, axis=1, b=db))
    ref, ref_sign = sp.logsumexp(x, axis=1, b=b, return_sign=True)
    assert (ref_sign < 0).any() and (ref_sign > 0).any()
    _close(got[0], ref)
    np.testing.assert_array_equal(got[1], ref_sign)
    with np.errstate(invalid="ignore"):
        _close(got[2], sp.logsumexp(x, axis=1, b=b))


def test_empty_chunk_and_lengths_unknown_until_computed():
    """Rows filtered by a mask: their count is NaN to Dask until computed, and one chunk of
    them is empty (a state of m = -inf, nothing to merge)."""
    x = make_values(np.random.default_rng(7), (10, 12), F64)
    keep = np.ones(10, bool)
    keep[3:6] = False

    def rows():
        return da.from_array(x, chunks=(3, 5))[da.from_array(keep, chunks=3)]
    known = rows().compute_chunk_sizes()
    assert known.chunks[0] == (3, 0, 3, 1)
    for a in (rows(), known):
        for axis in (0, 1, None):
            got = dask.compute(cusoftmax.softmax(a, axis=axis), cusoftmax.logsumexp(a, axis=axis),
                               scheduler="threads")
            assert_softmax(got[0], x[keep], axis)
            _close(got[1], sp.logsumexp(x[keep], axis=axis))


class _Tasks(Callback):
    def __init__(self):
        super().__init__()
        self.ran = 0

    def _pretask(self, key, dsk, state):
        self.ran += 1


def test_nothing_runs_before_compute(monkeypatch):
    calls = []
    for module, name in [*((_composed, n) for n in ("state", "merge", "normalize", "log_sum",
                                                    "vjp_sum", "vjp")),
                         (_host, "state_of"), (_host, "normalize")]:
        fn = getattr(module, name)
        monkeypatch.setattr(module, name,
                            lambda *a, _fn=fn, _name=name, **k: calls.append(_name) or _fn(*a, **k))
    x = make_values(np.random.default_rng(4), (4, 40), F64)
    dx = da.from_array(x, chunks=(2, 8))
    with _Tasks() as tasks:
        results = [f(dx, axis=1) for f in (cusoftmax.softmax, cusoftmax.log_softmax,
                                           cusoftmax.logsumexp)]
        results += [f(dx, dx, axis=1) for f in (cusoftmax.softmax_vjp, cusoftmax.log_softmax_vjp)]
        results += [cusoftmax.softmax(dx, axis=0)]  # inside one chunk
        results += [*cusoftmax.softmax_topk(dx, 3), *cusoftmax.softmax_topk(dx, 3, axis=0)]
        assert tasks.ran == 0 and calls == []
        dask.compute(*results, scheduler="sync")
        assert tasks.ran > 0 and {"state_of", "merge", "normalize", "vjp_sum", "vjp"} <= set(calls)


def _tasks(chunks_along_axis, axis=-1, topk=False):
    x = da.zeros((4, 8 * chunks_along_axis), chunks=(4, 8))
    if topk:  # the two outputs' graphs share every task but their own picks
        values, indices = cusoftmax.softmax_topk(x, 2, axis=axis)
        return len({**dict(values.__dask_graph__()), **dict(indices.__dask_graph__())})
    return len(cusoftmax.softmax(x, axis=axis).__dask_graph__())


def test_graph_grows_linearly_with_chunks():
    """Over a chunked axis: the input, a state, a merge input and a normalising task per chunk,
    and a tree of merges; inside one chunk: one task per chunk. softmax_topk: the input, a part
    per chunk, a tree of merges and the two outputs' picks."""
    t8, t16 = _tasks(8), _tasks(16)
    assert t8 <= 5 * 8 and t16 <= 5 * 16 and t16 < 2.1 * t8, (t8, t16)
    assert _tasks(16, axis=0) == 2 * 16
    k8, k16 = _tasks(8, topk=True), _tasks(16, topk=True)
    assert k8 <= 5 * 8 and k16 <= 5 * 16 and k16 < 2.1 * k8, (k8, k16)


def test_chunk_type_and_dtype_kept(xp):
    x = xp.asarray(make_values(np.random.default_rng(5), (4, 24), np.dtype(np.float32)))
    for chunks in ((4, 24), (4, 5)):
        y = cusoftmax.softmax(da.from_array(x, chunks=chunks), axis=1)
        assert type(y._meta) is type(x) and y.dtype == np.float32
        computed = y.compute(scheduler="threads")
        assert type(computed) is type(x)
        assert_softmax(computed, x, 1)
    ints = da.from_array(xp.asarray(np.arange(-10, 14, dtype=np.int16).reshape(2, 12)),
                         chunks=(2, 5))
    assert cusoftmax.softmax(ints, axis=1).dtype == np.float32


def test_bad_input_errors():
    dx = da.from_array(np.zeros((3, 10)), chunks=(3, 5))
    unknown = da.from_array(np.ones(10, bool), chunks=5)
    unknown = unknown[unknown]  # chunk sizes known only after computing
    with pytest.raises(ValueError, match="where .*cannot be aligned"):
        cusoftmax.softmax(dx, axis=1, where=unknown)
    with pytest.raises(ValueError, match="where .*does not broadcast"):
        cusoftmax.softmax(dx, axis=1, where=np.ones(9, bool))
    with pytest.raises(TypeError, match="where must be a bool array"):
        cusoftmax.softmax(dx, axis=1, where=da.ones(10, chunks=5))
    with pytest.raises(ValueError, match="dy has shape"):
        cusoftmax.softmax_vjp(dx, dx[:, :9], axis=1)
    for dtype in (object, bool):
        with pytest.raises(TypeError, match=np.dtype(dtype).name):
            cusoftmax.softmax(da.from_array(np.zeros((3, 10), dtype), chunks=5), axis=1)
    with pytest.raises(TypeError, match="out="):
        cusoftmax.softmax(dx, axis=1, out=np.zeros((3, 10)))
    with pytest.raises(ValueError, match="length 0"):
        cusoftmax.softmax(da.zeros((3, 0), chunks=2), axis=1)


def test_import_does_not_bring_dask():
    code = ("import sys, numpy, cusoftmax; cusoftmax.softmax(numpy.ones(3)); "
            "assert not any(m.partition('.')[0] == 'dask' for m in sys.modules), 'dask imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_numpy_chunks_pieces_give_the_array_operations_bits(dtype, op):
    """NumPy chunks take their states and normalise in cache-sized pieces (_host): the max and
    its count as ``_composed`` on the whole chunk, the float64 sums within their rounding (NumPy
    buffers a cast sum by the array's extent), and the same bits from a given state."""
    C = _composed
    x = (np.random.default_rng(5).standard_normal((40, 70000)) * 4).astype(dtype)
    x[1], x[2, 5], x[3, 6] = -np.inf, np.nan, np.inf
    st = C.state(np, x, (1,))
    got = _host.state_of(x, (1,))
    assert_same_bits(got.m, st.m)
    assert_same_bits(got.c, st.c)
    np.testing.assert_allclose(got.s, st.s, rtol=1e-13, atol=0)
    assert_same_bits(_host.normalize(op, x, st, (1,)), C.normalize(np, op, x, st, (1,)))


@pytest.mark.parametrize("op", ["softmax_vjp", "log_softmax_vjp"])
def test_vjps_over_chunks_warn_no_more_than_the_plain_call(op):
    """+inf and -inf dy in different chunks of a slice: NaN, and no warning, as the plain call."""
    y = np.log(np.full((1, 2), 0.5))
    dy = np.array([[np.inf, -np.inf]])
    fn = getattr(cusoftmax, op)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = fn(y, dy)
        chunked = fn(da.from_array(y, chunks=1), da.from_array(dy, chunks=1)).compute()
    np.testing.assert_array_equal(np.isnan(chunked), np.isnan(plain))


@pytest.mark.parametrize("ashape,bshape,axis", [((3,), (2, 3), None), ((3,), (2, 3), -1),
                                                ((2, 1), (1, 4), 1)])
def test_logsumexp_broadcasts_a_with_b_over_chunks(ashape, bshape, axis):
    """As the plain call and SciPy: `a` and `b` broadcast together, Dask arrays alike."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(ashape), rng.random(bshape) + 0.1
    want = sp.logsumexp(a, axis=axis, b=b)
    got = cusoftmax.logsumexp(da.from_array(a, chunks=1), axis=axis,
                              b=da.from_array(b, chunks=1)).compute()
    np.testing.assert_allclose(got, want, rtol=1e-13)
