"""The family inside JAX transformations (jax.jit, vmap, grad, scan, checkpoint) against the
eager host path and against jax.nn, on JAX's CPU backend (and any other it has)."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cusoftmax
from cusoftmax._accuracy import LOG_TOLERANCE, TOLERANCE, VJP_TOLERANCE
from _support import BF16, assert_same_bits, requires_gpu
from test_family import _values, check
from test_segment import segment_cases
from test_topk import ref_topk

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
    with pytest.raises(TypeError, match="static int"):
        jax.jit(lambda v, k: cusoftmax.softmax_topk(v, k))(x, 2)
    with pytest.raises(TypeError, match="immutable"):
        jax.jit(lambda v: cusoftmax.softmax_topk(v, 2, out=(v, v)))(x)
    with pytest.raises(ValueError, match="between 1"):
        jax.jit(lambda v: cusoftmax.softmax_topk(v, 5))(x)
    with pytest.raises(TypeError, match="one axis"):
        jax.jit(lambda v: cusoftmax.softmax_topk(v, 2, axis=None))(x)
    with pytest.raises(TypeError, match="bool"):
        jax.jit(lambda v: cusoftmax.softmax(v, where=v))(x)
    with pytest.raises(ValueError, match="length 0"):
        jax.jit(lambda v: cusoftmax.softmax(v))(np.zeros((2, 0), np.float32))


TOPK_FLAGS = [{}, {"log": True}, {"renormalize": True}, {"log": True, "renormalize": True}]


@pytest.mark.parametrize("flags", TOPK_FLAGS, ids=str)
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_topk_under_jit(flags, axis):
    """The eager order exactly (ties included: integer-valued logits), values within the bound,
    with where=, a negative scalar scale and one scale a slice; indices -1 where where= left
    fewer than k positions."""
    rng = np.random.default_rng(5)
    x = np.round(_x((6, 9, 8)) / 2).astype(np.float32)
    where = rng.random(x.shape) < 0.4
    slices = list(x.shape)
    slices[axis] = 1
    table = LOG_TOLERANCE if flags.get("log") else TOLERANCE
    for kw in ({}, {"where": where}, {"scale": -0.5}, {"scale": rng.random(slices) + 0.5}):
        got = jax.jit(lambda v, kw=kw: cusoftmax.softmax_topk(v, 5, axis, **flags, **kw))(x)
        ref_v, ref_i = ref_topk(_values(x, np.float32, kw.get("scale")), axis, 5,
                                kw.get("where"), **flags)
        assert all(isinstance(a, jax.Array) for a in got) and got[0].dtype == np.float32
        np.testing.assert_array_equal(np.asarray(got[1]), ref_i)
        check(np.asarray(got[0]), ref_v, np.float32, table)
        if "where" in kw:
            assert (ref_i == -1).any()
    rows = jax.vmap(lambda r: cusoftmax.softmax_topk(r, 3, **flags))(x[0])
    eager = cusoftmax.softmax_topk(x[0], 3, **flags)
    np.testing.assert_array_equal(np.asarray(rows[1]), eager[1])
    check(np.asarray(rows[0]), ref_topk(_values(x[0], np.float32), 1, 3, **flags)[0], np.float32,
          table)


def test_softmax_topk_special_values_as_the_eager_path():
    x = np.array([[1.0, nan, 3.0, -inf, 3.0, nan, 0.0], [-inf, 0.0, -inf, 1.0, -inf, -inf, -inf],
                  [-inf] * 7, [inf, 1.0, inf, 2.0, 0.0, 0.0, 0.0],
                  [-0.0, 0.0, -0.0, 0.0, 1.0, 1.0, 1.0]], np.float32)
    for k in (3, 7):
        for flags in TOPK_FLAGS:
            got = jax.jit(lambda v, k=k, f=flags: cusoftmax.softmax_topk(v, k, **f))(x)
            want = cusoftmax.softmax_topk(x, k, **flags)
            np.testing.assert_array_equal(np.asarray(got[1]), want[1])
            np.testing.assert_allclose(np.asarray(got[0]), want[0], rtol=1e-6, atol=0)


def test_softmax_topk_orders_subnormals_and_signed_zeros_as_eager():
    """-0.0 ties with 0.0 and subnormals keep their order (not compared as floats, which some
    backends flush to 0)."""
    tiny = np.finfo(np.float32).smallest_subnormal
    x = np.array([[tiny, -0.0, 0.0, 2 * tiny, -tiny, 0.0]], np.float32)
    for k in (3, 6):
        got = jax.jit(lambda v, k=k: cusoftmax.softmax_topk(v, k))(x)
        np.testing.assert_array_equal(np.asarray(got[1]), cusoftmax.softmax_topk(x, k)[1])
    np.testing.assert_array_equal(np.asarray(got[1]), np.argsort(-x, 1, kind="stable"))


@pytest.mark.parametrize("flags", TOPK_FLAGS, ids=str)
def test_softmax_topk_grad_is_the_vjp_at_the_chosen_positions(flags):
    """d/dx of sum(w * values): the family's VJP of the whole slice with w at the chosen
    positions (0 elsewhere), or with `renormalize` the VJP of the k chosen values' own
    softmax, scattered to their positions."""
    x, w = _x((4, 9)), _x((4, 3), 6)
    log = flags.get("log", False)
    g = jax.grad(lambda v: jnp.sum(w * cusoftmax.softmax_topk(v, 3, **flags)[0]))(x)
    x64 = x.astype(np.float64)
    values, idx = cusoftmax.softmax_topk(x64, 3, **flags)
    vjp = cusoftmax.log_softmax_vjp if log else cusoftmax.softmax_vjp
    rows = np.arange(4)[:, None]
    want = np.zeros_like(x64)
    if flags.get("renormalize"):
        want[rows, idx] = vjp(values, w.astype(np.float64))
    else:
        dy = np.zeros_like(x64)
        dy[rows, idx] = w
        want = vjp((cusoftmax.log_softmax if log else cusoftmax.softmax)(x64), dy)
    check(np.asarray(g), want, np.float32, VJP_TOLERANCE, of=np.abs(want) + np.abs(w).max())


def test_integer_input_gives_jaxs_float_without_a_warning():
    """Integers promote as the eager functions' (float64), as JAX holds it: float32 without
    x64, with no warning about the float64 it cannot hold; softmax_topk's indices likewise."""
    x = jnp.asarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    want = jax.dtypes.canonicalize_dtype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fn in (cusoftmax.softmax, cusoftmax.log_softmax, cusoftmax.logsumexp):
            assert jax.jit(fn)(x).dtype == want
        values, indices = jax.jit(lambda v: cusoftmax.softmax_topk(v, 2))(x)
    assert values.dtype == want and indices.dtype == jax.dtypes.canonicalize_dtype(np.int64)
    np.testing.assert_array_equal(np.asarray(indices), [[3, 2], [3, 2], [3, 2]])
    check(np.asarray(values), cusoftmax.softmax_topk(np.asarray(x), 2)[0], np.float32, TOLERANCE)


