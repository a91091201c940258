"""One call of cusoftmax per case, for a profiler: `ncu ... python3 tools/profile_cases.py`.

Cases are 'dtype:rows:cols:axis' arguments (default: one per kernel family at 2**26 elements);
'topk dtype:rows:cols:k ...' runs softmax_topk of the last axis instead (as run s32-3);
'op OP dtype:rows:cols:axis ...' runs the function OP (logsumexp, log_softmax, ...) once a
case; 'host [OP ...]' times the host pieces of a fast-path call of each OP (default softmax)."""

import sys

import cupy
import numpy as np

import cusoftmax
from cusoftmax.bench import _dtype

DEFAULT = ["bfloat16:2097152:32:-1", "bfloat16:262144:256:-1", "float32:64:1048576:-1",
           "bfloat16:128:524288:-1", "float32:4096:16384:0", "bfloat16:16384:4096:0"]


def main(cases, topk=False, op="softmax"):
    for case in cases:
        name, rows, cols, last = case.split(":")
        dtype = _dtype(cupy, name)
        x = (cupy.random.default_rng(0).standard_normal((int(rows), int(cols)), dtype=cupy.float32) * 3).astype(dtype)
        if topk:
            cusoftmax.softmax_topk(x, int(last))
        else:
            getattr(cusoftmax, op)(x, axis=int(last))
        cupy.cuda.Device().synchronize()
        print("ran", case, flush=True)


def host_breakdown(op="softmax"):
    """Host microseconds of the pieces of a fast-path call of `op` (softmax, or a backward pass:
    softmax_vjp, log_softmax_vjp) on 4 x 256 float32 arrays, and torch's same op where torch is
    installed."""
    import time

    from cusoftmax import _engine

    x = cupy.asarray(np.random.default_rng(0).standard_normal((4, 256), dtype=np.float32))
    call = getattr(cusoftmax, op)
    stream = cupy.cuda.get_current_stream
    pieces = {"cupy.ndarray": lambda: cupy.ndarray((4, 256), np.float32),
              "get_current_stream().ptr": lambda: stream().ptr,
              "getDevice": cupy.cuda.runtime.getDevice}
    if op == "softmax":
        call(x)
        run = _engine._fast[_engine._fast_key(x, -1)][1]
        y = cupy.empty_like(x)
        pieces.update({op: lambda: call(x), "launch closure": lambda: run(x, y),
                       "key": lambda: _engine._fast_key(x, -1)})
    else:
        y, dy = getattr(cusoftmax, op[:-4])(x), x * 0.5  # the forward's output, a gradient
        call(y, dy)
        key = _engine._vjp_key(y, dy, -1, op)
        run, dx = _engine._fast[key][1], cupy.empty_like(y)
        pieces.update({op: lambda: call(y, dy), "vjp_fast": lambda: _engine.vjp_fast(y, dy, -1, op),
                       "launch closure": lambda: run(y, dy, dx),
                       "key": lambda: _engine._vjp_key(y, dy, -1, op)})
    try:
        import torch

        if op == "softmax":
            tx = torch.from_dlpack(x)
            pieces["torch"] = lambda: torch.softmax(tx, dim=-1)
        else:
            ty, tg = torch.from_dlpack(y), torch.from_dlpack(dy)
            f_t = getattr(torch, "_" + op[:-4] + "_backward_data")
            pieces["torch"] = lambda: f_t(tg, ty, 1, ty.dtype)
        pieces["torch.empty"] = lambda: torch.empty((4, 256), device="cuda")
    except ImportError:
        pass
    for name, fn in pieces.items():
        best = float("inf")
        for _ in range(5):
            for _ in range(500):
                fn()
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            best = min(best, (time.perf_counter() - t0) / 2000 * 1e6)
            cupy.cuda.Device().synchronize()
        print(f"host {op} {name}: {best:.2f} us", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["host"]:
        for name in sys.argv[2:] or ["softmax"]:
            host_breakdown(name)
    elif sys.argv[1:2] == ["topk"]:
        main(sys.argv[2:], topk=True)
    elif sys.argv[1:2] == ["op"]:
        main(sys.argv[3:] or DEFAULT, op=sys.argv[2])
    else:
        main(sys.argv[1:] or DEFAULT)
