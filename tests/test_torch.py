"""The torch operators: registration and fake functions (torch.library.opcheck), autograd
(gradcheck in float64, against torch's own gradients), torch.compile without graph breaks,
autocast, out=; on CPU tensors (the host path), and on CUDA tensors where there is a GPU."""

import subprocess
import sys

import numpy as np
import pytest

import cusoftmax

torch = pytest.importorskip("torch")
cusoftmax.softmax(torch.ones(1))  # the ops are registered with the first tensor passed

OPS = ("softmax", "log_softmax", "logsumexp", "softmax_vjp", "log_softmax_vjp", "softmax_topk")


def _x(shape=(3, 4, 5), dtype=torch.float64, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype).mul(2).requires_grad_(requires_grad)


def test_every_op_is_registered_by_import_after_torch():
    code = ("import torch, cusoftmax; "
            f"print(all(hasattr(torch.ops.cusoftmax, n) for n in {OPS!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.strip() == "True", done.stderr
    code = "import cusoftmax, sys; print('torch' in sys.modules)"  # not imported for nothing
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape, axis", [((3, 5), [-1]), ((2, 3, 4), [0]), ((2, 3, 4), [0, 2]),
                                         ((4,), None)])
def test_opcheck(dtype, shape, axis):
    x, dy = _x(shape, dtype, requires_grad=True), _x(shape, dtype, 1)
    where = torch.ones(shape, dtype=torch.bool)
    where.view(-1)[0] = False
    ops = torch.ops.cusoftmax
    cases = [(ops.softmax, (x, axis, None, None, None)),
             (ops.softmax, (x, axis, where, 0.5, None)),
             (ops.log_softmax, (x, axis, None, 2.0, None)),
             (ops.logsumexp, (x, axis, None, False, None, None, None)),
             (ops.logsumexp, (x, axis, x.detach().abs(), True, where, None, None)),
             (ops.softmax_vjp, (x.detach(), dy, axis, None)),
             (ops.log_softmax_vjp, (x.detach(), dy, axis, where))]
    if axis is not None and len(axis) == 1:
        cases += [(ops.softmax_topk, (x, 2, axis[0], False, False, None, None, None)),
                  (ops.softmax_topk, (x, 2, axis[0], True, True, where, 0.5, None))]
    for op, args in cases:
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_gradcheck_normalized(name):
    fn = getattr(cusoftmax, name)
    x = _x(requires_grad=True)
    where = _x(seed=3) > -1.5
    s = torch.tensor([[[0.5]], [[1.5]], [[2.0]]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: fn(t), (x,))
    # masked places are -inf in log_softmax: a finite output for the numerical Jacobian
    assert torch.autograd.gradcheck(
        lambda t: fn(t, 1, where=where, scale=0.7).masked_fill(~where, 0), (x,))
    assert torch.autograd.gradcheck(lambda t, u: fn(t, (1, 2), scale=u), (x, s))


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_second_derivatives(name):
    """The VJP ops have a backward of their own: second derivatives equal torch's own ops',
    gradgradcheck passes in float64 (with where=, scale= and a non-last dim), and the VJP
    functions pass gradcheck and gradgradcheck in y and dy, masked positions included."""
    fn, ref = getattr(cusoftmax, name), getattr(torch, name)
    vjp = getattr(cusoftmax, f"{name}_vjp")
    x, w = _x(requires_grad=True), _x(seed=2)
    where = _x(seed=3) > -1.5
    s = torch.tensor([[[0.5]], [[1.5]], [[2.0]]], dtype=torch.float64, requires_grad=True)
    for dim in (-1, 1):
        second = []
        for f in (fn, ref):
            (g,) = torch.autograd.grad((f(x, dim) * w).sum(), x, create_graph=True)
            second.append(torch.autograd.grad((g * g).sum(), x)[0])
        torch.testing.assert_close(*second)
        assert torch.autograd.gradgradcheck(lambda t, dim=dim: fn(t, dim), (x,))
    assert torch.autograd.gradgradcheck(
        lambda t: fn(t, 1, where=where, scale=0.7).masked_fill(~where, 0), (x,))
    assert torch.autograd.gradgradcheck(lambda t, u: fn(t, (1, 2), scale=u), (x, s))
    y = fn(x.detach(), 1, where=where).requires_grad_()
    dy = _x(seed=4, requires_grad=True)
    for kw in ({}, {"where": where}):
        assert torch.autograd.gradcheck(lambda a, b, kw=kw: vjp(a, b, 1, **kw), (y, dy))
        assert torch.autograd.gradgradcheck(lambda a, b, kw=kw: vjp(a, b, 1, **kw), (y, dy))


def test_second_derivatives_of_logsumexp_and_topk():
    x = _x(requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda t: cusoftmax.logsumexp(t, 1), (x,))
    assert torch.autograd.gradgradcheck(lambda t: cusoftmax.softmax_topk(t, 2, 1)[0], (x,))
    assert torch.autograd.gradgradcheck(
        lambda t: cusoftmax.softmax_topk(t, 3, log=True, renormalize=True)[0], (x,))


def test_transforms_and_dispatch_modes_see_the_operators():
    """torch.func.vmap, a batched backward (is_grads_batched, a vectorized jacobian) and a
    TorchDispatchMode go through the operators (the dispatcher), not around them."""
    from torch.utils._python_dispatch import TorchDispatchMode

    x = _x((2, 4), requires_grad=True)
    torch.testing.assert_close(torch.func.vmap(cusoftmax.softmax)(x.detach()),
                               torch.softmax(x.detach(), -1))
    for name in ("softmax", "log_softmax"):
        fn, ref = getattr(cusoftmax, name), getattr(torch, name)
        eye = torch.eye(8, dtype=x.dtype).reshape(8, 2, 4)
        (got,) = torch.autograd.grad(fn(x), x, eye, is_grads_batched=True)
        (want,) = torch.autograd.grad(ref(x, -1), x, eye, is_grads_batched=True)
        torch.testing.assert_close(got, want)
        jac = torch.autograd.functional.jacobian(fn, x.detach(), vectorize=True)
        torch.testing.assert_close(jac, torch.autograd.functional.jacobian(
            lambda t, ref=ref: ref(t, -1), x.detach()))
    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Log():
        cusoftmax.softmax(x)
        cusoftmax.log_softmax(x.detach())
    assert "cusoftmax.softmax.default" in seen and "cusoftmax.log_softmax.default" in seen


def test_logsumexp_grad_with_b_broadcast_over_the_reduced_axis():
    a = _x((5,), requires_grad=True)
    b = _x((3, 5), seed=5).abs().requires_grad_()
    assert torch.autograd.gradcheck(lambda t, u: cusoftmax.logsumexp(t, 0, b=u), (a, b))


def test_gradcheck_logsumexp():
    x = _x(requires_grad=True)
    b = _x(seed=4).abs().requires_grad_()
    where = _x(seed=3) > -1.5
    assert torch.autograd.gradcheck(lambda t: cusoftmax.logsumexp(t, 1), (x,))
    assert torch.autograd.gradcheck(lambda t, u: cusoftmax.logsumexp(t, (0, 2), b=u,
                                                                     keepdims=True), (x, b))
    assert torch.autograd.gradcheck(lambda t: cusoftmax.logsumexp(t, -1, where=where,
                                                                  scale=1.3), (x,))


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("renormalize", [False, True])
def test_gradcheck_topk_values(log, renormalize):
    x = _x((4, 9), requires_grad=True)
    where = torch.arange(9) < 7
    assert torch.autograd.gradcheck(
        lambda t: cusoftmax.softmax_topk(t, 3, log=log, renormalize=renormalize,
                                         where=where, scale=0.8)[0], (x,))


def test_gradients_equal_torchs():
    x = _x(requires_grad=True)
    for ours, theirs in ((lambda t: cusoftmax.softmax(t, 1), lambda t: torch.softmax(t, 1)),
                         (lambda t: cusoftmax.log_softmax(t, 0),
                          lambda t: torch.log_softmax(t, 0)),
                         (lambda t: cusoftmax.logsumexp(t, 2), lambda t: torch.logsumexp(t, 2))):
        g = torch.randn_like(theirs(x))
        a = torch.autograd.grad((ours(x) * g).sum(), x)[0]
        b = torch.autograd.grad((theirs(x) * g).sum(), x)[0]
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_compile_fullgraph_forward_and_backward():
    w0 = _x((6, 3), torch.float32, seed=6)
    x, target = _x((8, 6), torch.float32, seed=7), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])

    def loss(w):
        logits = x @ w
        lp = cusoftmax.log_softmax(logits, scale=0.5)
        return torch.nn.functional.nll_loss(lp, target) + cusoftmax.logsumexp(logits, 1).mean()

    explained = torch._dynamo.explain(loss)(w0.clone().requires_grad_())
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    results = []
    for fn in (loss, torch.compile(loss, fullgraph=True, backend="aot_eager")):
        w = w0.clone().requires_grad_()
        value = fn(w)
        value.backward()
        results.append((value.detach(), w.grad))
    torch.testing.assert_close(results[0], results[1])