def test_no_host_transfer_inside_jit():
    """Every function, jitted and differentiated, on arrays already on the device, under
    ``jax.transfer_guard("disallow")``: no value crosses to or from the host. The operands are
    the jitted function's arguments (arrays closed over are constants, which jit reads back)."""
    x, dy = (jax.device_put(_x((4, 9), seed)) for seed in (0, 1))
    where = jax.device_put(np.arange(9) < 6)
    ids = jax.device_put(np.repeat(np.arange(3), 3).astype(np.int32))
    calls = [lambda v, w, g, s: cusoftmax.softmax(v, where=w, scale=0.5),
             lambda v, w, g, s: cusoftmax.log_softmax(v, axis=0),
             lambda v, w, g, s: cusoftmax.logsumexp(v, axis=1, b=g),
             lambda v, w, g, s: cusoftmax.softmax_vjp(cusoftmax.softmax(v), g),
             lambda v, w, g, s: cusoftmax.log_softmax_vjp(cusoftmax.log_softmax(v), g, where=w),
             lambda v, w, g, s: cusoftmax.softmax_topk(v, 3, where=w)[0],
             lambda v, w, g, s: cusoftmax.segment_log_softmax(v, s, num_segments=3, axis=1)]
    with jax.transfer_guard("disallow"):
        for f in calls:
            jax.block_until_ready(jax.jit(f)(x, where, dy, ids))
            summed = jax.grad(lambda v, w, g, s, f=f: jnp.sum(f(v, w, g, s)))
            jax.block_until_ready(jax.jit(summed)(x, where, dy, ids))


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


