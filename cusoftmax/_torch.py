"""PyTorch operators: ``torch.ops.cusoftmax.<op>`` for softmax, log_softmax, logsumexp, the two
VJPs and softmax_topk, registered with ``torch.library.custom_op``: a fake (meta) function each,
so torch.compile and torch.export trace shapes without running them, and autograd on softmax,
log_softmax, logsumexp and softmax_topk's values (their backward the VJP ops), and on the VJP
ops (in torch's operations: second derivatives). The public functions send torch tensors here;
eager calls skip the dispatcher (``_dispatch``, ``_Recorded``).

CUDA tensors run the kernels on ``torch.cuda.current_stream()`` (CuPy's current stream is set
to it around the call), as CuPy views of their memory without a copy; a softmax, log_softmax
or VJP call like an earlier one launches that call's kernel on the tensors' memory directly
(``_launched``). CPU tensors run the host path (NumPy views of the tensors, bfloat16
included). No op returns a view of an input. Autocast leaves the inputs as they are: the ops
compute in the input's dtype (half types in float32 inside).
"""

from __future__ import annotations

import contextlib
from typing import Optional

import numpy as np
import torch

from . import _args, _engine, _family, _segment, _topk, planning
from ._layout import normalize_axes

Tensor = torch.Tensor
_LIB = "cusoftmax"


def _host(t):
    """A NumPy view of CPU tensor `t` (bfloat16 as ml_dtypes' type, which DLPack lacks)."""
    if t is None:
        return None
    t = t.detach()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _tensor(a):
    """A tensor of host array `a` (without a copy) or `a` itself if it is one."""
    if isinstance(a, torch.Tensor):
        return a
    a = np.asarray(a)  # a NumPy scalar too
    if not a.flags.c_contiguous:
        a = a.copy()
    if a.dtype.kind == "V":  # ml_dtypes' bfloat16 (an opaque kind to NumPy)
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


_CUDA_CONTEXTS: dict = {}  # (device index, stream pointer) -> (Device, ExternalStream, allocator)


# The current stream's handle of a device: torch's C binding where it has one (a call, where
# torch.cuda.current_stream builds a Stream object, 3 us on the H200).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or \
    (lambda device: torch.cuda.current_stream(device).cuda_stream)


def _cuda_context(t):
    """CuPy's Device, an ExternalStream of ``torch.cuda.current_stream()`` and an allocator over
    torch's caching allocator on that stream, for tensor `t`: made once a (device, stream)."""
    device = t.device.index
    ptr = _raw_stream(device)
    ctx = _CUDA_CONTEXTS.get((device, ptr))
    if ctx is None:
        import cupy

        ctx = _CUDA_CONTEXTS[device, ptr] = (cupy.cuda.Device(device),
                                             cupy.cuda.ExternalStream(ptr, device),
                                             _torch_allocator(device, ptr))
    return ctx


# Tensor dtypes that CuPy arrays view directly (others go through DLPack).
_VIEWED = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64,
           torch.int8: np.int8, torch.uint8: np.uint8, torch.int16: np.int16,
           torch.int32: np.int32, torch.int64: np.int64, torch.bool: np.bool_}


def _cupy_view(t):
    """A CuPy array over CUDA tensor `t`'s memory, no copy: a view of its pointer, shape and
    strides owned by the tensor (DLPack's import costs 17 us a call on the H200; this a few)."""
    import cupy

    t = t.detach()
    dtype = _VIEWED.get(t.dtype)
    if dtype is None or t.numel() == 0:
        return cupy.from_dlpack(t)
    size = t.element_size()
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    mem = cupy.cuda.UnownedMemory(t.data_ptr(), span * size, t, t.device.index)
    return cupy.ndarray(tuple(t.shape), dtype, cupy.cuda.MemoryPointer(mem, 0),
                        tuple(s * size for s in t.stride()))


@contextlib.contextmanager
def _on_torch_stream(t):
    """Around GPU work on tensor `t`: CuPy's current device and stream are torch's, and its
    allocations (results, workspaces) come from torch's caching allocator on that stream, so
    that a capture by torch.cuda.graph takes them from the graph's own pool."""
    if t.device.type != "cuda":
        yield
        return
    import cupy

    device, stream, alloc = _cuda_context(t)
    with device, stream, cupy.cuda.using_allocator(alloc):
        yield


