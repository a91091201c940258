"""The behaviour contract (DESIGN.md section 3), on the host path and on the GPU."""

import warnings

import ml_dtypes
import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st

import cusoftmax
from _support import GPU_REASON, BF16, assert_same_bits, FLOAT_DTYPES, assert_softmax, assert_sums_to_one, build, make_values, to_host, views



@given(case=views())
def test_matches_scipy_on_any_view(xp, case):
    x, axis = build(xp, case)
    before = to_host(x).copy()
    y = cusoftmax.softmax(x, axis=axis)
    assert type(y) is type(x)
    assert y.shape == x.shape
    dtype = cusoftmax._args.result_dtype(x.dtype)
    assert_softmax(y, x, axis, dtype)
    assert_same_bits(x, before)  # input never written


@given(case=views(dtypes=FLOAT_DTYPES))
def test_slices_sum_to_one(xp, case):
    x, axis = build(xp, case)
    assert_sums_to_one(cusoftmax.softmax(x, axis=axis), axis)


@given(
    dtype=st.sampled_from(FLOAT_DTYPES),
    shape=st.sampled_from([(7,), (3, 40), (5, 517), (2, 3, 33)]),
    seed=st.integers(0, 2**32 - 1),
)
def test_shift_invariance(xp, dtype, shape, seed):
    """softmax(x + c) == softmax(x): inputs on a grid that the shift keeps exact."""
    step, c = (0.5, 16.0) if dtype == BF16 else (0.125, 32.0)
    rng = np.random.default_rng(seed)
    grid = rng.integers(-16, 16, size=shape) * step
    x, xs = xp.asarray(grid.astype(dtype)), xp.asarray((grid + c).astype(dtype))
    assert np.array_equal(to_host(xs).astype(np.float64) - c, to_host(x).astype(np.float64))
    y, ys = cusoftmax.softmax(x), cusoftmax.softmax(xs)
    assert_softmax(ys, x, -1, dtype)
    assert_softmax(y, x, -1, dtype)