@pytest.fixture
def kernel_route(monkeypatch):
    """The kernel route's plumbing on this platform: ``_xla.call`` replaced by a stand-in that
    records each call and answers with the reference (None for the ops in ``declined``), the
    custom call's platform set to this one."""
    from cusoftmax import _jax, _xla

    calls, declined = [], set()

    def stand_in(op, operands, shape, dtype, axes, scale):
        calls.append((op, tuple(operands[0].shape), axes, scale))
        if op in declined:
            return None
        y = _jax._reference(op, axes, scale, *operands)
        assert y.shape == shape and y.dtype == dtype
        return y * np.asarray(1, dtype)  # not the reference's own value

    monkeypatch.setattr(_xla, "usable", lambda: True)
    here = jax.default_backend()
    monkeypatch.setattr(_xla, "PLATFORM", "cuda" if here == "gpu" else here)
    monkeypatch.setattr(_xla, "call", stand_in)
    for cached in (_jax._routed, _jax._with_vjp):
        cached.cache_clear()
    yield calls, declined
    for cached in (_jax._routed, _jax._with_vjp):
        cached.cache_clear()


def test_kernel_route_plumbing(kernel_route, monkeypatch):
    """jit, vmap (the batched shape planned again, its axes moved), grad (the VJP op's route),
    second derivatives (the reference's), logsumexp with keepdims, and a declined call (the
    reference): the ops that have a kernel route reach it with static axes and scale, and give
    the eager results."""
    calls, declined = kernel_route
    x, t = _x((4, 9)), np.random.default_rng(2).random((4, 9)).astype(np.float32)
    x64 = x.astype(np.float64)
    got = jax.jit(lambda v: cusoftmax.softmax(v, scale=0.5))(x)
    check(np.asarray(got), cusoftmax.softmax(x64, scale=0.5), np.float32, TOLERANCE)
    assert calls == [("softmax", (4, 9), (1,), 0.5)]
    calls.clear()
    got = jax.vmap(lambda r: cusoftmax.log_softmax(r, axis=0), in_axes=1, out_axes=1)(x)
    check(np.asarray(got), cusoftmax.log_softmax(x64, axis=0), np.float32, LOG_TOLERANCE)
    assert calls[-1] == ("log_softmax", (9, 4), (1,), None)  # (after the unbatched trace)
    calls.clear()

    def loss(v):
        return -jnp.sum(t * cusoftmax.log_softmax(v))

    from cusoftmax import _jax

    want = jax.grad(lambda v: -jnp.sum(t * jax.nn.log_softmax(v)))(x64)
    for kernel_backward in (True, False):  # the backward by the VJP kernel, or XLA's formula
        monkeypatch.setattr(_jax, "KERNEL_BACKWARD", kernel_backward)
        _jax._with_vjp.cache_clear()  # new functions, traced again (JAX keeps their traces)
        _jax._routed.cache_clear()
        calls.clear()
        got = jax.jit(jax.grad(loss))(x)
        check(np.asarray(got), np.asarray(want), np.float32, VJP_TOLERANCE,
              of=np.full(want.shape, np.abs(want).max()))
        assert [c[0] for c in calls] == ["log_softmax", "log_softmax_vjp"][:1 + kernel_backward]
    def second(softmax, v, w):  # reverse over reverse (custom_vjp has no forward mode)
        return jax.grad(lambda a: jnp.sum(jax.grad(lambda b: jnp.sum(w * softmax(b)))(a) ** 2))(v)

    got = second(cusoftmax.softmax, x, t)
    want = second(jax.nn.softmax, x64, t.astype(np.float64))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6)
    calls.clear()
    got = jax.jit(lambda v: cusoftmax.logsumexp(v, axis=0, keepdims=True))(x)
    assert got.shape == (1, 9) and calls == [("logsumexp", (4, 9), (0,), None)]
    check(np.asarray(got), cusoftmax.logsumexp(x64, 0, keepdims=True), np.float32, LOG_TOLERANCE)
    grad = jax.grad(lambda v: jnp.sum(cusoftmax.logsumexp(v, axis=1)))(x)
    check(np.asarray(grad), cusoftmax.softmax(x64), np.float32, TOLERANCE)
    declined.add("softmax_vjp")
    _jax._routed.cache_clear()  # softmax_vjp's route was traced (and kept) by the second derivative
    dy = np.ones_like(x)
    got = jax.jit(lambda y, g: cusoftmax.softmax_vjp(y, g))(x, dy)
    check(np.asarray(got), cusoftmax.softmax_vjp(x64, dy), np.float32, VJP_TOLERANCE)
    assert calls[-1] == ("softmax_vjp", (4, 9), (1,), None)
    calls.clear()
    cusoftmax.softmax(jnp.asarray(x), where=jnp.asarray(x > 0))  # where= stays XLA's
    jax.jit(lambda v: cusoftmax.logsumexp(v, b=v))(x)  # so does b=
    assert calls == []