class _TorchBlock:
    """A block of torch's caching allocator, given back when CuPy's memory that owns it goes."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __del__(self):
        torch.cuda.caching_allocator_delete(self.ptr)


def _torch_allocator(device: int, stream: int):
    """A CuPy allocator over ``torch.cuda.caching_allocator_alloc`` on `stream` (a handle):
    each block goes back to torch when CuPy lets go of its memory."""
    import cupy

    def alloc(size):
        ptr = torch.cuda.caching_allocator_alloc(max(size, 1), device, stream)
        mem = cupy.cuda.UnownedMemory(ptr, size, _TorchBlock(ptr), device)
        return cupy.cuda.MemoryPointer(mem, 0)

    return alloc


def _run(fn, arrays, **kw):
    """``fn`` (an eager function of the family) on tensors: CUDA ones as CuPy arrays (views of
    their memory, ``_cupy_view``), so that a call like an earlier one takes
    the engine's fast path for CuPy arrays; CPU ones as NumPy views; the result(s) as new
    tensors."""
    first = arrays[0]
    for a in arrays[1:]:
        if a is not None and a.device != first.device:
            raise RuntimeError(f"expected all tensors on {first.device}, got one on {a.device}")
    if first.device.type == "cuda":
        import cupy

        device, stream, alloc = _cuda_context(first)
        with device, stream, cupy.cuda.using_allocator(alloc):
            res = fn(*(None if a is None else _cupy_view(a) for a in arrays), **kw)
            return tuple(map(torch.from_dlpack, res)) if isinstance(res, tuple) else \
                torch.from_dlpack(res)
    res = fn(*(_host(a) for a in arrays), **kw)
    return tuple(map(_tensor, res)) if isinstance(res, tuple) else _tensor(res)


# CUDA calls of the ops below seen before, by (op, the eager axis and its type, the current
# device, each tensor's shape, strides, dtype, address modulo 16 and device) -> (the tuning,
# the launch of the kernel the engine kept for it, ``run.launch`` of _kernels, or None).
_LAUNCHES: dict = {}
_current_device = None  # CUDA's current device (the runtime's), set at the first CUDA call


def _launched(op: str, axis, tensors, compute):
    """``compute()`` (the general way, through CuPy views), or, for CUDA tensors like those of
    an earlier call whose kernel the engine kept, that kernel launched on the tensors' memory
    into a new tensor like the first, on torch's current stream: no CuPy array, no DLPack. The
    first call of a kind looks the launch up (``_learn``)."""
    global _current_device
    x = tensors[0]
    if x.device.type != "cuda":
        return compute()
    if _current_device is None:
        import cupy

        _current_device = cupy.cuda.runtime.getDevice
    device = _current_device()
    if device != x.device.index:  # the launch runs in the current device's context
        return compute()
    key = (op, axis, type(axis), device,
           *[(t.shape, t.stride(), t.dtype, t.data_ptr() & 15, t.get_device()) for t in tensors])
    hit = _LAUNCHES.get(key)  # the ops' eager axis: an int, a tuple or None
    if hit is not None and hit[0] is planning.active():
        if hit[1] is None:
            return compute()
        launch, y = hit[1], torch.empty_like(x)
        pointers = (*[t.data_ptr() for t in tensors], y.data_ptr())
        if launch.workspace is not None:  # a two-pass plan: its head zeroed on the same stream
            nbytes, zeroed = launch.workspace
            work = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
            if zeroed:
                work[:zeroed].zero_()
            pointers += (work.data_ptr(),)
        launch(pointers, _raw_stream(device))
        return y
    y = compute()
    _learn(key, op, axis, tensors)
    return y


def _learn(key, op, axis, tensors) -> None:
    """Keep the launch the engine's fast path holds for these tensors' CuPy views (None where
    it holds none, or one that needs more than the arrays' addresses)."""
    if len(_LAUNCHES) >= 4096:
        return
    run = None
    if _engine.fast_type is not None:
        views = [_cupy_view(t) for t in tensors]
        run = _engine.remembered(views[0], axis, op, dy=views[1] if len(views) > 1 else None)
    _LAUNCHES[key] = (planning.active(), getattr(run, "launch", None))


def _axis(axis):
    """The ops' `axis`: None (every axis) or a list of ints."""
    return None if axis is None else list(axis)


def _scales(scale, like):
    """(a float scale, a tensor scale): the kernels take a Python scalar as it is; an array
    becomes a tensor on `like`'s device (as ``_operand``), and so does a 0-d tensor on another
    (a scalar to torch's own operations)."""
    if scale is None:
        return None, None
    if isinstance(scale, torch.Tensor):
        moved = scale.ndim == 0 and scale.device != like.device
        return None, scale.to(like.device) if moved else scale
    if _args.scalar_scale(scale):
        return float(scale), None
    return None, _operand(scale, like)


def _one_scale(fs, ts):
    return fs if ts is None else ts


_IMPLS: dict = {}  # each operator -> its function (for calls that need no dispatcher)


def _register(name: str, fn):
    """``fn`` as the operator ``cusoftmax::<name>`` (no input mutated)."""
    op = torch.library.custom_op(f"{_LIB}::{name}", fn, mutates_args=())
    _IMPLS[op] = fn
    return op


# torch.func transforms, vmap's batched tensors (a backward batched by is_grads_batched or
# vectorize=True too) and TorchDispatchModes (selective checkpointing, op logging) see only the
# dispatcher's ops.
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
_WRAPPED = tuple(getattr(torch._C._functorch, name, lambda t: False) for name in
                 ("is_functorch_wrapped_tensor", "is_legacy_batchedtensor"))


def _wrapped(t) -> bool:
    """Whether tensor `t` is batched or wrapped by a transform (its data not its own memory)."""
    return any(is_wrapped(t) for is_wrapped in _WRAPPED)


def _dispatch(op, *args):
    """`op` through torch's dispatcher where it has work to do (torch.compile traces it, a
    torch.func transform or a dispatch mode is active, a tensor is a subclass or on the meta
    or another device); else its function itself, or,
    where autograd records the call, ``_Recorded`` (the same setup and backward as the
    operator's autograd): the dispatcher and the operator's autograd cost some 10 and 30 us a
    call on 2 CPU cores (record torch-1)."""
    if torch.compiler.is_compiling() or _functorch_active() or _dispatch_modes():
        return op(*args)
    grad, recorded = torch.is_grad_enabled(), False
    for a in args:
        if not isinstance(a, torch.Tensor):
            continue
        if type(a) is not torch.Tensor or a.device.type not in ("cpu", "cuda") or _wrapped(a):
            return op(*args)
        recorded = recorded or (grad and a.requires_grad)
    if not recorded:
        return _IMPLS[op](*args)
    if op in _AUTOGRAD:
        return _Recorded.apply(op, *args)
    return op(*args)


_AUTOGRAD: dict = {}  # each operator with autograd -> (its setup_context, its backward)


def _autograd(op, backward, setup_context) -> None:
    """Autograd for operator `op`: registered with torch, and kept for ``_Recorded``."""
    torch.library.register_autograd(op, backward, setup_context=setup_context)
    _AUTOGRAD[op] = (setup_context, backward)


class _Recorded(torch.autograd.Function):
    """An eager call of an operator that autograd records, without the dispatcher: its
    function forward, its registered setup_context and backward. The setup runs inside
    forward: a separate setup_context staticmethod makes each call bind the arguments to
    forward's signature (inspect.signature, some 10 us)."""

    @staticmethod
    def forward(ctx, op, *args):
        output = _IMPLS[op](*args)
        ctx.op = op
        _AUTOGRAD[op][0](ctx, args, output)
        return output

    @staticmethod
    def backward(ctx, *grads):
        return (None, *_AUTOGRAD[ctx.op][1](ctx, *grads))


def _result_dtype(t: Tensor) -> torch.dtype:
    """softmax's result dtype for tensor `t`: floats keep theirs, integers promote as
    ``numpy.exp`` (``_args.result_dtype``)."""
    if t.dtype.is_floating_point:
        return t.dtype
    if t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"softmax takes real floating-point or integer tensors, not {t.dtype}")
    name = _args.result_dtype(np.dtype(str(t.dtype).removeprefix("torch."))).name
    return getattr(torch, name)


