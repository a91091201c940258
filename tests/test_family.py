"""The softmax family (log_softmax, logsumexp, the VJPs, where= and scale=) against SciPy's
float64 results, on the host path and on the GPU."""

import warnings

import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import cusoftmax
from cusoftmax._accuracy import LOG_TOLERANCE, TOLERANCE, VJP_TOLERANCE, violations
from cusoftmax._args import result_dtype
from cusoftmax._composed import compute_types
from cusoftmax._layout import normalize_axes
from _support import FLOAT_DTYPES, assert_same_bits, build, make_values, to_host, views

inf, nan = np.inf, np.nan


def _slices_shape(shape, axes):
    return tuple(1 if d in axes else n for d, n in enumerate(shape))


@st.composite
def extras(draw, shape, axes):
    """(where, scale) for an input of `shape` reduced over `axes`, as host arrays or scalars:
    no mask, a random one, a broadcast one (fewer or length-1 axes), or one with whole slices
    off; no scale, a scalar, or one value a slice."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["none", "random", "broadcast", "slices off"]))
    where = None
    if kind == "random":
        where = rng.random(shape) < draw(st.sampled_from([0.2, 0.7, 1.0]))
    elif kind == "broadcast":
        mshape = [n if draw(st.booleans()) else 1 for n in shape][draw(st.integers(0, len(shape))):]
        where = rng.random(mshape) < 0.6
    elif kind == "slices off":
        where = (rng.random(shape) < 0.8) & (rng.random(_slices_shape(shape, axes)) < 0.6)
    scale = draw(st.sampled_from([None, "scalar", "slices"]))
    if scale == "scalar":
        scale = draw(st.sampled_from([0.5, -1.0, 3, np.float32(0.125), np.float64(-0.25)]))
    elif scale == "slices":
        scale = rng.uniform(-2.0, 2.0, _slices_shape(shape, axes))
    return where, scale


def _on(xp, a):
    return a if a is None or np.ndim(a) == 0 else xp.asarray(a)


def _values(x, dtype, scale=None):
    """float64 of ``scale * x`` rounded as the library rounds it (the reference's input)."""
    compute = compute_types(dtype)[0]
    v = to_host(x).astype(dtype).astype(compute)
    if scale is not None:
        v = v * np.asarray(to_host(scale), dtype=compute)
    return v.astype(np.float64)


def _masked(v, where):
    return v if where is None else np.where(where, v, -inf)


def ref_softmax(v, axes, where=None):
    with np.errstate(all="ignore"):
        y = scipy.special.softmax(_masked(v, where), axis=axes)
    return y if where is None else np.where(where, y, 0.0)


def ref_log_softmax(v, axes, where=None):
    with np.errstate(all="ignore"):
        y = scipy.special.log_softmax(_masked(v, where), axis=axes)
    return y if where is None else np.where(where, y, -inf)


def ref_logsumexp(v, axes, where=None, b=None, **kw):
    """SciPy's logsumexp with the mask as zero weights; positions of zero weight set to -inf,
    which SciPy's own rule says adds nothing (its finite results ignore them already)."""
    w = np.ones_like(v) * (1.0 if where is None else where) * (1.0 if b is None else b)
    with np.errstate(all="ignore"):
        return scipy.special.logsumexp(np.where(w == 0, -inf, v), axis=axes, b=w, **kw)


def check(y, ref, dtype, table, of=None):
    msg = violations(to_host(y), ref, np.dtype(dtype).name, table, of)
    assert msg is None, msg


@given(case=views(), data=st.data())
def test_softmax_and_log_softmax_with_where_and_scale(xp, case, data):
    x, axis = build(xp, case)
    axes = normalize_axes(axis, x.ndim)
    where, scale = data.draw(extras(x.shape, axes))
    before = to_host(x).copy()
    dtype = result_dtype(x.dtype)
    v = _values(x, dtype, scale)
    for fn, ref, table in ((cusoftmax.softmax, ref_softmax, TOLERANCE),
                           (cusoftmax.log_softmax, ref_log_softmax, LOG_TOLERANCE)):
        y = fn(x, axis, where=_on(xp, where), scale=_on(xp, scale))
        assert type(y) is type(x) and y.shape == x.shape and y.dtype == dtype
        check(y, ref(v, axes, where), dtype, table)
    assert_same_bits(x, before)


@given(case=views(), data=st.data())
def test_logsumexp_matches_scipy(xp, case, data):
    x, axis = build(xp, case)
    axes = normalize_axes(axis, x.ndim)
    where, scale = data.draw(extras(x.shape, axes))
    keepdims = data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    b = data.draw(st.sampled_from([None, "full", "broadcast"]))
    if b is not None:
        bshape = x.shape if b == "full" else _slices_shape(x.shape, axes)[1:]
        b = rng.choice([0.0, 0.5, 1.0, 3.0], size=bshape)
    dtype = result_dtype(x.dtype)
    r = cusoftmax.logsumexp(x, axis, b=_on(xp, b), keepdims=keepdims, where=_on(xp, where),
                            scale=_on(xp, scale))
    ref = ref_logsumexp(_values(x, dtype, scale), axes, where, b, keepdims=keepdims)
    assert r.shape == np.shape(ref) and r.dtype == dtype
    check(r, ref, dtype, LOG_TOLERANCE)


@given(seed=st.integers(0, 2**32 - 1), shape=st.sampled_from([(3, 7), (4, 1), (2, 40)]),
       specials=st.sampled_from([0.0, 0.2]))
def test_logsumexp_signed_weights(xp, seed, shape, specials):
    """Weights of both signs with return_sign, against SciPy; the log's error grows with the
    cancellation, sum|terms| / |sum|."""
    rng = np.random.default_rng(seed)
    a = make_values(rng, shape, np.dtype(np.float64), 3.0, specials)
    b = rng.choice([-2.0, -1.0, 0.0, 0.5, 1.0], size=shape)
    out, sign = cusoftmax.logsumexp(xp.asarray(a), 1, b=xp.asarray(b), return_sign=True)
    ref, ref_sign = ref_logsumexp(a, 1, b=b, return_sign=True)
    with np.errstate(invalid="ignore"):
        cond = np.exp(ref_logsumexp(a, 1, b=np.abs(b)) - ref)
        err = np.abs(to_host(out) - ref)
        ok = (to_host(out) == ref) | (err <= 1e-14 * cond * (1 + np.abs(ref)))
    good = ~np.isfinite(ref) | (cond < 1e6)
    np.testing.assert_array_equal(to_host(sign)[good], ref_sign[good])
    assert (ok | np.isnan(ref) & np.isnan(to_host(out))).all()
    unsigned = to_host(cusoftmax.logsumexp(xp.asarray(a), 1, b=xp.asarray(b)))
    np.testing.assert_array_equal(np.isnan(unsigned)[good], (np.isnan(ref) | (ref_sign < 0))[good])


@pytest.mark.parametrize("a,b", [
    ([1.0, 2.0], [1.0, -1.0]), ([1.0, 1.0], [1.0, -1.0]), ([inf, 1.0], None),
    ([inf, 1.0], [1.0, -1.0]), ([inf, inf], [1.0, -1.0]), ([inf, inf], [2.0, -1.0]),
    ([nan, 1.0], None), ([-inf, -inf], None), ([-inf, -inf], [1.0, -1.0]), ([inf, 2.0], [0.0, 1.0]),
    ([nan, 2.0], [0.0, -1.0]), ([0.0, 0.0], [0.0, 0.0]), ([5.0, 3.0], [-1.0, 0.0]),
    ([-inf, 0.0], [1.0, 1.0]), ([inf, -inf], None),
])
@pytest.mark.parametrize("return_sign", [False, True])
def test_logsumexp_special_cases_as_scipy(xp, a, b, return_sign):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = cusoftmax.logsumexp(xp.asarray(a), b=None if b is None else xp.asarray(b),
                                  return_sign=return_sign)
    with np.errstate(all="ignore"):
        ref = scipy.special.logsumexp(a, b=b, return_sign=return_sign)
    for g, r in zip(*((got, ref) if return_sign else ((got,), (ref,)))):
        np.testing.assert_array_equal(to_host(g), r)


def test_logsumexp_defaults_and_shapes(xp):
    a = make_values(np.random.default_rng(5), (3, 4, 5), np.dtype(np.float32))
    x = xp.asarray(a)
    v = a.astype(np.float64)
    check(cusoftmax.logsumexp(x), ref_logsumexp(v, None), np.float32, LOG_TOLERANCE)
    for axis in (0, -1, (0, 2), None):
        for keepdims in (False, True):
            r = cusoftmax.logsumexp(x, axis, keepdims=keepdims)
            check(r, ref_logsumexp(v, axis, keepdims=keepdims), np.float32, LOG_TOLERANCE)
    r = cusoftmax.logsumexp(xp.asarray(2.5))
    assert float(to_host(r)) == 2.5
    if xp is np:
        assert isinstance(cusoftmax.logsumexp(a), np.float32)  # a NumPy scalar, as SciPy
    assert cusoftmax.logsumexp(x.astype(np.int16), 1).dtype == np.float32


@given(case=views(dtypes=[np.dtype(np.float32), np.dtype(np.float64)]), data=st.data())
def test_identities(xp, case, data):
    """exp(log_softmax) == softmax (where softmax is not NaN: a slice with +inf is all NaN there,
    only the +inf entries in log_softmax) and x - log_softmax == logsumexp where finite."""
    x, axis = build(xp, case)
    axes = normalize_axes(axis, x.ndim)
    where, scale = data.draw(extras(x.shape, axes))
    kw = dict(where=_on(xp, where), scale=_on(xp, scale))
    ls = to_host(cusoftmax.log_softmax(x, axis, **kw)).astype(np.float64)
    sm = to_host(cusoftmax.softmax(x, axis, **kw)).astype(np.float64)
    lse = to_host(cusoftmax.logsumexp(x, axis, keepdims=True, **kw)).astype(np.float64)
    rtol = LOG_TOLERANCE[x.dtype.name][0] * 4
    with np.errstate(all="ignore"):
        e = np.exp(ls)
        atol = TOLERANCE[x.dtype.name][1]
        close = np.abs(e - sm) <= atol + rtol * (1 + np.abs(ls)) * sm
        assert ((e == sm) | np.isnan(sm) | close).all()
        v = _values(x, x.dtype, scale)
        fin = np.isfinite(ls) & np.isfinite(v) & np.isfinite(lse)
        lse = np.broadcast_to(lse, fin.shape)[fin]
        diff = (v - ls)[fin]
    assert (np.abs(diff - lse) <= rtol * (1 + np.abs(v[fin]) + np.abs(lse))).all()


def test_dominant_entry_keeps_its_accuracy(xp):
    """-log1p(sum of the others) where x - logsumexp(x) rounds to 0 (SciPy returns 0 there):
    relative accuracy in float64 everywhere and in float32 on the host; the GPU's float32
    kernels keep no sum apart from the max's own term, so there it is the documented absolute
    bound (README: about 1e-7; the contract's atol 1e-6)."""
    for dtype, rtol, x in ((np.float64, 1e-12, [0.0, -50.0, -60.0]),
                           (np.float32, 1e-5, [0.0, -20.0, -30.0])):
        y = to_host(cusoftmax.log_softmax(xp.asarray(x, dtype=dtype)))
        expect = -np.log1p(np.exp(x[1]) + np.exp(x[2]))
        if xp is not np and dtype == np.float32:
            assert abs(y[0] - expect) <= 1e-7, (dtype, y[0], expect)
            continue
        assert y[0] == pytest.approx(expect, rel=rtol), (dtype, y[0], expect)
        assert y[0] != 0


def test_special_values(xp):
    rows = np.array([[inf, 1.0, 2.0], [nan, 1.0, 2.0], [-inf, -inf, -inf], [-inf, 0.0, 1.0],
                     [inf, -inf, 0.0], [1.0, 2.0, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = to_host(cusoftmax.log_softmax(xp.asarray(rows)))
        where = xp.asarray([[True, False, True]] * 5 + [[False] * 3])
        ym = to_host(cusoftmax.log_softmax(xp.asarray(rows), where=where))
        pm = to_host(cusoftmax.softmax(xp.asarray(rows), where=where))
        lm = to_host(cusoftmax.logsumexp(xp.asarray(rows), 1, where=where))
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(y, scipy.special.log_softmax(rows, axis=1), rtol=1e-15)
    np.testing.assert_array_equal(y[0], [nan, -inf, -inf])  # scipy's [inf, 1] -> [nan, -inf]
    np.testing.assert_array_equal(ym[:, 1], -inf)
    np.testing.assert_array_equal(ym[5], -inf)  # a fully masked slice: -inf, never NaN
    np.testing.assert_array_equal(pm[5], 0.0)
    np.testing.assert_array_equal(pm[:, 1], 0.0)
    assert np.isnan(pm[[0, 1, 2]][:, [0, 2]]).all()  # NaN/inf rules in the unmasked part
    assert lm[5] == -inf and lm[2] == -inf and lm[0] == inf and np.isnan(lm[1])


def _vjp_case(xp, case, data):
    """(y, dy, axis, where, dtype): y a softmax output on a reversed (negative-stride) view, dy
    a strided view of random values."""
    x, axis = build(xp, case)
    axes = normalize_axes(axis, x.ndim)
    where, _ = data.draw(extras(x.shape, axes))
    y = cusoftmax.softmax(x, axis, where=_on(xp, where))[(slice(None, None, -1),) * x.ndim]
    if where is not None:
        where = np.broadcast_to(where, x.shape)[(slice(None, None, -1),) * x.ndim]
    seed = data.draw(st.integers(0, 2**32 - 1))
    dy = make_values(np.random.default_rng(seed), x.shape[::-1], np.dtype(np.float64), 2.0,
                     data.draw(st.sampled_from([0.0, 0.05]))).T
    return y, xp.asarray(dy), axes, where, y.dtype


@given(case=views(), data=st.data())
def test_vjps_match_the_formula(xp, case, data):
    y, dy, axes, where, dtype = _vjp_case(xp, case, data)
    yh = to_host(y).astype(np.float64)
    g = to_host(dy).astype(dtype).astype(np.float64)
    kept = np.ones(yh.shape, bool) if where is None else np.broadcast_to(where, yh.shape)
    with np.errstate(all="ignore"):
        ly = np.log(yh)
        t = np.sum(np.where(kept, g * yh, 0.0), axis=axes, keepdims=True)
        ref = np.where(kept, yh * (g - t), 0.0)
        gmax = np.max(np.where(kept, np.abs(g), 0), axis=axes, keepdims=True)
        size = gmax * np.max(np.where(kept, yh, 0), axis=axes, keepdims=True)
        lt = np.sum(np.where(kept, g, 0.0), axis=axes, keepdims=True)
        lsize = gmax + np.abs(lt)
    axis = axes if axes else None
    w = _on(xp, None if where is None else np.ascontiguousarray(where))
    dx = cusoftmax.softmax_vjp(y, dy, axis, where=w)
    assert type(dx) is type(y) and dx.dtype == dtype and dx.shape == y.shape
    check(dx, ref, dtype, VJP_TOLERANCE, np.broadcast_to(size, ref.shape))
    ly_in = xp.asarray(ly.astype(dtype))
    ly_r = to_host(ly_in).astype(np.float64)
    with np.errstate(all="ignore"):
        lref = np.where(kept, g - np.exp(ly_r) * lt, 0.0)
    dlx = cusoftmax.log_softmax_vjp(ly_in, dy, axis, where=w)
    check(dlx, lref, dtype, VJP_TOLERANCE, np.broadcast_to(lsize, ref.shape))


@pytest.mark.parametrize("log", [False, True])
def test_vjps_against_finite_differences(xp, log):
    """d/dx sum(g * f(x)) by central differences in float64, with a mask and a masked row."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 6))
    g = rng.standard_normal((3, 6))
    where = rng.random((3, 6)) < 0.7
    where[1] = False
    fn = cusoftmax.log_softmax if log else cusoftmax.softmax
    vjp = cusoftmax.log_softmax_vjp if log else cusoftmax.softmax_vjp

    def f(xx):
        y = to_host(fn(xp.asarray(xx), where=xp.asarray(where)))
        return np.sum(np.where(where, g * y, 0.0))

    h = 1e-6
    fd = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        fd[i] = (f(x + e) - f(x - e)) / (2 * h)
    y = fn(xp.asarray(x), where=xp.asarray(where))
    dx = to_host(vjp(y, xp.asarray(g), where=xp.asarray(where)))
    np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_out_for_every_function(xp, dtype):
    rng = np.random.default_rng(4)
    x = xp.asarray(make_values(rng, (5, 9), dtype))
    dy = xp.asarray(make_values(rng, (5, 9), dtype))
    calls = [
        lambda o: cusoftmax.softmax(x, scale=0.5, out=o),
        lambda o: cusoftmax.log_softmax(x, out=o),
        lambda o: cusoftmax.softmax_vjp(x, dy, out=o),
        lambda o: cusoftmax.log_softmax_vjp(x, dy, out=o),
    ]
    for call in calls:
        expect = to_host(call(None))
        out = xp.full(x.shape, np.nan, dtype)
        assert call(out) is out
        assert_same_bits(out, expect)
    x2 = x.copy()
    assert cusoftmax.log_softmax(x2, out=x2) is x2  # in place
    assert_same_bits(x2, cusoftmax.log_softmax(x))
    out = xp.zeros(5, dtype)
    assert cusoftmax.logsumexp(x, 1, out=out) is out
    assert_same_bits(out, cusoftmax.logsumexp(x, 1))
    pair = (xp.zeros((5, 1), dtype), xp.zeros((5, 1), dtype))
    assert cusoftmax.logsumexp(x, 1, keepdims=True, return_sign=True, out=pair) is pair
    assert (to_host(pair[1]) == 1).all()


def test_other_axis_of_length_zero(xp):
    x = xp.ones((2, 0, 4), np.float32)
    for y in (cusoftmax.log_softmax(x), cusoftmax.softmax(x, where=xp.ones(4, bool)),
              cusoftmax.softmax_vjp(x, x), cusoftmax.log_softmax_vjp(x, x, axis=(0, 2))):
        assert type(y) is type(x) and y.shape == x.shape and y.dtype == np.float32
    assert cusoftmax.logsumexp(x, (0, 2), keepdims=True).shape == (1, 0, 1)


def _bad_calls(xp):
    """(function of out, out, error) for arguments that must be refused before any write."""
    x = xp.ones((3, 4), np.float32)
    o = xp.zeros((3, 4), np.float32)
    o3 = xp.zeros(3, np.float32)
    dy = xp.ones((3, 4), np.float32)
    return [
        (lambda out: cusoftmax.softmax(x, where=xp.ones(3, bool), out=out), o, ValueError),
        (lambda out: cusoftmax.softmax(x, where=xp.ones(4), out=out), o, TypeError),
        (lambda out: cusoftmax.log_softmax(x, where=xp.ones((2, 4), bool), out=out), o,
         ValueError),
        (lambda out: cusoftmax.log_softmax(x, scale=xp.ones((3, 4)), out=out), o, ValueError),
        (lambda out: cusoftmax.log_softmax(x, scale=xp.ones(3), out=out), o, ValueError),
        (lambda out: cusoftmax.softmax(x, scale=True, out=out), o, TypeError),
        (lambda out: cusoftmax.softmax(x, scale=1j, out=out), o, TypeError),
        *([(lambda out: cusoftmax.log_softmax(x, method="block", out=out), o, ValueError)]
          if xp is np else []),  # on the host no method applies; on the GPU block holds the rows
        (lambda out: cusoftmax.log_softmax(x, method="fastest", out=out), o, ValueError),
        (lambda out: cusoftmax.softmax(x, where=xp.ones(4, bool), method="block", out=out), o,
         ValueError),
        (lambda out: cusoftmax.logsumexp(x, 1, b=xp.ones(3), out=out), o3, ValueError),
        (lambda out: cusoftmax.logsumexp(x, 1, b=xp.ones(4, np.complex64), out=out), o3,
         TypeError),
        (lambda out: cusoftmax.logsumexp(x, 1, where=xp.ones(5, bool), out=out), o3, ValueError),
        (lambda out: cusoftmax.logsumexp(x, 1, return_sign=True, out=out), o3, TypeError),
        (lambda out: cusoftmax.logsumexp(x, 0, out=out), o3, ValueError),
        (lambda out: cusoftmax.softmax_vjp(x, xp.ones((4, 3), np.float32), out=out), o,
         ValueError),
        (lambda out: cusoftmax.log_softmax_vjp(x, dy.astype(np.complex64), out=out), o, TypeError),
        (lambda out: cusoftmax.softmax_vjp(x, dy, where=xp.ones((3, 1)), out=out), o, TypeError),
        (lambda out: cusoftmax.log_softmax_vjp(x, dy, axis=2, out=out), o, np.exceptions.AxisError),
        (lambda out: cusoftmax.log_softmax(xp.ones((3, 0)), axis=1), None, ValueError),
    ]


def test_bad_input_raises_before_anything_is_written(xp):
    for call, out, err in _bad_calls(xp):
        with pytest.raises(err):
            call(out)
        if out is not None:
            assert not to_host(out).any()


def test_gpu_operands_with_host_input_are_refused():
    cupy = pytest.importorskip("cupy")
    from _support import GPU_REASON

    if GPU_REASON is not None:
        pytest.skip(f"needs a GPU: {GPU_REASON}")
    with pytest.raises(TypeError, match="GPU"):
        cusoftmax.softmax(np.ones((2, 3)), where=cupy.ones(3, bool))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_no_warnings_for_nan_and_inf(xp, dtype):
    x = xp.asarray(np.array([[nan, inf, -inf], [-inf, -inf, -inf], [inf, 0, 1]]).astype(dtype))
    where = xp.asarray([True, True, False])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fn in (cusoftmax.softmax, cusoftmax.log_softmax):
            fn(x, where=where, scale=2.0)
            fn(x)
        cusoftmax.logsumexp(x, 1, b=xp.asarray([1.0, -1.0, 0.0]), return_sign=True)
        cusoftmax.logsumexp(x, 1, where=where)
        cusoftmax.softmax_vjp(x, x, where=where)
        cusoftmax.log_softmax_vjp(x, x)


def test_all_exported():
    assert set(cusoftmax.__all__) == {"softmax", "log_softmax", "logsumexp", "softmax_vjp",
                                      "log_softmax_vjp", "softmax_topk", "segment_softmax",
                                      "segment_log_softmax", "segment_logsumexp",
                                      "segment_softmax_vjp", "segment_log_softmax_vjp"}
    for name in cusoftmax.__all__:
        doc = getattr(cusoftmax, name).__doc__
        assert "Parameters\n    ----------" in doc and "Returns\n    -------" in doc


@pytest.mark.parametrize("shape,axis", [((3000, 300), -1), ((40, 30000), 1),
                                        ((20, 300, 200), (1, 2))])
def test_host_pieces_give_the_whole_arrays_bits(shape, axis):
    """The host's log_softmax and logsumexp work a cache-sized piece of slices at a time: the
    same bits as the array operations on the whole array, into out and in place too."""
    from cusoftmax import _composed as C
    from cusoftmax._layout import normalize_axes

    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32) * 5
    x[1] = -np.inf
    x[..., 3] = np.nan
    axes = normalize_axes(axis, x.ndim)
    st = C.state(np, x, axes)
    whole = C.normalize(np, "log_softmax", x, st, axes)
    lse, sign = C.log_sum(np, st, True, dtype=np.float32)
    assert_array_equal(cusoftmax.log_softmax(x, axis=axis), whole)
    got, got_sign = cusoftmax.logsumexp(x, axis=axis, keepdims=True, return_sign=True)
    assert_array_equal(got, lse)
    assert_array_equal(got_sign, sign)
    out = np.empty(shape, np.dtype(np.float32).newbyteorder())
    assert cusoftmax.log_softmax(x, axis=axis, out=out) is out
    assert_array_equal(out, whole)
    inplace = x.copy()
    cusoftmax.log_softmax(inplace, axis=axis, out=inplace)
    assert_array_equal(inplace, whole)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,axis", [((6, 5, 7), -1), ((6, 5, 7), (0, 2)), ((6, 5, 7), 0),
                                        ((70, 3), 0), ((3, 100003), -1)])
def test_host_vjps(dtype, log, shape, axis):
    """The host's VJPs (float32 sums pairwise along runs, in blocks of 16 along a strided axis)
    within VJP_TOLERANCE of float64, specials where ``_composed``'s are, into `out` alike;
    float64 with ``_composed``'s bits."""
    from cusoftmax import _composed as C
    from cusoftmax._accuracy import vjp_reference

    rng = np.random.default_rng(3)
    axes = normalize_axes(axis, len(shape))
    forward = scipy.special.log_softmax if log else scipy.special.softmax
    y = forward(rng.standard_normal(shape) * 3, axis=axes).astype(dtype)  # a forward's output
    dy = rng.standard_normal(shape).astype(dtype)
    fn = cusoftmax.log_softmax_vjp if log else cusoftmax.softmax_vjp
    got = fn(y, dy, axis=axis)
    ref, size = vjp_reference(np, y, dy, axes, log)
    assert violations(got, ref, dtype.name, VJP_TOLERANCE, np.broadcast_to(size, ref.shape)) \
        is None
    if dtype == np.float64:
        assert_same_bits(got, C.vjp(np, y, dy, C.vjp_sum(np, y, dy, axes, log=log), log=log))
    out = np.empty_like(y)
    assert fn(y, dy, axis=axis, out=out) is out
    assert_same_bits(out, got)
    y[(0,) * y.ndim], dy[(1,) * y.ndim], dy[(2,) * y.ndim] = np.inf, np.nan, -np.inf
    nan_where = np.isnan(C.vjp(np, y, dy, C.vjp_sum(np, y, dy, axes, log=log), log=log))
    assert_array_equal(np.isnan(fn(y, dy, axis=axis)), nan_where)


@pytest.mark.parametrize("log", [False, True])
def test_host_vjp_calls_like_earlier_ones(log):
    """A NumPy VJP call like an earlier one (its rules' axes and dtype kept, keyed by dy's shape
    and dtype too) gives the first call's bits; a dy of another dtype or shape is checked
    again."""
    from cusoftmax import _engine

    fn = cusoftmax.log_softmax_vjp if log else cusoftmax.softmax_vjp
    rng = np.random.default_rng(8)
    for dtype, axis in ((np.float32, -1), (np.float16, 0), (np.int64, 1)):
        y = (rng.standard_normal((5, 9)) * 3).astype(dtype)
        dy = rng.standard_normal((5, 9)).astype(dtype)
        first = fn(y, dy, axis)
        assert _engine.host_call(y, axis, (fn.__name__, dy.shape, dy.dtype)) is not None
        assert_same_bits(fn(y, dy, axis), first)
        assert_same_bits(fn(y, dy.astype(np.float64), axis), fn(y, dy.astype(np.float64), axis))
        with pytest.raises(ValueError, match="dy has shape"):
            fn(y, dy[:, :4], axis)
        with pytest.raises(TypeError):
            fn(y, dy.astype(np.complex64), axis)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape,axis", [((300, 3000), -1), ((7, 300000), 1), ((30, 300), 0)])
def test_host_logsumexp_gives_the_array_operations_bits(dtype, shape, axis):
    """The host's logsumexp in pieces gives ``_composed``'s bits, in every float dtype."""
    from cusoftmax import _composed as C
    from cusoftmax._layout import normalize_axes

    x = (np.random.default_rng(4).standard_normal(shape) * 5).astype(dtype)
    x[1] = -np.inf
    x[2, 3], x[3, 4], x[4, :] = np.nan, np.inf, 7
    axes = normalize_axes(axis, x.ndim)
    lse, sign = C.log_sum(np, C.state(np, x, axes), True, dtype=dtype)
    got, got_sign = cusoftmax.logsumexp(x, axis=axis, keepdims=True, return_sign=True)
    assert_same_bits(got, lse)
    assert_same_bits(got_sign, sign)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_host_rows_longer_than_a_piece(dtype):
    """Rows past a cache-sized piece go a chunk at a time, their states merged: log_softmax and
    logsumexp within their bounds, specials as SciPy's, a row's bits independent of the rows
    beside it, in place too."""
    from cusoftmax import _host

    n = _host.PIECE_BYTES // 4 + 1000  # longer than a piece in the compute type
    x = (np.random.default_rng(6).standard_normal((3, n)) * 4).astype(dtype)
    x[1, 7] = np.nan
    x[2, :] = -np.inf
    x[2, 5] = 1.0
    assert _host._long_rows(x, (1,))
    ref = scipy.special.log_softmax(x.astype(np.float64), axis=1)
    got = cusoftmax.log_softmax(x)
    assert violations(got, ref, dtype.name, LOG_TOLERANCE) is None
    lse = cusoftmax.logsumexp(x, axis=1)
    lref = scipy.special.logsumexp(x.astype(np.float64), axis=1)
    assert violations(lse, lref, dtype.name, LOG_TOLERANCE) is None
    assert_same_bits(cusoftmax.log_softmax(x[:1]), got[:1])
    assert_same_bits(cusoftmax.logsumexp(x[2:], axis=1), lse[2:])
    inplace = x.copy()
    assert cusoftmax.log_softmax(inplace, out=inplace) is inplace
    assert_same_bits(inplace, got)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("shape,axis", [((300, 3000), 0), ((40, 500, 30), 1), ((140000, 5), 0)])
def test_host_strided_axis_in_steps(dtype, shape, axis):
    """One strided reduced axis of an array past a piece goes STEPS of it at a time, the
    steps' states merged: log_softmax and logsumexp within their bounds, specials as SciPy's,
    a slice's bits independent of the slices beside it (on this path), into out and in place."""
    from cusoftmax import _host

    x = (np.random.default_rng(2).standard_normal(shape) * 5).astype(dtype)
    x[1] = -np.inf
    x[..., 3] = np.nan
    assert _host._split_axis(x, (axis,))
    from cusoftmax import _composed as C

    x64 = x.astype(np.float64)  # the reference: float64 array operations on the whole array
    st = C.state(np, x64, (axis % x.ndim,))
    ref = C.normalize(np, "log_softmax", x64, st, (axis % x.ndim,))
    lref = C.log_sum(np, st)
    got = cusoftmax.log_softmax(x, axis=axis)
    assert violations(got, ref, dtype.name, LOG_TOLERANCE) is None
    lse = cusoftmax.logsumexp(x, axis=axis, keepdims=True)
    assert violations(lse, lref, dtype.name, LOG_TOLERANCE) is None
    half = x[..., : x.shape[-1] // 2 + 1] if axis != x.ndim - 1 else x
    if _host._split_axis(half, (axis,)):
        assert_same_bits(cusoftmax.log_softmax(half, axis=axis), got[..., : half.shape[-1]])
    out = np.empty(shape, dtype)
    assert cusoftmax.log_softmax(x, axis=axis, out=out) is out
    assert_same_bits(out, got)
    inplace = x.copy()
    cusoftmax.log_softmax(inplace, axis=axis, out=inplace)
    assert_same_bits(inplace, got)
