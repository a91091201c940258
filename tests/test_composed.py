"""The family's primitives (cusoftmax._composed): states of pieces merge, in any grouping, into the
state of the whole slice; the log-sum, the normalizing pass and the backward pass from a state."""

import warnings

import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st

from cusoftmax import _composed as C
from _support import make_values, to_host

F64 = np.dtype(np.float64)


def _pieces(draw, n):
    """Cut points of a length-n axis into 1 to 4 pieces."""
    cuts = draw(st.lists(st.integers(1, n - 1), max_size=3, unique=True)) if n > 1 else []
    bounds = [0, *sorted(cuts), n]
    return list(zip(bounds, bounds[1:]))


@st.composite
def cases(draw):
    rows, n = draw(st.integers(1, 5)), draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = make_values(rng, (rows, n), F64, 5.0, draw(st.sampled_from([0.0, 0.1, 0.4])))
    where = rng.random((rows, n)) < draw(st.sampled_from([1.0, 0.7, 0.2]))
    where[0] = False  # one fully masked row
    b = rng.choice([0.0, 0.5, 2.0, -1.0], size=(rows, n)) if draw(st.booleans()) else None
    return x, where, b, _pieces(draw, n), draw(st.booleans())


def _piece_states(xp, x, where, b, pieces):
    def cut(a, lo, hi):
        return None if a is None else xp.asarray(a[:, lo:hi])

    return [C.state(xp, cut(x, lo, hi), (1,), where=cut(where, lo, hi), b=cut(b, lo, hi))
            for lo, hi in pieces]


def _close(a, b, rtol):
    a, b = to_host(a), to_host(b)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_allclose(a, b, rtol=rtol, atol=0, equal_nan=True)


@given(case=cases())
def test_merged_pieces_give_the_whole_slice(xp, case):
    x, where, b, pieces, left_first = case
    b = None if b is None else np.abs(b)  # weights of one sign: no cancellation to amplify
    whole = C.state(xp, xp.asarray(x), (1,), where=xp.asarray(where),
                    b=None if b is None else xp.asarray(b))
    states = _piece_states(xp, x, where, b, pieces)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if left_first:
            merged = states[0]
            for s in states[1:]:
                merged = C.merge(xp, merged, s)
        else:
            merged = states[-1]
            for s in reversed(states[:-1]):
                merged = C.merge(xp, s, merged)
        got = C.log_sum(xp, merged, return_sign=True)
    expect = C.log_sum(xp, whole, return_sign=True)
    _close(got[1], expect[1], 0)
    _close(got[0], expect[0], 1e-12)
    if b is None:
        for op in C.OPS:
            y = C.normalize(xp, op, xp.asarray(x), merged, (1,), where=xp.asarray(where))
            ref = C.normalize(xp, op, xp.asarray(x), whole, (1,), where=xp.asarray(where))
            _close(y, ref, 1e-12)


@given(case=cases())
def test_log_sum_matches_scipy(xp, case):
    x, where, b, _, _ = case
    w = where.astype(F64) if b is None else where * b
    st_ = C.state(xp, xp.asarray(x), (1,), where=xp.asarray(where),
                  b=None if b is None else xp.asarray(b))
    out, sign = C.log_sum(xp, st_, return_sign=True)
    # SciPy leaves out b == 0 positions only where its result is finite: -inf there says the
    # same for every result.
    with np.errstate(all="ignore"):
        ref, ref_sign = scipy.special.logsumexp(np.where(w == 0, -np.inf, x), axis=1, b=w,
                                                keepdims=True, return_sign=True)
    _close(sign, ref_sign, 0)
    # Weights of both signs cancel: the error grows with sum|terms| / |sum|.
    with np.errstate(all="ignore"):
        mag = scipy.special.logsumexp(np.where(w == 0, -np.inf, x), axis=1, b=np.abs(w),
                                      keepdims=True)
        cond = np.where(np.isfinite(ref), np.exp(mag - ref), 1.0)
    got = to_host(out)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(got[~finite], ref[~finite])
    err = np.abs(got[finite] - ref[finite])
    assert np.all(err <= 1e-13 * cond[finite] * (1 + np.abs(ref[finite])))