def _axes(axis, ndim):
    return normalize_axes(tuple(axis) if axis is not None else None, ndim)


# The forward ops.

def _normalized_impl(op, x, axis, where, scale, scale_tensor):
    def compute():
        return _run(_normalize_fn(op), (x, where, scale_tensor), axis=axis, scale=scale)

    if where is None and scale is None and scale_tensor is None:
        return _launched(op, _eager_axis(axis), (x,), compute)
    return compute()


def _softmax_impl(x: Tensor, axis: Optional[list[int]], where: Optional[Tensor],
                  scale: Optional[float], scale_tensor: Optional[Tensor]) -> Tensor:
    return _normalized_impl("softmax", x, axis, where, scale, scale_tensor)


softmax_op = _register("softmax", _softmax_impl)


def _log_softmax_impl(x: Tensor, axis: Optional[list[int]], where: Optional[Tensor],
                      scale: Optional[float], scale_tensor: Optional[Tensor]) -> Tensor:
    return _normalized_impl("log_softmax", x, axis, where, scale, scale_tensor)


log_softmax_op = _register("log_softmax", _log_softmax_impl)


def _normalize_fn(op):
    fn = getattr(_family, op)

    def call(x, where, scale_tensor, *, axis, scale):
        axis = _eager_axis(axis)
        return fn(x, axis, where=where, scale=_one_scale(scale, scale_tensor))

    return call