def test_special_values(xp):
    inf, nan = np.inf, np.nan
    x = xp.asarray(
        [
            [-inf, 0.0, -inf],  # -inf entries give 0
            [1.0, inf, 2.0],  # +inf: slice all NaN
            [1.0, nan, 2.0],  # NaN: slice all NaN
            [-inf, -inf, -inf],  # all -inf: all NaN
            [0.0, np.log(2.0), np.log(5.0)],  # a normal row beside them
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = to_host(cusoftmax.softmax(x, axis=1))
    np.testing.assert_array_equal(y[0], [0.0, 1.0, 0.0])
    assert np.isnan(y[1:4]).all()
    np.testing.assert_allclose(y[4], [1 / 8, 2 / 8, 5 / 8], rtol=1e-14)


def test_axis_none_and_zero_d(xp):
    assert float(to_host(cusoftmax.softmax(xp.asarray(3.5), axis=None))) == 1.0
    x = xp.asarray(make_values(np.random.default_rng(0), (3, 4, 5), np.dtype(np.float32)))
    assert_softmax(cusoftmax.softmax(x, axis=None), x, None)
    assert_softmax(cusoftmax.softmax(x, axis=(0, 2)), x, (0, 2))
    assert_softmax(cusoftmax.softmax(x, axis=-2), x, -2)


@pytest.mark.parametrize("axis", [3, -4, (0, 3), 10**20])
def test_axis_out_of_range(xp, axis):
    with pytest.raises(np.exceptions.AxisError):
        cusoftmax.softmax(xp.ones((2, 3, 4)), axis=axis)


@pytest.mark.parametrize("value,expect", [(3.0, 1.0), (-1e300, 1.0), (np.nan, np.nan),
                                          (np.inf, np.nan), (-np.inf, np.nan)])
def test_zero_d_with_axis_0_or_minus_1(xp, value, expect):
    """As scipy.special.softmax: the default axis -1 and axis 0 reduce a 0-d input's one value."""
    for axis in (-1, 0, None):
        y = cusoftmax.softmax(xp.asarray(value), axis=axis)
        assert type(y) is xp.ndarray and y.shape == () and y.dtype == np.float64
        np.testing.assert_array_equal(to_host(y), expect)
    assert float(cusoftmax.softmax(np.float64(value))) == expect or np.isnan(expect)
    for axis in (1, -2, (0,)):
        with pytest.raises(np.exceptions.AxisError, match="out of bounds"):
            cusoftmax.softmax(xp.asarray(value), axis=axis)


@pytest.mark.parametrize("axis", [True, np.True_, (0, True), 1.0, (0, 1.0)])
def test_axis_of_another_type_is_a_type_error(xp, axis):
    """bool is not an axis (SciPy: TypeError), nor a float, even after a call with axis 1 (the
    cached calls compare keys, and True == 1.0 == 1)."""
    x = xp.ones((2, 3))
    cusoftmax.softmax(x, axis=1)
    cusoftmax.softmax(x, axis=(0, 1))
    with pytest.raises(TypeError):
        cusoftmax.softmax(x, axis=axis)


def test_repeated_axis(xp):
    with pytest.raises(ValueError, match="repeated"):
        cusoftmax.softmax(xp.ones((2, 3)), axis=(1, -1))


SUPPORTED = "softmax takes real floating-point or integer arrays"


@pytest.mark.parametrize("dtype", ["bool", "complex64", "complex128"])
def test_unsupported_dtypes_name_the_dtype(xp, dtype):
    with pytest.raises(TypeError, match=dtype) as info:
        cusoftmax.softmax(xp.ones((2, 3), dtype=dtype))
    info.match(SUPPORTED)


def test_object_and_string_dtypes():
    for x in (np.array(["a", "b"]), np.array([1, None], dtype=object)):
        with pytest.raises(TypeError, match=str(x.dtype)) as info:
            cusoftmax.softmax(x)
        info.match(SUPPORTED)


FLOAT8 = [np.dtype(getattr(ml_dtypes, n)) for n in dir(ml_dtypes)
          if n.startswith("float8_") and n != "float8_e8m0fnu"]


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_types_on_the_host(dtype):
    """Computed in float32, one rounding to the float8 type at the store (as the half types)."""
    unsigned = ml_dtypes.finfo(dtype).min >= 0
    v = make_values(np.random.default_rng(3), (9, 37), np.dtype(np.float32), scale=2.0)
    v[4, 5] = np.nan  # one slice of NaN beside normal ones
    x = (np.abs(v) if unsigned else v).astype(dtype)
    y = cusoftmax.softmax(x)
    assert y.dtype == dtype
    assert_softmax(y, x, -1)
    assert_same_bits(y, cusoftmax.softmax(x.astype(np.float32)).astype(dtype))
    assert np.isnan(y[4].astype(np.float32)).all() and not np.isnan(y[:4].astype(np.float32)).any()
    assert_softmax(cusoftmax.softmax(x.T, axis=0), x.T, 0)


def test_float8_without_a_zero_is_refused():
    """float8_e8m0fnu (powers of two only) holds no 0 for the -inf entries and tiny values."""
    x = np.ones(3, ml_dtypes.float8_e8m0fnu)
    with pytest.raises(TypeError, match="float8_e8m0fnu.*zero"):
        cusoftmax.softmax(x)


@pytest.mark.skipif(np.finfo(np.longdouble).eps >= np.finfo(np.float64).eps,
                    reason="longdouble is float64 here")
def test_longdouble_on_the_host():
    """Computed in longdouble (as SciPy): closer to SciPy's longdouble result than float64 gets."""
    x = make_values(np.random.default_rng(4), (5, 300), np.dtype(np.float64)).astype(np.longdouble)
    x += np.longdouble(1) / 3  # values float64 cannot hold
    y = cusoftmax.softmax(x)
    assert y.dtype == np.longdouble
    assert_softmax(y, x, -1)
    with np.errstate(all="ignore"):
        ref = scipy.special.softmax(x, axis=-1)
    np.testing.assert_allclose(y, ref, rtol=4 * float(np.finfo(np.longdouble).eps), atol=0)
    assert_softmax(cusoftmax.softmax(x, axis=0), x, 0)


@pytest.mark.parametrize("dtype", FLOAT8[:2] + [np.dtype(np.longdouble)], ids=str)
def test_host_only_types_on_the_gpu(dtype):
    """A GPU array of a type no kernel takes is a TypeError that says to use the host."""
    if GPU_REASON is not None:
        pytest.skip(f"needs a GPU: {GPU_REASON}")
    import cupy

    if dtype == np.float64:
        pytest.skip("longdouble is float64 here")
    try:
        x = cupy.zeros(4, dtype)
    except Exception as e:  # CuPy holds no array of this type: nothing to refuse
        pytest.skip(f"CuPy has no {dtype} arrays ({type(e).__name__}: {e})")
    with pytest.raises(TypeError, match=f"{dtype}.*host only"):
        cusoftmax.softmax(x)


@pytest.mark.parametrize(
    "dtype,expected",
    [("int8", "float16"), ("uint8", "float16"), ("int16", "float32"), ("uint16", "float32"),
     ("int32", "float64"), ("uint32", "float64"), ("int64", "float64"), ("uint64", "float64")],
)
def test_integer_promotion_follows_exp(xp, dtype, expected):
    assert np.exp(np.ones(1, dtype)).dtype == expected
    x = xp.asarray(np.arange(12, dtype=dtype).reshape(3, 4))
    y = cusoftmax.softmax(x)
    assert y.dtype == expected
    assert_softmax(y, x, -1, expected)


def test_reduced_axis_of_length_zero(xp):
    with pytest.raises(ValueError, match="length 0"):
        cusoftmax.softmax(xp.ones((3, 0)), axis=1)


def test_other_axis_of_length_zero(xp):
    y = cusoftmax.softmax(xp.ones((0, 4), dtype=np.float32), axis=1)
    assert y.shape == (0, 4) and y.dtype == np.float32 and type(y) is xp.ndarray


def test_out_and_in_place(xp):
    x = xp.asarray(make_values(np.random.default_rng(1), (6, 50), np.dtype(np.float32)))
    expect = to_host(cusoftmax.softmax(x))
    out = xp.full(x.shape, np.nan, dtype=np.float32)
    assert cusoftmax.softmax(x, out=out) is out
    np.testing.assert_array_equal(to_host(out), expect)
    x2 = x.copy()
    assert cusoftmax.softmax(x2, out=x2) is x2
    np.testing.assert_array_equal(to_host(x2), expect)
    t = x.T.copy()  # out with other strides than x
    outT = xp.full(t.shape, np.nan, dtype=np.float32)
    cusoftmax.softmax(t, axis=0, out=outT)
    np.testing.assert_allclose(to_host(outT).T, expect, rtol=1e-6, atol=1e-7)


def test_out_overlapping_the_input(xp):
    base = xp.asarray(make_values(np.random.default_rng(2), (9, 40), np.dtype(np.float64)))
    expect = to_host(cusoftmax.softmax(base[1:]))
    cusoftmax.softmax(base[1:], out=base[:-1])  # out shifted by one row over x
    np.testing.assert_allclose(to_host(base[:-1]), expect, rtol=1e-13)


def test_out_checked_before_writing(xp):
    x = xp.ones((3, 4), dtype=np.float32)
    for bad, err in [
        (xp.zeros((4, 3), np.float32), ValueError),
        (xp.zeros((3, 4), np.float64), TypeError),
        (np.zeros((3, 4), np.float32) if xp is not np else [[0.0] * 4] * 3, TypeError),
    ]:
        with pytest.raises(err):
            cusoftmax.softmax(x, out=bad)
        if hasattr(bad, "shape"):
            assert not to_host(bad).any()


def test_no_warnings_for_nan_and_inf(xp):
    x = xp.asarray([[np.nan, np.inf, -np.inf], [-np.inf, -np.inf, -np.inf]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = cusoftmax.softmax(x)
    assert np.isnan(to_host(y)).all()


def test_lists_and_scalars_go_to_the_host():
    y = cusoftmax.softmax([1.0, 2.0, 3.0])
    assert isinstance(y, np.ndarray)
    assert_softmax(y, np.array([1.0, 2.0, 3.0]), -1)


def test_method_is_for_gpu_inputs():
    with pytest.raises(ValueError, match="GPU"):
        cusoftmax.softmax(np.ones(3), method="registers")


@pytest.mark.parametrize("method", ["bogus", 3, "Registers", ""])
def test_unknown_method_lists_the_methods(xp, method):
    """Checked before the host/GPU split: the same ValueError on both."""
    with pytest.raises(ValueError, match="registers.*online") as info:
        cusoftmax.softmax(xp.ones((2, 3)), method=method)
    assert repr(method) in str(info.value)


@pytest.mark.parametrize("out", [[0.0, 0.0], (0.0, 0.0), 0.0, np.float64(0.0)])
def test_out_that_is_not_an_array(xp, out):
    """As numpy.exp: an out that is not an array is a TypeError, never silently dropped."""
    with pytest.raises(TypeError, match="out"):
        cusoftmax.softmax(xp.asarray([1.0, 2.0]), out=out)
    if isinstance(out, list):
        assert out == [0.0, 0.0]


@pytest.mark.parametrize("order", [">", "<"])
def test_byte_order(order):
    """The result is in native byte order (as SciPy's); out= may be in either (as numpy.exp)."""
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], order + "f4")
    expect = cusoftmax.softmax(x.astype(np.float32))
    y = cusoftmax.softmax(x)
    assert y.dtype == np.float32 and y.dtype.isnative
    assert_same_bits(y, expect)
    for out in (np.empty(x.shape, "<f4"), np.empty(x.shape, ">f4")):
        assert cusoftmax.softmax(x, out=out) is out
        np.testing.assert_array_equal(out, expect)
    with pytest.raises(TypeError, match="dtype"):
        cusoftmax.softmax(x, out=np.empty(x.shape, order + "f8"))
    yi = cusoftmax.softmax(np.arange(6, dtype=order + "i2").reshape(2, 3))
    assert yi.dtype == np.float32 and yi.dtype.isnative


@pytest.mark.parametrize("layout", ["rows", "axis 0", "axis 0 of F order", "axis 1 of a view",
                                    "axes (0, 2)", "transposed axes"])
def test_float32_host_sums_of_long_slices(layout):
    """DESIGN.md "Long rows": a float32 slice's normalizer stays within 1e-6 relative on the host
    for every layout (NumPy adds a strided axis one term after another: 1e-4 off here)."""
    n = 2**21
    v = make_values(np.random.default_rng(5), (4 * n,), np.dtype(np.float32), scale=1.0)
    x, axis = {
        "rows": (v.reshape(4, n), -1),
        "axis 0": (v.reshape(n, 4), 0),
        "axis 0 of F order": (np.asfortranarray(v.reshape(n, 4)), 0),
        "axis 1 of a view": (v.reshape(4, n, 1)[:, ::-1, :], 1),
        "axes (0, 2)": (v.reshape(2048, 4, 1024), (0, 2)),
        "transposed axes": (v.reshape(1024, 4, 2048).transpose(2, 1, 0), (2, 0)),
    }[layout]
    y = cusoftmax.softmax(x, axis=axis)
    sums = np.sum(y, axis=axis, dtype=np.float64)
    assert np.abs(sums - 1).max() <= 1e-6


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int16"])
@pytest.mark.parametrize("layout", ["rows", "F order", "3-D, outer axis last", "axis 0"])
def test_host_pieces_agree_with_one_pass(monkeypatch, dtype, layout):
    """The host path runs big arrays in pieces that stay in cache: pieces of whole rows give
    bitwise the result of one pass over the whole array; pieces along a strided axis add the
    partial sums in another order, a few ulps apart."""
    from cusoftmax import _host

    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    v = make_values(np.random.default_rng(6), (300, 1001), dt, specials=0.01)
    x, axis = {"rows": (v, 1), "F order": (np.asfortranarray(v.T), 0),
               "3-D, outer axis last": (v.reshape(300, 7, 143).transpose(1, 0, 2), 2),
               "axis 0": (v, 0)}[layout]
    monkeypatch.setattr(_host, "PIECE_BYTES", 2**14)
    pieces = cusoftmax.softmax(x, axis=axis)
    cut = len(_host._row_pieces(np.empty_like(x, np.float32), (axis,)))
    monkeypatch.setattr(_host, "PIECE_BYTES", 2**40)
    whole = cusoftmax.softmax(x, axis=axis)
    assert_softmax(pieces, x, axis, cusoftmax._args.result_dtype(x.dtype))
    if layout == "axis 0":
        np.testing.assert_allclose(pieces.astype(np.float64), whole.astype(np.float64),
                                   rtol=16 * float(ml_dtypes.finfo(pieces.dtype).eps), atol=0)
    else:
        assert cut > 10
        assert_same_bits(pieces, whole)


def test_host_float16_store_rounds_as_numpy_casts():
    """The host's store to float16 (small values rounded to float16's grid first) gives the
    bits of NumPy's float32 -> float16 cast, ties and subnormals included."""
    from cusoftmax import _host

    rng = np.random.default_rng(7)
    bits = np.concatenate([
        rng.integers(0, 0x3F800001, 2**20, dtype=np.uint32),  # [0, 1]
        np.arange(0x32800000, 0x39800000, 997, dtype=np.uint32),  # 2**-26 .. 2**-12
        np.array([0x7FC00000, 0xFFC00000, 0x7F800000], np.uint32),  # NaN, -NaN, inf
    ])
    ties = (np.arange(4096, dtype=np.float32) + np.float32(0.5)) * np.float32(2**-24)
    e = np.concatenate([bits.view(np.float32), ties])
    y = np.empty(e.shape, np.float16)
    with np.errstate(all="ignore"):
        expect = e.astype(np.float16)
        _host._quotient(e.copy(), np.float32(1), y)
    assert_same_bits(y, expect)


@pytest.mark.skipif(GPU_REASON is not None, reason=f"needs a GPU: {GPU_REASON}")
@pytest.mark.parametrize("cols", [256, 2**21])  # a fused kernel's launch, and a two-pass one's
def test_first_call_from_a_new_thread(cols):
    """A thread whose first CUDA work is a cusoftmax call (as a Dask worker thread's, its
    arrays made elsewhere): the launch finds the device's context although the thread made no
    runtime call that would have bound it."""
    import threading

    import cupy

    x = cupy.asarray(make_values(np.random.default_rng(3), (4, cols), np.dtype(np.float32)))
    expect = cusoftmax.softmax(x)
    cupy.cuda.Device().synchronize()
    got, failed = [], []

    def work():
        try:
            got.append(to_host(cusoftmax.softmax(x)))
        except Exception as e:  # reported by the main thread's assert
            failed.append(e)

    for _ in range(2):  # the second thread meets launches cached by the first
        t = threading.Thread(target=work)
        t.start()
        t.join()
    assert not failed, failed
    assert len(got) == 2
    for y in got:
        assert_same_bits(y, expect)
