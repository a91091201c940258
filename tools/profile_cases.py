"""One call of cusoftmax per case, for a profiler: `ncu ... python3 tools/profile_cases.py`.

Cases are 'dtype:rows:cols:axis' arguments (default: one per kernel family at 2**26 elements);
'topk dtype:rows:cols:k ...' runs softmax_topk of the last axis instead (as run s32-3);
'op OP dtype:rows:cols:axis ...' runs the function OP (logsumexp, log_softmax, ...) once a
case."""

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


def host_breakdown():
    """Host microseconds of the pieces of a fast-path call on a 4 x 256 float32 array."""
    import time

    from cusoftmax import _api

    x = cupy.asarray(np.random.default_rng(0).standard_normal((4, 256), dtype=np.float32))
    cusoftmax.softmax(x)
    run = _api._fast[_api._fast_key(x, -1)]
    y = cupy.empty_like(x)
    pieces = {
        "softmax": lambda: cusoftmax.softmax(x),
        "fast entry (launch)": lambda: run(x, y),
        "key": lambda: _api._fast_key(x, -1),
        "cupy.empty": lambda: cupy.empty((4, 256), np.float32),
        "getDevice": cupy.cuda.runtime.getDevice,
    }
    for name, fn in pieces.items():
        for _ in range(500):
            fn()
        t0 = time.perf_counter()
        for _ in range(5000):
            fn()
        print(f"host {name}: {(time.perf_counter() - t0) / 5000 * 1e6:.2f} us", flush=True)
        cupy.cuda.Device().synchronize()


if __name__ == "__main__":
    if sys.argv[1:] == ["host"]:
        host_breakdown()
    elif sys.argv[1:2] == ["topk"]:
        main(sys.argv[2:], topk=True)
    elif sys.argv[1:2] == ["op"]:
        main(sys.argv[3:] or DEFAULT, op=sys.argv[2])
    else:
        main(sys.argv[1:] or DEFAULT)