@softmax_op.register_fake
def _(x, axis, where, scale, scale_tensor):
    return x.new_empty(x.shape, dtype=_result_dtype(x))


@log_softmax_op.register_fake
def _(x, axis, where, scale, scale_tensor):
    return x.new_empty(x.shape, dtype=_result_dtype(x))


def _logsumexp_impl(a: Tensor, axis: Optional[list[int]], b: Optional[Tensor], keepdims: bool,
                    where: Optional[Tensor], scale: Optional[float],
                    scale_tensor: Optional[Tensor]) -> Tensor:
    def call(a, b, where, scale_tensor):
        return _family.logsumexp(a, _eager_axis(axis), b, keepdims,
                                 where=where, scale=_one_scale(scale, scale_tensor))

    return _run(call, (a, b, where, scale_tensor))


logsumexp_op = _register("logsumexp", _logsumexp_impl)


@logsumexp_op.register_fake
def _(a, axis, b, keepdims, where, scale, scale_tensor):
    shape = a.shape if b is None else torch.broadcast_shapes(a.shape, b.shape)
    axes = _axes(axis, len(shape))
    kept = [1 if d in axes else n for d, n in enumerate(shape)] if keepdims else \
        [n for d, n in enumerate(shape) if d not in axes]
    return a.new_empty(kept, dtype=_result_dtype(a))


def _vjp_impl(op, y, dy, axis, where):
    def compute():
        return _run(_vjp_fn(op, axis), (y, dy, where))

    if where is None:
        return _launched(op, _eager_axis(axis), (y, dy), compute)
    return compute()


def _softmax_vjp_impl(y: Tensor, dy: Tensor, axis: Optional[list[int]],
                      where: Optional[Tensor]) -> Tensor:
    return _vjp_impl("softmax_vjp", y, dy, axis, where)


softmax_vjp_op = _register("softmax_vjp", _softmax_vjp_impl)


def _log_softmax_vjp_impl(y: Tensor, dy: Tensor, axis: Optional[list[int]],
                          where: Optional[Tensor]) -> Tensor:
    return _vjp_impl("log_softmax_vjp", y, dy, axis, where)


log_softmax_vjp_op = _register("log_softmax_vjp", _log_softmax_vjp_impl)


def _vjp_fn(op, axis):
    fn = getattr(_family, op)

    def call(y, dy, where):
        return fn(y, dy, _eager_axis(axis), where=where)

    return call


@softmax_vjp_op.register_fake
def _(y, dy, axis, where):
    return y.new_empty(y.shape, dtype=_result_dtype(y))


@log_softmax_vjp_op.register_fake
def _(y, dy, axis, where):
    return y.new_empty(y.shape, dtype=_result_dtype(y))


