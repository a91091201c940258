"""``python -m cusoftmax.bench --torch-op``: the family as torch operators against torch's own,
on a CUDA device:

- a training step's loss, forward and backward: ``nll_loss(cusoftmax.log_softmax(x), t)``
  against ``cross_entropy(x, t)`` (rows), and ``-(w * log_softmax(x, 0)).sum()`` on axis 0;
  eager and with the loss under ``torch.compile`` (fullgraph; the backward AOT autograd's); GPU time by events (the stream held until the step is
  enqueued) and wall time a step of back-to-back steps;
- host time a call on 4 x 256 float32: ``cusoftmax.softmax`` (the operator's function, no
  dispatcher), ``torch.ops.cusoftmax.softmax`` (through the dispatcher), and torch.softmax;
  the same on a tensor that requires grad (ours: ``_torch._Recorded``).
"""

from __future__ import annotations

import time
from pathlib import Path

from .common import Timer, _gpu_torch, _progress, _versions, format_table
from .report import write_table

ROWS = ((4096, 1024), (1024, 16384), (256, 65536), (64, 262144))
AXIS0 = ((65536, 256),)


def _steps(torch, F, ours: bool, axis0: bool):
    import cusoftmax

    def loss(x, t, w):
        if axis0:
            y = cusoftmax.log_softmax(x, 0) if ours else torch.log_softmax(x, 0)
            return -(w * y).sum()
        return F.nll_loss(cusoftmax.log_softmax(x, -1), t) if ours else F.cross_entropy(x, t)

    def step(x, t, w, loss=loss):
        (g,) = torch.autograd.grad(loss(x, t, w), x)
        return g

    return step, loss


def main(args) -> int:
    torch = _gpu_torch()
    if torch is None:
        print("--torch-op needs torch with a CUDA device")
        return 1
    import cupy
    import torch.nn.functional as F

    import cusoftmax

    timer = Timer(cupy, args.repeat or 20)
    dtypes = args.dtypes.split(",") if args.dtypes else ["float32", "bfloat16"]
    head = ["case", "dtype", "shape", "ours us", "torch us", "torch/ours", "ours compiled us",
            "torch compiled us", "compiled torch/ours", "ours wall us", "torch wall us"]
    rows = []
    for dt in dtypes:
        dtype = getattr(torch, dt)
        for axis0, shapes in ((False, ROWS), (True, AXIS0)):
            for shape in shapes:
                _progress(f"torch-op {dt} {shape} axis0={axis0}")
                x = torch.randn(shape, device="cuda", dtype=dtype).requires_grad_()
                t = torch.randint(0, shape[1], (shape[0],), device="cuda")
                w = torch.rand(shape, device="cuda", dtype=dtype)
                got = {}
                for name, ours in (("ours", True), ("torch", False)):
                    step, loss = _steps(torch, F, ours, axis0)
                    got[name] = timer.events(lambda s=step: s(x, t, w))
                    got[name + " wall"] = timer.wall(lambda s=step: s(x, t, w),
                                                     lambda r: torch.cuda.synchronize())
                    # each case's loss is the same code to dynamo: without a reset, the cases
                    # past its recompile limit fail under fullgraph
                    torch._dynamo.reset()
                    compiled = torch.compile(loss, fullgraph=True)  # the backward: AOT autograd's
                    got[name + " c"] = timer.events(lambda c=compiled, s=step: s(x, t, w, c))
                rows.append(["axis 0 loss" if axis0 else "nll(log_softmax)", dt,
                             "x".join(map(str, shape)), f"{got['ours']:.1f}", f"{got['torch']:.1f}",
                             f"{got['torch'] / got['ours']:.2f}", f"{got['ours c']:.1f}",
                             f"{got['torch c']:.1f}", f"{got['torch c'] / got['ours c']:.2f}",
                             f"{got['ours wall']:.1f}", f"{got['torch wall']:.1f}"])
    small = torch.randn(4, 256, device="cuda")
    graded = small.clone().requires_grad_()
    host = {}
    for name, fn in (("cusoftmax.softmax", lambda: cusoftmax.softmax(small)),
                     ("torch.ops.cusoftmax.softmax",
                      lambda: torch.ops.cusoftmax.softmax(small, [-1], None, None, None)),
                     ("torch.softmax", lambda: torch.softmax(small, -1)),
                     ("cusoftmax.softmax, requires grad", lambda: cusoftmax.softmax(graded)),
                     ("torch.softmax, requires grad", lambda: torch.softmax(graded, -1))):
        host[name] = timer.wall(fn, lambda r: torch.cuda.synchronize(), batch=200)
    device = torch.cuda.get_device_name()
    legend = (f"torch operators on {device}: a loss's forward and backward, GPU time by events "
              f"and wall time a step (median of {timer.repeat}); torch/ours > 1: ours faster. "
              f"Host time a call, 4 x 256 float32: "
              + ", ".join(f"{k} {v:.1f} us" for k, v in host.items()) + f". {_versions()}")
    print(f"\n{legend}\n{format_table(head, rows)}")
    write_table(Path(args.out), "torch-op",
                {"kind": "torch-op", "op": "log_softmax", "variant": "torch-op", "device": device,
                 "date": time.strftime("%Y-%m-%d"), "legend": legend}, head, rows)
    return 0
