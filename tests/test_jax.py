"""The family inside JAX transformations (jax.jit, vmap, grad, scan, checkpoint) against the
eager host path and against jax.nn, on JAX's CPU backend (and any other it has)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cusoftmax
from cusoftmax._accuracy import LOG_TOLERANCE, TOLERANCE, VJP_TOLERANCE
from test_family import check
from test_segment import segment_cases

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

inf, nan = np.inf, np.nan
OPS = [("softmax", TOLERANCE), ("log_softmax", LOG_TOLERANCE)]


def _x(shape=(3, 5, 7), seed=0):
    return np.random.default_rng(seed).normal(0, 3, shape).astype(np.float32)


@pytest.mark.parametrize("op, table", OPS)
@pytest.mark.parametrize("axis", [-1, 0, (0, 2), None])
def test_jit_gives_the_eager_result(op, table, axis):
    x = _x()
    where = np.random.default_rng(1).random(x.shape) < 0.8
    fn = getattr(cusoftmax, op)
    for kw in ({}, {"where": where}, {"scale": 0.5}):
        got = jax.jit(lambda v, kw=kw: fn(v, axis, **{k: jnp.asarray(a) if k == "where" else a
                                                       for k, a in kw.items()}))(x)
        assert isinstance(got, jax.Array) and got.dtype == np.float32
        check(np.asarray(got), fn(x.astype(np.float64), axis, **kw), np.float32, table)


def test_array_scale_and_vmap():
    x = _x((4, 6))
    scale = np.array([[0.5], [1.0], [2.0], [3.0]], np.float32)
    got = jax.jit(lambda v, s: cusoftmax.softmax(v, scale=s))(x, scale)
    check(np.asarray(got), cusoftmax.softmax(x.astype(np.float64), scale=scale), np.float32,
          TOLERANCE)
    rows = jax.vmap(lambda r: cusoftmax.log_softmax(r))(x)
    check(np.asarray(rows), cusoftmax.log_softmax(x.astype(np.float64)), np.float32,
          LOG_TOLERANCE)


def test_logsumexp_and_vjps_under_jit():
    x = _x((4, 6))
    b = np.where(x > 0, 1.0, 0.5).astype(np.float32)
    got = jax.jit(lambda v, w: cusoftmax.logsumexp(v, axis=1, b=w, keepdims=True))(x, b)
    check(np.asarray(got), cusoftmax.logsumexp(x.astype(np.float64), 1, b, True), np.float32,
          LOG_TOLERANCE)
    r, sign = jax.jit(lambda v: cusoftmax.logsumexp(v, b=-np.ones(6, np.float32),
                                                    return_sign=True))(x)
    assert float(sign) == -1.0
    y, dy = cusoftmax.softmax(x), _x((4, 6), 2)
    for name, fwd in (("softmax_vjp", cusoftmax.softmax), ("log_softmax_vjp",
                                                           cusoftmax.log_softmax)):
        y = fwd(x)
        got = jax.jit(getattr(cusoftmax, name))(y, dy)
        want = getattr(cusoftmax, name)(y.astype(np.float64), dy.astype(np.float64))
        check(np.asarray(got), want, np.float32, VJP_TOLERANCE, of=np.abs(dy) + np.abs(want))


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("kw", [{}, {"scale": 0.25}, {"where": "mask"}])
def test_grad_is_the_vjp(op, kw):
    x, w = _x((4, 9)), _x((4, 9), 3)
    if kw.get("where") == "mask":
        kw = {"where": np.arange(9) < 6}
    fn = getattr(cusoftmax, op)
    vjp = getattr(cusoftmax, f"{op}_vjp")
    g = jax.grad(lambda v: jnp.sum(w * fn(v, **kw)))(x)
    y = fn(x.astype(np.float64), **kw)
    want = vjp(y, w.astype(np.float64), where=kw.get("where")) * kw.get("scale", 1.0)
    check(np.asarray(g), want, np.float32, VJP_TOLERANCE, of=np.abs(w) + np.abs(want))
    ref = jax.grad(lambda v: jnp.sum(w * getattr(jax.nn, op)(v * kw.get("scale", 1.0),
                                                             where=kw.get("where"))))(x)
    if "where" in kw:  # jax.nn's masked positions' gradient is not defined the same way
        ref = np.where(kw["where"], ref, 0.0)
    np.testing.assert_allclose(np.asarray(g), ref, rtol=2e-4, atol=2e-6)


def test_logsumexp_grad_is_softmax_and_array_scale_differentiates():
    x = _x((3, 8))
    g = jax.grad(lambda v: jnp.sum(cusoftmax.logsumexp(v, axis=1)))(x)
    check(np.asarray(g), cusoftmax.softmax(x.astype(np.float64)), np.float32, TOLERANCE)
    s = np.array([[0.5], [1.0], [2.0]], np.float32)
    g = jax.grad(lambda v: jnp.sum(_x((3, 8), 4) * cusoftmax.softmax(v, scale=s)))(x)
    ref = jax.grad(lambda v: jnp.sum(_x((3, 8), 4) * jax.nn.softmax(v * s)))(x)
    np.testing.assert_allclose(np.asarray(g), ref, rtol=2e-4, atol=2e-6)


def test_scan_and_checkpoint():
    x = _x((5, 4, 6))

    def step(carry, row):
        return carry + cusoftmax.logsumexp(row, axis=-1), cusoftmax.softmax(row)

    total, ys = jax.lax.scan(step, jnp.zeros(4, np.float32), x)
    check(np.asarray(ys), cusoftmax.softmax(x.astype(np.float64)), np.float32, TOLERANCE)
    np.testing.assert_allclose(np.asarray(total),
                               cusoftmax.logsumexp(x.astype(np.float64), axis=-1).sum(0),
                               rtol=1e-5)
    g = jax.grad(jax.checkpoint(lambda v: jnp.sum(cusoftmax.log_softmax(v)[:, 0])))(x[0])
    assert np.all(np.isfinite(np.asarray(g)))


def test_special_values_as_the_eager_path():
    x = np.array([[1.0, inf, 0.0], [-inf, -inf, -inf], [nan, 1.0, 2.0], [-inf, 0.0, 1.0]],
                 np.float32)
    for op in ("softmax", "log_softmax"):
        fn = getattr(cusoftmax, op)
        got = np.asarray(jax.jit(fn)(x))
        np.testing.assert_allclose(got, fn(x), rtol=1e-6, atol=0)  # NaN and inf where they are
    got = np.asarray(jax.jit(lambda v: cusoftmax.logsumexp(v, axis=1))(x))
    np.testing.assert_allclose(got, cusoftmax.logsumexp(x, axis=1), rtol=1e-6, atol=0)
    where = np.array([[True, False, True], [False] * 3, [True] * 3, [False, True, True]])
    for fn in (cusoftmax.softmax, cusoftmax.log_softmax):
        got = np.asarray(jax.jit(lambda v, fn=fn: fn(v, where=where))(x))
        np.testing.assert_allclose(got, fn(x, where=where), rtol=1e-6, atol=0)
    got = np.asarray(jax.jit(lambda v: cusoftmax.logsumexp(v, axis=1, where=where))(x))
    np.testing.assert_allclose(got, cusoftmax.logsumexp(x, axis=1, where=where), rtol=1e-6,
                               atol=0)
    empty = jax.jit(lambda v: cusoftmax.logsumexp(v, axis=1))(np.zeros((2, 0), np.float32))
    assert np.array_equal(np.asarray(empty), [-inf, -inf])


def test_what_is_refused_inside_jit():
    x = _x((2, 4))
    with pytest.raises(TypeError, match="immutable"):
        jax.jit(lambda v: cusoftmax.softmax(v, out=v))(x)
    with pytest.raises(ValueError, match="GPU kernel"):
        jax.jit(lambda v: cusoftmax.softmax(v, method="block"))(x)
    with pytest.raises(TypeError, match="inside JAX transformations"):
        jax.jit(lambda v: cusoftmax.softmax_topk(v, 2))(x)
    with pytest.raises(TypeError, match="bool"):
        jax.jit(lambda v: cusoftmax.softmax(v, where=v))(x)
    with pytest.raises(ValueError, match="length 0"):
        jax.jit(lambda v: cusoftmax.softmax(v))(np.zeros((2, 0), np.float32))


SEGMENT_FNS = [(cusoftmax.segment_softmax, TOLERANCE), (cusoftmax.segment_log_softmax,
                                                        LOG_TOLERANCE),
               (cusoftmax.segment_logsumexp, LOG_TOLERANCE)]


@settings(max_examples=25, deadline=None)
@given(case=segment_cases(), data=st.data())
def test_segments_under_jit_give_the_eager_result(case, data):
    x, how, groups, _ = case
    x = x.astype(np.float32)  # JAX without x64 holds no float64
    count = len(groups)
    where = None
    if data.draw(st.booleans()):
        where = np.random.default_rng(len(x)).random(x.shape) < 0.7
    kw = {k: v for k, v in how.items() if k != "num_segments"}
    for fn, table in SEGMENT_FNS:
        want = fn(x, **how, where=where)
        got = jax.jit(lambda v, fn=fn: fn(v, **kw, num_segments=count, where=where))(x)
        assert got.shape == want.shape and got.dtype == want.dtype
        check(np.asarray(got), fn(x.astype(np.float64), **how, where=where), x.dtype, table)


def test_segment_grads_and_vjps():
    rng = np.random.default_rng(9)
    x, dy = rng.normal(size=(40, 2)).astype(np.float32), rng.normal(size=(40, 2))
    ids = jnp.asarray(rng.integers(-1, 6, 40))
    for fwd, vjp in ((cusoftmax.segment_softmax, cusoftmax.segment_softmax_vjp),
                     (cusoftmax.segment_log_softmax, cusoftmax.segment_log_softmax_vjp)):
        g = jax.grad(lambda v: jnp.sum(dy.astype(np.float32) * fwd(v, ids, num_segments=6)))(x)
        y = fwd(x.astype(np.float64), np.asarray(ids), num_segments=6)
        want = vjp(y, dy, np.asarray(ids), num_segments=6)
        check(np.asarray(g), want, np.float32, VJP_TOLERANCE, of=np.abs(dy) + np.abs(want))
        got = jax.jit(lambda a, b: vjp(a, b, ids, num_segments=6))(y.astype(np.float32),
                                                                 dy.astype(np.float32))
        check(np.asarray(got), want, np.float32, VJP_TOLERANCE, of=np.abs(dy) + np.abs(want))


def test_segment_rules_inside_jit():
    x = _x((6,))
    with pytest.raises(TypeError, match="num_segments"):
        jax.jit(lambda v, i: cusoftmax.segment_softmax(v, i))(x, np.zeros(6, np.int32))
    with pytest.raises(TypeError, match="immutable"):
        jax.jit(lambda v: cusoftmax.segment_softmax(v, np.zeros(6, int), out=v))(x)
    with pytest.raises(TypeError, match="integers"):
        jax.jit(lambda v: cusoftmax.segment_softmax(v, np.zeros(6), num_segments=1))(x)
    with pytest.raises(ValueError, match="non-decreasing"):
        jax.jit(lambda v: cusoftmax.segment_softmax(v, offsets=np.array([0, 4, 2, 6])))(x)
    with pytest.raises(ValueError, match="not sorted"):
        jax.jit(lambda v: cusoftmax.segment_softmax(v, np.array([1, 0, 0, 0, 0, 0]),
                                                    indices_are_sorted=True))(x)
    with pytest.raises(ValueError, match="num_segments=3"):
        jax.jit(lambda v: cusoftmax.segment_softmax(v, offsets=np.array([0, 6]),
                                                    num_segments=3))(x)
    batched = jax.vmap(lambda r: cusoftmax.segment_softmax(r, offsets=np.array([0, 2, 6])))(
        _x((3, 6)))
    check(np.asarray(batched), cusoftmax.segment_softmax(_x((3, 6)).astype(np.float64),
                                                         offsets=[0, 2, 6], axis=1),
          np.float32, TOLERANCE)