def test_autocast_leaves_the_dtype():
    x = _x((4, 8), torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert cusoftmax.softmax(x).dtype == torch.float32
        assert cusoftmax.softmax(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_dtypes_and_results():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int16):
        x = (torch.arange(24).reshape(4, 6) % 7 - 3).to(dtype)
        y = cusoftmax.softmax(x)
        want = cusoftmax.softmax(np.asarray(x.to(torch.float64)))
        assert isinstance(y, torch.Tensor)
        assert y.dtype == (torch.float32 if dtype == torch.int16 else dtype)
        np.testing.assert_allclose(y.to(torch.float64).numpy(), want, rtol=8e-3)


def test_out_and_method():
    x = _x((3, 5), torch.float32)
    out = torch.empty_like(x)
    assert cusoftmax.softmax(x, out=out) is out
    torch.testing.assert_close(out, torch.softmax(x, -1))
    with pytest.raises(RuntimeError, match="automatic differentiation"):
        cusoftmax.softmax(x.clone().requires_grad_(), out=torch.empty_like(x))
    with pytest.raises(ValueError, match="host"):
        cusoftmax.softmax(x, method="block")  # a CPU tensor runs on the host
    r, sign = cusoftmax.logsumexp(x, 1, b=-torch.ones(5), return_sign=True)
    assert torch.all(sign == -1)


def test_meta_tensors_take_the_fake_functions():
    x = torch.empty(3, 5, device="meta")
    y = cusoftmax.log_softmax(x)
    assert y.device.type == "meta" and y.shape == (3, 5)
    v, i = cusoftmax.softmax_topk(x, 2)
    assert v.shape == i.shape == (3, 2) and i.dtype == torch.int64
    assert cusoftmax.segment_logsumexp(x, torch.zeros(3, dtype=torch.int64, device="meta"),
                                       num_segments=4).shape == (4, 5)


def test_errors_reach_the_caller():
    with pytest.raises(TypeError, match="complex"):
        cusoftmax.softmax(torch.ones(3, dtype=torch.complex64))
    with pytest.raises(ValueError, match="k must be"):
        cusoftmax.softmax_topk(torch.ones(3), 5)
    with pytest.raises(TypeError, match="one axis"):
        cusoftmax.softmax_topk(torch.ones(3), 1, axis=None)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device for torch")


@cuda
def test_cuda_stream_graph_and_grad():
    x = torch.randn(64, 1000, device="cuda", requires_grad=True)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = cusoftmax.softmax(x)
        y.sum().backward()
    s.synchronize()
    torch.testing.assert_close(y, torch.softmax(x, -1))
    static = torch.randn(64, 1000, device="cuda")
    cusoftmax.softmax(static)  # compiled and planned before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = cusoftmax.log_softmax(static)
    static.copy_(torch.randn(64, 1000, device="cuda"))
    graph.replay()
    torch.testing.assert_close(out, torch.log_softmax(static, -1))


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_cuda_calls_like_earlier_ones_launch_directly(dtype, monkeypatch):
    """A CUDA call like an earlier one launches the kernel that one used on the tensors' own
    memory (counted here): the same bits as the first call and as the CuPy call, for softmax,
    log_softmax and both VJPs, on torch's current stream, a two-pass plan with its workspace
    (rows of 4M) too; a strided tensor, an op computed by array operations (float64
    log_softmax) and a dy on another device go the general way."""
    import cupy

    from cusoftmax import _torch
    from cusoftmax.planning import FUSED_TYPES

    monkeypatch.setattr(_torch, "_LAUNCHES", {})  # this test's calls alone

    def entries(op, t):
        return [k for k in _torch._LAUNCHES
                if k[0] == op and k[4][:3] == (t.shape, t.stride(), t.dtype)]

    x = torch.randn(64, 1000, device="cuda", dtype=dtype)
    dy = torch.randn(64, 1000, device="cuda", dtype=dtype)
    long = torch.randn(2, 1 << 22, device="cuda", dtype=dtype)
    for op, args in (("softmax", (x,)), ("log_softmax", (x,)),
                     ("softmax_vjp", (x.softmax(-1), dy)),
                     ("log_softmax_vjp", (x.log_softmax(-1), dy)), ("softmax", (long,))):
        fn = getattr(cusoftmax, op)
        first = fn(*args)
        (key,) = entries(op, args[0])
        tuning, launch = _torch._LAUNCHES[key]
        want = torch.from_dlpack(fn(*[cupy.from_dlpack(a) for a in args]))
        if str(dtype).removeprefix("torch.") not in FUSED_TYPES[op]:  # array operations
            assert launch is None and torch.equal(first, want), op
            continue
        assert launch is not None, op
        if args[0] is long:
            assert launch.workspace is not None
        streams = []

        def counted(p, s, launch=launch):
            streams.append(s)
            launch(p, s)

        counted.workspace = launch.workspace
        _torch._LAUNCHES[key] = (tuning, counted)
        try:
            second = fn(*args)
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                third = fn(*args)
            side.synchronize()
        finally:
            _torch._LAUNCHES[key] = (tuning, launch)
        assert streams == [torch.cuda.current_stream().cuda_stream, side.cuda_stream], op
        for got in (first, second, third):
            assert got.dtype == dtype and got.shape == args[0].shape
            assert torch.equal(got, want), op
    strided = x[:, ::2]
    want = torch.softmax(strided.double(), -1).to(dtype)
    for _ in range(2):
        torch.testing.assert_close(cusoftmax.softmax(strided), want)
    (key,) = entries("softmax", strided)
    assert _torch._LAUNCHES[key][1] is None
    y = x.softmax(-1)
    cusoftmax.softmax_vjp(y, dy)
    with pytest.raises(RuntimeError, match="all tensors on cuda:0"):
        cusoftmax.softmax_vjp(y, dy.cpu())  # not a launch on a host address


@cuda
def test_cuda_tensor_with_host_operands():
    """With a CUDA x, a NumPy where, b or scale goes to x's device, a 0-d CPU scale tensor too
    (a scalar, as torch's own operations take it); a CPU tensor of more dimensions is an
    error naming the devices."""
    x = torch.randn(4, 6, device="cuda", dtype=torch.float64, requires_grad=True)
    scale = np.array([[0.5], [1.0], [2.0], [3.0]])
    want = torch.softmax(x * torch.as_tensor(scale, device="cuda"), -1)
    torch.testing.assert_close(cusoftmax.softmax(x, scale=scale), want)
    s = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    y = cusoftmax.log_softmax(x, scale=s)
    torch.testing.assert_close(y, torch.log_softmax(x * 0.5, -1))
    y.sum().backward()
    assert s.grad is not None and s.grad.device.type == "cpu"
    keep = np.arange(6) < 4
    torch.testing.assert_close(cusoftmax.softmax(x, where=keep)[:, 4:],
                               torch.zeros(4, 2, device="cuda", dtype=torch.float64))
    with pytest.raises(RuntimeError, match="all tensors on cuda:0"):
        cusoftmax.softmax(x, scale=torch.ones(4, 1, dtype=torch.float64))


IDS = [0, 0, 1, 1, 1, 3, 3, -1, 2, 2, 2, 2]


def test_segment_operators():
    x = _x((12, 2), requires_grad=True)
    ids, off = torch.tensor(IDS), torch.tensor([1, 4, 4, 9, 12])
    ops = torch.ops.cusoftmax
    old_torch = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 14)
    for args in ((x, ids, None, 4, 0, False, None, None, None),
                 (x, ids, None, None, 0, False, x.detach() > 0, 0.5, None),
                 (x, None, off, None, 0, False, None, None, None)):
        for op in (ops.segment_softmax, ops.segment_log_softmax, ops.segment_logsumexp):
            utils = ["test_schema", "test_autograd_registration", "test_faketensor",
                     "test_aot_dispatch_dynamic"]
            if op is ops.segment_logsumexp and args[2] is None and args[3] is None and old_torch:
                # a result of data-dependent size under AOT autograd: torch 2.13's partitioner
                # fails on it ("sym_size_int was invalid, but is output"), 2.14.1 passes
                utils.remove("test_aot_dispatch_dynamic")
            torch.library.opcheck(op, args, test_utils=utils)
    for op in (ops.segment_softmax_vjp, ops.segment_log_softmax_vjp):
        torch.library.opcheck(op, (x.detach(), x.detach(), ids, None, 4, 0, False, None))
    y = cusoftmax.segment_softmax(x, ids, num_segments=4)
    np.testing.assert_allclose(y.detach().numpy(),
                               cusoftmax.segment_softmax(x.detach().numpy(), IDS, num_segments=4))