def _softmax_topk_impl(x: Tensor, k: int, axis: int, log: bool, renormalize: bool,
                       where: Optional[Tensor], scale: Optional[float],
                       scale_tensor: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    def call(x, where, scale_tensor):
        return _topk.softmax_topk(x, k, axis, log=log, renormalize=renormalize, where=where,
                                  scale=_one_scale(scale, scale_tensor))

    return _run(call, (x, where, scale_tensor))


softmax_topk_op = _register("softmax_topk", _softmax_topk_impl)


@softmax_topk_op.register_fake
def _(x, k, axis, log, renormalize, where, scale, scale_tensor):
    ax = _axes([axis], x.ndim)[0]
    shape = list(x.shape)
    shape[ax] = k
    return x.new_empty(shape, dtype=_result_dtype(x)), x.new_empty(shape, dtype=torch.int64)


# Autograd: each backward is the family's VJP (ops above), times the scale.

def _save_normalized(ctx, inputs, output):
    x, axis, where, scale, scale_tensor = inputs
    ctx.axis, ctx.scale = axis, scale
    ctx.save_for_backward(output, where, scale_tensor,
                          x if scale_tensor is not None and scale_tensor.requires_grad else None)


def _normalized_backward(vjp_op):
    def backward(ctx, g):
        y, where, scale_tensor, x = ctx.saved_tensors
        d = _dispatch(vjp_op, y, g, ctx.axis, where)  # the gradient with respect to scale * x
        dx = d if ctx.scale is None else d * ctx.scale
        ds = None
        if scale_tensor is not None:
            dx = d * scale_tensor
            if x is not None:
                ds = (d * x).sum_to_size(scale_tensor.shape)
        return dx, None, None, None, ds

    return backward


_autograd(softmax_op, _normalized_backward(softmax_vjp_op), _save_normalized)
_autograd(log_softmax_op, _normalized_backward(log_softmax_vjp_op), _save_normalized)


def _save_vjp(ctx, inputs, output):
    y, dy, axis, where = inputs
    ctx.axis = axis
    ctx.save_for_backward(y, dy, where)


def _vjp_backward(log: bool):
    """The VJPs' own backward (a second derivative of softmax and log_softmax), in torch's
    operations, so that it differentiates again; sums over the kept positions in float32 for
    half types, the masked positions' gradients 0. With the cotangent u of dx:
    softmax_vjp, dx = y (dy - s), s = sum(y dy): dy gets y (u - t), t = sum(u y), and y gets
    u (dy - s) - dy t; log_softmax_vjp, dx = dy - exp(y) S, S = sum(dy): dy gets
    u - sum(u exp(y)), and y gets -u exp(y) S."""
    def backward(ctx, u):
        y, dy, where = ctx.saved_tensors
        axes = _axes(ctx.axis, y.ndim)
        compute = torch.float32 if y.dtype in (torch.float16, torch.bfloat16) else y.dtype
        yc, gc, uc = (t.to(compute) for t in (y, dy, u))

        def kept(t):
            return t if where is None else torch.where(where, t, t.new_zeros(()))

        if log:
            e = torch.exp(yc)
            d_dy = uc - kept(uc * e).sum(axes, keepdim=True)
            d_y = -uc * e * kept(gc).sum(axes, keepdim=True)
        else:
            s = kept(yc * gc).sum(axes, keepdim=True)
            t = kept(uc * yc).sum(axes, keepdim=True)
            d_dy = yc * (uc - t)
            d_y = uc * (gc - s) - gc * t
        return (kept(d_y).to(y.dtype).sum_to_size(y.shape),
                kept(d_dy).to(dy.dtype).sum_to_size(dy.shape), None, None)

    return backward


_autograd(softmax_vjp_op, _vjp_backward(False), _save_vjp)
_autograd(log_softmax_vjp_op, _vjp_backward(True), _save_vjp)


def _save_logsumexp(ctx, inputs, output):
    a, axis, b, keepdims, where, scale, scale_tensor = inputs
    ctx.axis, ctx.keepdims, ctx.scale = axis, keepdims, scale
    ctx.save_for_backward(a, b, where, scale_tensor, output)


def _logsumexp_backward(ctx, g):
    """d log(sum(b exp(v))) = b exp(v - r) (v = scale * a, r the result): with respect to a
    times the scale, to b without it, to an array scale summed to its shape."""
    a, b, where, scale_tensor, r = ctx.saved_tensors
    s = ctx.scale if scale_tensor is None else scale_tensor
    shape = a.shape if b is None else torch.broadcast_shapes(a.shape, b.shape)
    axes = _axes(ctx.axis, len(shape))
    if not ctx.keepdims:
        for d in axes:
            r, g = r.unsqueeze(d), g.unsqueeze(d)
    v = a if s is None else a * s
    p = torch.exp(v - r)
    if where is not None:
        p = torch.where(where, p, torch.zeros((), dtype=p.dtype, device=p.device))
    pb = p if b is None else p * b
    da = (pb * g) if s is None else pb * g * s
    db = None if b is None else torch.broadcast_to(p * g, shape).sum_to_size(b.shape)
    ds = None if scale_tensor is None else (pb * g * a).sum_to_size(scale_tensor.shape)
    return da.sum_to_size(a.shape), None, db, None, None, None, ds


_autograd(logsumexp_op, _logsumexp_backward, _save_logsumexp)


def _save_topk(ctx, inputs, output):
    x, k, axis, log, renormalize, where, scale, scale_tensor = inputs
    ctx.axis, ctx.log, ctx.renormalize, ctx.scale = axis, log, renormalize, scale
    ctx.save_for_backward(x, where, scale_tensor, *output)


def _topk_backward(ctx, g, _g_indices):
    """The values are the softmax (or log_softmax) of the whole slice at the chosen positions,
    or, renormalized, of the chosen entries alone: the slice's VJP with g at those positions,
    or the chosen entries' VJP scattered to their positions. Positions left out (-1) get 0."""
    x, where, scale_tensor, values, indices = ctx.saved_tensors
    s = _one_scale(ctx.scale, scale_tensor)
    ax = _axes([ctx.axis], x.ndim)[0]
    chosen = indices >= 0
    g = torch.where(chosen, g, torch.zeros((), dtype=g.dtype, device=g.device))
    vjp = log_softmax_vjp_op if ctx.log else softmax_vjp_op
    if ctx.renormalize:
        d_chosen = _dispatch(vjp, values, g, [ax], chosen)
        d = torch.zeros_like(x, dtype=values.dtype).scatter_add(ax, indices.clamp(min=0),
                                                                 d_chosen)
    else:
        y = _dispatch(log_softmax_op if ctx.log else softmax_op, x, [ax], where, ctx.scale,
                      scale_tensor)
        full = torch.zeros_like(y).scatter_add(ax, indices.clamp(min=0), g.to(y.dtype))
        d = _dispatch(vjp, y, full, [ax], where)
    if s is None:
        return d, None, None, None, None, None, None, None
    if isinstance(s, float):
        return d * s, None, None, None, None, None, None, None
    ds = (d * x).sum_to_size(s.shape) if s.requires_grad else None
    return d * s, None, None, None, None, None, None, ds


_autograd(softmax_topk_op, _topk_backward, _save_topk)


# What the public functions call with a torch tensor.

def _operand(v, like):
    """`where`, `b` or `dy` as a tensor on `like`'s device (or None)."""
    if v is None or isinstance(v, torch.Tensor):
        return v
    return torch.as_tensor(np.asarray(v), device=like.device)


def _eager(fn, x, *args, out, **kw):
    """`out=` or `method=`: the eager function itself (no operator, no autograd)."""
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                       for a in (x, *args, *kw.values())):
        raise RuntimeError(f"{fn.__name__} with out= or method= does not support automatic "
                           f"differentiation (as torch's out= functions)")
    with _on_torch_stream(x):
        return fn(x, *args, out=out, **kw)


def softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    return _normalized("softmax", softmax_op, x, axis, where, scale, out, method)


def log_softmax(x, axis=-1, *, where=None, scale=None, out=None, method=None):
    return _normalized("log_softmax", log_softmax_op, x, axis, where, scale, out, method)


def _normalized(name, op, x, axis, where, scale, out, method):
    if out is not None or method is not None:
        return _eager(getattr(_family, name), x, axis, out=out, where=where, scale=scale,
                      method=method)
    fs, ts = _scales(scale, x)
    return _dispatch(op, x, _axis(_one_tuple(axis)), _operand(where, x), fs, ts)


def _eager_axis(axis):
    """The ops' axis list as the eager functions take it: one axis as an int (their fast path
    of calls seen before keys ints), several as a tuple, None for all."""
    if axis is None:
        return None
    return axis[0] if len(axis) == 1 else tuple(axis)


def _one_tuple(axis):
    """An int axis as a 1-tuple (the ops take a list); None and tuples as they are."""
    return (axis,) if isinstance(axis, int) and not isinstance(axis, bool) else axis


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False, *, where=None,
              scale=None, out=None):
    if out is not None or return_sign:
        return _eager(_family.logsumexp, a, axis, b, keepdims, return_sign, out=out,
                      where=where, scale=scale)
    fs, ts = _scales(scale, a)
    return _dispatch(logsumexp_op, a, _axis(_one_tuple(axis)), _operand(b, a), bool(keepdims),
                     _operand(where, a), fs, ts)


def softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    if out is not None:
        return _eager(_family.softmax_vjp, y, _operand(dy, y), axis, out=out, where=where)
    return _dispatch(softmax_vjp_op, y, _operand(dy, y), _axis(_one_tuple(axis)),
                     _operand(where, y))


def log_softmax_vjp(y, dy, axis=-1, *, where=None, out=None):
    if out is not None:
        return _eager(_family.log_softmax_vjp, y, _operand(dy, y), axis, out=out, where=where)
    return _dispatch(log_softmax_vjp_op, y, _operand(dy, y), _axis(_one_tuple(axis)),
                     _operand(where, y))


def softmax_topk(x, k, axis=-1, *, log=False, renormalize=False, where=None, scale=None,
                 out=None):
    if out is not None:
        return _eager(_topk.softmax_topk, x, k, axis, out=out, log=log,
                      renormalize=renormalize, where=where, scale=scale)
    _args.int_axis(axis)
    fs, ts = _scales(scale, x)
    return _dispatch(softmax_topk_op, x, k, axis, bool(log), bool(renormalize),
                     _operand(where, x), fs, ts)


# The segment functions: an operator each, the backward by the segment VJP operators.

def _segment_forward(name):
    def impl(x: Tensor, segment_ids: Optional[Tensor], offsets: Optional[Tensor],
             num_segments: Optional[int], axis: int, indices_are_sorted: bool,
             where: Optional[Tensor], scale: Optional[float],
             scale_tensor: Optional[Tensor]) -> Tensor:
        fn = getattr(_segment, name)

        def call(x, segment_ids, offsets, where, scale_tensor):
            return fn(x, segment_ids, offsets=offsets, num_segments=num_segments, axis=axis,
                      indices_are_sorted=indices_are_sorted, where=where,
                      scale=_one_scale(scale, scale_tensor))

        return _run(call, (x, segment_ids, offsets, where, scale_tensor))

    impl.__name__ = name
    return _register(name, impl)


segment_softmax_op = _segment_forward("segment_softmax")
segment_log_softmax_op = _segment_forward("segment_log_softmax")
segment_logsumexp_op = _segment_forward("segment_logsumexp")


def _segment_count(segment_ids, offsets, num_segments):
    """The number of segments as the fake functions know it: given, from the offsets' length,
    or a size only the data fixes (torch 2.13's AOT autograd fails on such a result: pass
    num_segments under torch.compile there)."""
    if num_segments is not None:
        return num_segments
    if offsets is not None:
        return offsets.shape[0] - 1
    return torch.library.get_ctx().new_dynamic_size()


for _op in (segment_softmax_op, segment_log_softmax_op):
    @_op.register_fake
    def _(x, segment_ids, offsets, num_segments, axis, indices_are_sorted, where, scale,
          scale_tensor):
        return x.new_empty(x.shape, dtype=_result_dtype(x))


@segment_logsumexp_op.register_fake
def _(x, segment_ids, offsets, num_segments, axis, indices_are_sorted, where, scale,
      scale_tensor):
    ax = _axes([axis], x.ndim)[0]
    shape = list(x.shape)
    shape[ax] = _segment_count(segment_ids, offsets, num_segments)
    return x.new_empty(shape, dtype=_result_dtype(x))


def _segment_vjp_op(name):
    def impl(y: Tensor, dy: Tensor, segment_ids: Optional[Tensor], offsets: Optional[Tensor],
             num_segments: Optional[int], axis: int, indices_are_sorted: bool,
             where: Optional[Tensor]) -> Tensor:
        fn = getattr(_segment, name)

        def call(y, dy, segment_ids, offsets, where):
            return fn(y, dy, segment_ids, offsets=offsets, num_segments=num_segments, axis=axis,
                      indices_are_sorted=indices_are_sorted, where=where)

        return _run(call, (y, dy, segment_ids, offsets, where))

    impl.__name__ = name
    op = _register(name, impl)

    @op.register_fake
    def _(y, dy, segment_ids, offsets, num_segments, axis, indices_are_sorted, where):
        return y.new_empty(y.shape, dtype=_result_dtype(y))

    return op


segment_softmax_vjp_op = _segment_vjp_op("segment_softmax_vjp")
segment_log_softmax_vjp_op = _segment_vjp_op("segment_log_softmax_vjp")


