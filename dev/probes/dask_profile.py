"""Where a Dask array of CuPy chunks spends its time: the wall time of logsumexp and softmax
over a chunked axis (graph built and computed, threaded and synchronous schedulers), and
cProfile's top entries of one synchronous compute (tottime and cumulative).

    python dev/probes/dask_profile.py [rows] [cols] [chunks]
"""

import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import dask  # noqa: E402
import dask.array as da  # noqa: E402

import cusoftmax  # noqa: E402


def timed(fn, rounds=5):
    fn()
    out = []
    for _ in range(rounds):
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        r = fn()
        cupy.cuda.Device().synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
        del r
    return statistics.median(out)


def main(rows=64, cols=2**24, chunks=8):
    x = cupy.random.default_rng(0).standard_normal((rows, cols), dtype=cupy.float32)
    d = da.from_array(x, chunks=(rows, cols // chunks), asarray=False)
    for op in ("logsumexp", "softmax"):
        f = getattr(cusoftmax, op)
        single = timed(lambda: f(x, axis=1))
        for sched in ("threads", "sync"):
            with dask.config.set(scheduler=sched):
                t = timed(lambda: f(d, axis=1).compute())
            print(f"{op} {rows}x{cols} {chunks} chunks {sched}: {t:.2f} ms (single call {single:.2f} ms)",
                  flush=True)
        with dask.config.set(scheduler="sync"):
            g = f(d, axis=1)
            pr = cProfile.Profile()
            pr.enable()
            g.compute()
            cupy.cuda.Device().synchronize()
            pr.disable()
        for key in ("tottime", "cumulative"):
            pstats.Stats(pr, stream=sys.stdout).sort_stats(key).print_stats(22)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
