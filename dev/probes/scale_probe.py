"""Kernel time of the same plan with the Plain and the Scaled load (scale=), taken in turn, L2
flushed before each launch, CUDA events around the launch alone (no host path in the interval):
whether scale= costs the kernels anything. Prints one line a case: Plain us, Scaled us, ratio.

    python dev/probes/scale_probe.py [op] [dtype:rows:cols[:axis]] ...
"""

import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402

from cusoftmax import _engine, _kernels  # noqa: E402
from cusoftmax.bench import _dtype  # noqa: E402

CASES = ["float32:2097152:32", "float32:262144:256", "float32:4096:16384", "bfloat16:2097152:32",
         "bfloat16:32768:2048", "bfloat16:4096:16384", "bfloat16:512:131072",
         "bfloat16:16384:4096:0", "float32:16384:4096:0"]


def runner(x, y, axis, op, load):
    axes = (axis % x.ndim,)
    return _engine._runner(x, y, axes, None, op, load)


def main(argv):
    op = argv[0] if argv and ":" not in argv[0] else "softmax"
    cases = [a for a in argv if ":" in a] or CASES
    flush = cupy.empty(cupy.cuda.Device().attributes["L2CacheSize"], dtype=cupy.float32)
    word = _kernels.load_word("Scaled", 0.125)
    for case in cases:
        name, rows, cols, *axis = case.split(":")
        axis = int(axis[0]) if axis else -1
        x = (cupy.random.default_rng(1).standard_normal((int(rows), int(cols)), dtype=cupy.float32) * 3).astype(_dtype(cupy, name))
        y = cupy.empty_like(x)
        runs = {"Plain": (runner(x, y, axis, op, "Plain"), None), "Scaled": (runner(x, y, axis, op, "Scaled"), word)}
        if any(r is None for r, _ in runs.values()):
            print(f"{case}: no kernel takes this layout")
            continue
        times = {k: [] for k in runs}
        for i in range(60):
            for k, (run, w) in runs.items():
                flush.fill(0)
                a, b = cupy.cuda.Event(), cupy.cuda.Event()
                a.record()
                run(x, y, load=w)
                b.record()
                b.synchronize()
                if i >= 5:
                    times[k].append(cupy.cuda.get_elapsed_time(a, b) * 1e3)
        p, s = (statistics.median(times[k]) for k in ("Plain", "Scaled"))
        print(f"{op} {case}: Plain {p:.1f} us, Scaled {s:.1f} us, Scaled/Plain {s / p:.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