def _save_segment(ctx, inputs, output):
    x, ids, offsets, count, axis, is_sorted, where, scale, scale_tensor = inputs
    ctx.args = (count, axis, is_sorted, scale)
    ctx.save_for_backward(x, ids, offsets, where, scale_tensor, output)


def _segment_backward(vjp_op):
    def backward(ctx, g):
        x, ids, offsets, where, scale_tensor, y = ctx.saved_tensors
        count, axis, is_sorted, scale = ctx.args
        d = _dispatch(vjp_op, y, g, ids, offsets, count, axis, is_sorted, where)  # wrt scale * x
        if scale_tensor is not None:
            raise NotImplementedError("the gradient of a segment function with an array "
                                      "scale is not built: pass a Python float scale")
        return (d if scale is None else d * scale), None, None, None, None, None, None, None, \
            None

    return backward


def _segment_logsumexp_backward(ctx, g):
    """d logsumexp(segment) / d x = the segment's softmax, times the segment's g."""
    x, ids, offsets, where, scale_tensor, _ = ctx.saved_tensors
    count, axis, is_sorted, scale = ctx.args
    if scale_tensor is not None:
        raise NotImplementedError("the gradient of a segment function with an array scale is "
                                  "not built: pass a Python float scale")
    p = _dispatch(segment_softmax_op, x, ids, offsets, count, axis, is_sorted, where, scale, None)
    ax = _axes([axis], x.ndim)[0]
    n = x.shape[ax]
    seg = ids if offsets is None else \
        torch.searchsorted(offsets, torch.arange(n, device=x.device), right=True) - 1
    inside = (seg >= 0) & (seg < g.shape[ax])
    ge = g.index_select(ax, torch.where(inside, seg, 0).to(torch.int64))
    shape = [1] * x.ndim
    shape[ax] = n
    ge = torch.where(inside.reshape(shape), ge, torch.zeros((), dtype=ge.dtype, device=ge.device))
    d = p * ge
    return (d if scale is None else d * scale), None, None, None, None, None, None, None, None


_autograd(segment_softmax_op, _segment_backward(segment_softmax_vjp_op), _save_segment)
_autograd(segment_log_softmax_op, _segment_backward(segment_log_softmax_vjp_op), _save_segment)
_autograd(segment_logsumexp_op, _segment_logsumexp_backward, _save_segment)


def _ids(v, like):
    """segment ids or offsets as an int64 tensor on `like`'s device (or None)."""
    return None if v is None else _operand(v, like).to(torch.int64)


def _segment_public(name, op):
    def public(x, segment_ids=None, *, offsets=None, num_segments=None, axis=0,
               indices_are_sorted=False, where=None, scale=None, out=None):
        if out is not None:
            return _eager(getattr(_segment, name), x, segment_ids, out=out, offsets=offsets,
                          num_segments=num_segments, axis=axis,
                          indices_are_sorted=indices_are_sorted, where=where, scale=scale)
        _args.int_axis(axis, name)
        fs, ts = _scales(scale, x)
        return _dispatch(op, x, _ids(segment_ids, x), _ids(offsets, x), num_segments, axis,
                         bool(indices_are_sorted), _operand(where, x), fs, ts)

    public.__name__ = name
    return public


segment_softmax = _segment_public("segment_softmax", segment_softmax_op)
segment_log_softmax = _segment_public("segment_log_softmax", segment_log_softmax_op)
segment_logsumexp = _segment_public("segment_logsumexp", segment_logsumexp_op)


def _segment_vjp_public(name, op):
    def public(y, dy, segment_ids=None, *, offsets=None, num_segments=None, axis=0,
               indices_are_sorted=False, where=None, out=None):
        if out is not None:
            return _eager(getattr(_segment, name), y, _operand(dy, y), segment_ids, out=out,
                          offsets=offsets, num_segments=num_segments, axis=axis,
                          indices_are_sorted=indices_are_sorted, where=where)
        _args.int_axis(axis, name)
        return _dispatch(op, y, _operand(dy, y), _ids(segment_ids, y), _ids(offsets, y),
                         num_segments, axis, bool(indices_are_sorted), _operand(where, y))

    public.__name__ = name
    return public


segment_softmax_vjp = _segment_vjp_public("segment_softmax_vjp", segment_softmax_vjp_op)
segment_log_softmax_vjp = _segment_vjp_public("segment_log_softmax_vjp",
                                              segment_log_softmax_vjp_op)
