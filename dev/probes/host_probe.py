"""Host microseconds a call of every op on 4 x 256 float32 CuPy arrays (launches not awaited, the
best of 7 rounds of 2,000 calls, the implementations' rounds in turn), beside torch's same op
where it has one, and softmax's own (the targets: the four row ops at most torch's, logsumexp
and softmax_topk at most 1.2x softmax's).

    python dev/probes/host_probe.py
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402

import cusoftmax  # noqa: E402
from cusoftmax.bench.common import host_rounds  # noqa: E402


def main():
    x = cupy.asarray(np.random.default_rng(0).standard_normal((4, 256), dtype=np.float32))
    y, ly, dy = cusoftmax.softmax(x), cusoftmax.log_softmax(x), x * 0.5
    fns = {"softmax": lambda: cusoftmax.softmax(x),
           "log_softmax": lambda: cusoftmax.log_softmax(x),
           "softmax_vjp": lambda: cusoftmax.softmax_vjp(y, dy),
           "log_softmax_vjp": lambda: cusoftmax.log_softmax_vjp(ly, dy),
           "logsumexp": lambda: cusoftmax.logsumexp(x, axis=-1),
           "softmax_topk": lambda: cusoftmax.softmax_topk(x, 8)}
    try:
        import torch

        t, ty, tly, tg = (torch.from_dlpack(a) for a in (x, y, ly, dy))
        fns |= {"torch.softmax": lambda: torch.softmax(t, -1),
                "torch.log_softmax": lambda: torch.log_softmax(t, -1),
                "torch softmax_vjp": lambda: torch._softmax_backward_data(tg, ty, 1, ty.dtype),
                "torch log_softmax_vjp": lambda: torch._log_softmax_backward_data(tg, tly, 1, tly.dtype),
                "torch.logsumexp": lambda: torch.logsumexp(t, -1),
                "torch topk(softmax)": lambda: torch.topk(torch.softmax(t, -1), 8)}
    except ImportError:
        pass
    got = host_rounds(cupy, fns)
    for name, us in got.items():
        print(f"{name}: {us:.1f} us", flush=True)


if __name__ == "__main__":
    main()