def test_xla_handler_builds_registers_and_lowers(tmp_path):
    """kernels/xla_launch.cc compiles against jaxlib's FFI headers, registers for CUDA, and a
    jitted custom call of it lowers for CUDA with its id (no GPU needed)."""
    import shutil

    from cusoftmax import _xla

    if not any(shutil.which(c) for c in ("c++", "g++")):
        pytest.skip("no C++ compiler")
    target = "cusoftmax_launch_test"  # not the library's own, which a GPU test registers
    lib = _xla.register(_xla.build(tmp_path), target)
    assert lib.csm_new() == 0 and lib.csm_new() == 1
    words = (__import__("ctypes").c_int64 * 2)(4, 256)
    assert lib.csm_set(1, 0, None, 4, 128, 0, 0, 0, 2, words) == 0
    assert lib.csm_set(2, 0, None, 4, 128, 0, 0, 0, 2, words) == 1  # no such id
    assert _xla.build(tmp_path) == _xla.build(tmp_path)  # built once

    def f(x):
        return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(x.shape, x.dtype))(
            x, id=np.int64(1))

    text = jax.jit(f).trace(np.ones((4, 256), np.float32)).lower(
        lowering_platforms=("cuda",)).as_text()
    assert f"custom_call @{target}" in text and "id = 1 : i64" in text


def _on_jax_gpu():
    return any(d.platform == "gpu" for d in jax.devices())