def test_state_of_special_slices(xp):
    inf, nan = np.inf, np.nan
    x = xp.asarray([[1.0, 2.0, 2.0], [-inf, -inf, -inf], [inf, 1.0, inf], [nan, 0.0, 1.0],
                    [3.0, 3.0, 3.0]])
    where = xp.asarray([[True] * 3] * 4 + [[False] * 3])
    m, c, s = (to_host(a).ravel() for a in C.state(xp, x, (1,), where=where))
    np.testing.assert_array_equal(m, [2.0, -inf, inf, nan, -inf])
    np.testing.assert_array_equal(c, [2.0, 3.0, 2.0, 0.0, 0.0])
    np.testing.assert_array_equal(s[[1, 2, 4]], [0.0, 0.0, 0.0])
    assert s[0] == pytest.approx(np.exp(-1.0), rel=1e-15) and np.isnan(s[3])


def test_weights_left_out_by_where_add_nothing(xp):
    x = xp.asarray([[1.0, 2.0, 3.0]])
    b = xp.asarray([1.0, np.nan, np.inf])
    st_ = C.state(xp, x, (1,), where=xp.asarray([True, False, False]), b=b)
    assert float(to_host(C.log_sum(xp, st_))[0, 0]) == 1.0


def test_empty_side_is_the_identity(xp):
    full = C.state(xp, xp.asarray([[0.5, -2.0, 7.0]]), (1,))
    empty = C.state(xp, xp.asarray([[1.0, 2.0]]), (1,), where=xp.asarray([False, False]))
    for merged in (C.merge(xp, full, empty), C.merge(xp, empty, full)):
        for a, b in zip(merged, full):
            np.testing.assert_array_equal(to_host(a), to_host(b))


def test_infinities_of_both_signs_weights_make_nan(xp):
    x = xp.asarray([[np.inf, 0.0, np.inf]])
    b = xp.asarray([1.0, 1.0, -2.0])
    out, sign = C.log_sum(xp, C.state(xp, x, (1,), b=b), return_sign=True)
    assert np.isnan(to_host(out)).all() and np.isnan(to_host(sign)).all()
    p = C.state(xp, x[:, :2], (1,), b=b[:2])
    q = C.state(xp, x[:, 2:], (1,), b=b[2:])
    assert np.isnan(to_host(C.log_sum(xp, C.merge(xp, p, q)))).all()


def test_dominant_term_is_exact(xp):
    x = xp.asarray([0.0, -50.0, -60.0])
    st_ = C.state(xp, x, (0,))
    expect = np.log1p(np.exp(-50.0) + np.exp(-60.0))
    assert float(to_host(C.log_sum(xp, st_))[0]) == pytest.approx(expect, rel=1e-14)
    y = to_host(C.normalize(xp, "log_softmax", x, st_, (0,)))
    assert y[0] == pytest.approx(-expect, rel=1e-14)


def test_vjp_from_pieces(xp):
    rng = np.random.default_rng(3)
    y = scipy.special.softmax(rng.standard_normal((4, 9)), axis=1)
    dy = rng.standard_normal((4, 9))
    where = rng.random((1, 9)) < 0.6
    for log, yy in ((False, y), (True, np.log(y))):
        a = [xp.asarray(v) for v in (yy, dy)]
        total = C.vjp_sum(xp, *a, (1,), where=xp.asarray(where), log=log)
        parts = sum(C.vjp_sum(xp, xp.asarray(yy[:, i:i + 3]), xp.asarray(dy[:, i:i + 3]), (1,),
                              where=xp.asarray(where[:, i:i + 3]), log=log) for i in (0, 3, 6))
        _close(parts, total, 1e-14)
        dx = to_host(C.vjp(xp, *a, total, where=xp.asarray(where), log=log))
        t = np.sum(np.where(where, dy * (1 if log else y), 0), axis=1, keepdims=True)
        ref = dy - y * t if log else y * (dy - t)
        np.testing.assert_allclose(dx, np.where(where, ref, 0), rtol=1e-13, atol=1e-15)