def test_segment_gradcheck():
    x = _x((12, 2), requires_grad=True)
    ids, off = torch.tensor(IDS), torch.tensor([1, 4, 4, 9, 12])
    outside = (torch.arange(12) < 1)[:, None]  # log_softmax is -inf there: a finite output
    cases = [lambda t: cusoftmax.segment_softmax(t, ids, num_segments=4, scale=0.5),
             lambda t: cusoftmax.segment_log_softmax(t, offsets=off).masked_fill(outside, 0),
             lambda t: cusoftmax.segment_logsumexp(t, ids, num_segments=4, scale=1.5),
             lambda t: cusoftmax.segment_logsumexp(t.T, ids, num_segments=4, axis=1)]
    for f in cases:
        assert torch.autograd.gradcheck(f, (x,))
    with pytest.raises(NotImplementedError, match="array scale"):
        cusoftmax.segment_softmax(x, ids, num_segments=4, scale=torch.ones(4, 1)).sum().backward()


def test_segment_compile_fullgraph():
    x, ids = _x((12, 2), requires_grad=True), torch.tensor(IDS)

    def f(t):
        return (cusoftmax.segment_softmax(t, ids, num_segments=4) ** 2).sum() + \
            cusoftmax.segment_logsumexp(t, ids, num_segments=4).sum()

    assert torch._dynamo.explain(f)(x).graph_break_count == 0
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    eager, (g_eager,) = f(x), torch.autograd.grad(f(x), x)
    got = compiled(x)
    (g_got,) = torch.autograd.grad(compiled(x), x)
    torch.testing.assert_close((got, g_got), (eager, g_eager))
