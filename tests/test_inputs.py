"""Inputs a NumPy user passes: 0-d arrays and scalars, ndarray subclasses, empty sums, weights
that broadcast with `a`, and the messages of refused ones (host and GPU alike where `xp`)."""

import numpy as np
import pytest
import scipy.special

import cusoftmax
from _support import to_host

FUNCTIONS = ["softmax", "log_softmax", "logsumexp"]
ZERO_D = [np.array(3.0), np.float32(3), 3, 3.0, np.longdouble(3), np.array(3.0, np.float32),
          np.int16(-2)]


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("x", ZERO_D, ids=lambda v: f"{type(v).__name__}")
def test_zero_d_inputs_and_scalars(name, x):
    """As SciPy: softmax 1, log_softmax 0, logsumexp the value, in the result's dtype."""
    got = getattr(cusoftmax, name)(x)
    want = getattr(scipy.special, name)(np.asarray(x, np.float64))
    assert np.ndim(got) == 0 and float(got) == float(want)
    assert np.asarray(got).dtype == cusoftmax._args.result_dtype(np.asarray(x).dtype)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_zero_d_out(name):
    out = np.full((), np.nan)
    assert getattr(cusoftmax, name)(np.array(3.0), out=out) is out
    assert float(out) == (1.0 if name == "softmax" else 0.0)


@pytest.mark.parametrize("call", [
    lambda m: cusoftmax.softmax(m), lambda m: cusoftmax.log_softmax(m),
    lambda m: cusoftmax.logsumexp(m), lambda m: cusoftmax.softmax_topk(m, 2),
    lambda m: cusoftmax.softmax_vjp(m, np.ones(3)), lambda m: cusoftmax.log_softmax(
        np.ones(3), out=m),
    lambda m: cusoftmax.logsumexp(np.ones(3), b=m)])
def test_masked_arrays_are_refused_naming_where(call):
    """A MaskedArray's mask would be ignored: refused, pointing to where=."""
    m = np.ma.array([1.0, 2.0, 3.0], mask=[0, 0, 1])
    with pytest.raises(TypeError, match="MaskedArray.*where="):
        call(m)


def test_where_gives_what_a_masked_array_means():
    m = np.ma.array([1.0, 2.0, 3.0], mask=[0, 0, 1])
    got = cusoftmax.logsumexp(m.data, where=~np.ma.getmaskarray(m))
    assert got == pytest.approx(scipy.special.logsumexp([1.0, 2.0]), rel=1e-15)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
def test_matrix_is_taken_as_its_ndarray(name):
    m = np.matrix([[1.0, 2.0], [3.0, 5.0]])
    got = getattr(cusoftmax, name)(m, axis=1)
    want = getattr(scipy.special, name)(np.asarray(m), axis=1)
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, want, rtol=1e-14)
    values, indices = cusoftmax.softmax_topk(m, 1)
    assert type(values) is np.ndarray and indices.ravel().tolist() == [1, 1]


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_matrix_out_is_written():
    out = np.matrix(np.zeros((2, 2)))
    cusoftmax.softmax(np.ones((2, 2)), out=out)
    assert (np.asarray(out) == 0.5).all()


@pytest.mark.parametrize("shape,axis", [((0,), None), ((0, 3), 0), ((0, 3), None),
                                        ((2, 0, 3), (0, 1)), ((4, 0), -1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_of_an_empty_sum_is_minus_inf(xp, shape, axis, keepdims):
    """As SciPy (1-d and one axis; SciPy 1.17 raises IndexError for the others): log 0 = -inf,
    in the shape of NumPy's sum."""
    a = xp.ones(shape, np.float32)
    got = cusoftmax.logsumexp(a, axis=axis, keepdims=keepdims)
    want = np.sum(np.ones(shape), axis=axis, keepdims=keepdims)
    if len(shape) == 1 or isinstance(axis, int):
        assert (scipy.special.logsumexp(np.ones(shape), axis=axis, keepdims=keepdims)
                == -np.inf).all()
    assert np.shape(got) == np.shape(want) and np.asarray(to_host(got)).dtype == np.float32
    assert (np.asarray(to_host(got)) == -np.inf).all()
    res, sign = cusoftmax.logsumexp(a, axis=axis, keepdims=keepdims, return_sign=True)
    assert (np.asarray(to_host(res)) == -np.inf).all() and (np.asarray(to_host(sign)) == 0).all()


@pytest.mark.parametrize("ashape,bshape,axis", [((3,), (2, 3), None), ((3,), (2, 3), -1),
                                                ((3,), (2, 3), 0), ((2, 1), (1, 4), 1),
                                                ((), (5,), None)])
def test_logsumexp_broadcasts_a_with_b(xp, ashape, bshape, axis):
    """As SciPy: `a` and `b` broadcast together, `axis` counts in the common shape."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(ashape), rng.random(bshape) + 0.1
    want = scipy.special.logsumexp(a, axis=axis, b=b)
    got = to_host(cusoftmax.logsumexp(xp.asarray(a), axis=axis, b=xp.asarray(b)))
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_logsumexp_b_that_does_not_broadcast():
    with pytest.raises(ValueError, match=r"b of shape \(2, 4\) does not broadcast with a's"):
        cusoftmax.logsumexp(np.ones(3), b=np.ones((2, 4)))


@pytest.mark.parametrize("name,call", [
    ("softmax", lambda x: cusoftmax.softmax(x)),
    ("log_softmax", lambda x: cusoftmax.log_softmax(x)),
    ("logsumexp", lambda x: cusoftmax.logsumexp(x)),
    ("softmax_vjp", lambda x: cusoftmax.softmax_vjp(x, np.ones(3))),
    ("log_softmax_vjp", lambda x: cusoftmax.log_softmax_vjp(x, np.ones(3))),
    ("softmax_topk", lambda x: cusoftmax.softmax_topk(x, 1))])
def test_dtype_errors_name_the_function_shortly(name, call):
    with pytest.raises(TypeError) as info:
        call(np.ones(3, complex))
    assert str(info.value) == f"{name} takes real floating-point or integer arrays, not complex128"


@pytest.mark.parametrize("name", ["softmax_vjp", "log_softmax_vjp"])
def test_vjp_where_error_names_y(name):
    with pytest.raises(ValueError, match=r"where of shape \(4,\) does not broadcast to y's shape"):
        getattr(cusoftmax, name)(np.ones(3), np.ones(3), where=np.ones(4, bool))


def test_no_gpu_reason_is_in_our_words():
    from cusoftmax._arrays import explain_no_gpu, no_gpu_reason

    reason = no_gpu_reason()
    assert reason is None or reason.startswith("no usable CUDA device")
    e = RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")
    text = explain_no_gpu(e)
    assert text.startswith("no usable CUDA device: the NVIDIA driver is missing or older")
    assert "cudaErrorInsufficientDriver" in text  # the cause is kept
