"""``python -m cusoftmax.bench --host``: the host path (NumPy arrays) against
scipy.special.softmax, by wall clock, the two taken in turn, each timed call after an untimed one
of its own (median of the repeats); no GPU needed."""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from .bench import _dtype, _progress, format_table

DTYPES = ["float64", "float32", "float16", "bfloat16"]
SHAPES = [((4096, 1000), -1), ((1000, 4096), 0), ((64, 100000), -1)]  # (shape, axis)


def cases(args):
    dtypes = args.dtypes.split(",") if args.dtypes else DTYPES
    for dt in dtypes:
        for shape, axis in SHAPES:
            yield dt, shape, axis


def main(args):
    """The host path against scipy.special.softmax on SHAPES: a table of median
    milliseconds per call and SciPy's time over ours (> 1: ours faster)."""
    try:
        import scipy.special
    except ImportError as e:
        print(f"cusoftmax.bench --host needs SciPy: {e}", file=sys.stderr)
        return 2
    import cusoftmax

    from ._accuracy import violations

    repeat = args.repeat or 7
    head = ["dtype", "shape", "axis", "ours ms", "scipy ms", "scipy/ours"]
    lines = []
    for dt_name, shape, axis in cases(args):
        _progress(f"{dt_name} {shape[0]}x{shape[1]} axis {axis}")
        rng = np.random.default_rng(0)
        x = (rng.standard_normal(shape, dtype=np.float32) * 3).astype(_dtype(None, dt_name))
        ref = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True).astype(np.float64))
        ref /= ref.sum(axis=axis, keepdims=True)
        bad = violations(cusoftmax.softmax(x, axis=axis), ref, dt_name)
        if bad:
            lines.append([dt_name, f"{shape[0]}x{shape[1]}", str(axis), "WRONG", "", bad])
            continue
        fns = {"ours": lambda: cusoftmax.softmax(x, axis=axis),
               "scipy": lambda: scipy.special.softmax(x, axis=axis)}
        times = {k: [] for k in fns}
        for _ in range(repeat):
            for k, fn in fns.items():  # in turn: a drift of the host's speed reaches both
                fn()  # the memory the other one freed is reused as in a loop of this call
                t0 = time.perf_counter()
                fn()
                times[k].append((time.perf_counter() - t0) * 1e3)
        ours, peer = (statistics.median(times[k]) for k in fns)
        lines.append([dt_name, f"{shape[0]}x{shape[1]}", str(axis), f"{ours:.2f}", f"{peer:.2f}",
                      f"{peer / ours:.2f}"])
    print(f"\nhost path against scipy.special.softmax {scipy.__version__}, NumPy "
          f"{np.__version__}, {time.strftime('%Y-%m-%d')}; median of {repeat} calls each")
    print(format_table(head, lines))
    return 0