@requires_gpu
@pytest.mark.skipif("not _on_jax_gpu()", reason="needs JAX's CUDA backend")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_kernels_inside_jit_on_the_gpu(dtype):
    """Inside jit on the GPU each op's custom call launches the kernel the eager CuPy call
    launches: the same bits, for rows in registers, a two-pass plan with its workspace (rows of
    4M), axis 0, two axes and a scale (a negative one: XLA's operations); vmap plans the batched
    shape; grad of a cross-entropy
    matches jax.nn's; scan carries a call; the lowered program holds the custom call."""
    import cupy

    from cusoftmax import _xla

    assert _xla.usable(), _xla.library()[1]
    if dtype == "float64" and not jax.config.jax_enable_x64:
        pytest.skip("float64 needs JAX's x64")
    dtype = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(0)
    cases = [((64, 1000), -1, None), ((2, 1 << 22), -1, None), ((4096, 32), 0, None),
             ((8, 16, 128), (1, 2), None), ((64, 1000), -1, 0.125), ((64, 1000), -1, -2.0)]
    for shape, axis, scale in cases:
        x = rng.normal(0, 3, shape).astype(dtype)
        xj, xc = jnp.asarray(x), cupy.asarray(x)
        for op in ("softmax", "log_softmax", "logsumexp"):
            fn = getattr(cusoftmax, op)
            if op != "logsumexp" and not isinstance(axis, int):
                continue
            f = jax.jit(lambda v, fn=fn: fn(v, axis, scale=scale))
            launched = _xla.TARGET in f.lower(xj).as_text()
            if shape == (64, 1000) and dtype.name in cusoftmax.planning.FUSED_TYPES[op]:
                assert launched == (scale is None or scale > 0), (op, dtype, scale)
            if launched:  # the eager call's kernel
                assert_same_bits(np.asarray(f(xj)), fn(xc, axis, scale=scale))
            else:
                table = TOLERANCE if op == "softmax" else LOG_TOLERANCE
                check(np.asarray(f(xj)), fn(x.astype(np.float64), axis, scale=scale), dtype,
                      table)
        y, dy = cusoftmax.softmax(xc, axis), cupy.asarray(rng.normal(size=shape).astype(dtype))
        for op in ("softmax_vjp", "log_softmax_vjp"):
            if not isinstance(axis, int):
                continue
            fn = getattr(cusoftmax, op)
            f = jax.jit(lambda a, b, fn=fn: fn(a, b, axis))
            yj, dyj = jnp.asarray(y.get()), jnp.asarray(dy.get())
            if _xla.TARGET in f.lower(yj, dyj).as_text():
                assert_same_bits(np.asarray(f(yj, dyj)), fn(y, dy, axis))
            else:
                want = fn(y.get().astype(np.float64), dy.get().astype(np.float64), axis)
                check(np.asarray(f(yj, dyj)), want, dtype, VJP_TOLERANCE,
                      of=np.full(want.shape, np.abs(want).max()))
    x = rng.normal(0, 3, (6, 5, 300)).astype(np.float32)
    f = jax.jit(jax.vmap(lambda v: cusoftmax.log_softmax(v, axis=0), in_axes=2, out_axes=2))
    got = np.asarray(f(x))
    moved = cupy.ascontiguousarray(cupy.moveaxis(cupy.asarray(x), 2, 0))  # as vmap plans it
    if _xla.TARGET in f.lower(x).as_text():  # the batched shape's own launch
        assert_same_bits(got, cupy.moveaxis(cusoftmax.log_softmax(moved, axis=1), 0, 2))
    check(got, cusoftmax.log_softmax(x.astype(np.float64), axis=0), np.float32, LOG_TOLERANCE)
    t = rng.random((256, 16384)).astype(np.float32)
    x = rng.normal(0, 3, (256, 16384)).astype(np.float32)
    ours = jax.jit(jax.grad(lambda v: -jnp.sum(t * cusoftmax.log_softmax(v))))(x)
    theirs = jax.jit(jax.grad(lambda v: -jnp.sum(t * jax.nn.log_softmax(v))))(x)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-4, atol=1e-6)
    carried = jax.jit(lambda v: jax.lax.scan(lambda c, _: (cusoftmax.softmax(c), None), v,
                                             length=3)[0])(x[:8])
    want = x[:8].astype(np.float64)
    for _ in range(3):
        want = cusoftmax.softmax(want)
    check(np.asarray(carried), want, np.float32, TOLERANCE)
