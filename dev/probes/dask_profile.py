"""Where a Dask array of CuPy chunks spends its time, for softmax and logsumexp over a chunked
axis (graph built and persisted on the threaded scheduler):

- "wall": the call, persist and a device synchronisation (median of 5);
- "host while busy": the same with the GPU held by a spin kernel of about 1 s launched just
  before, so the call's time is host work only; a figure near 1 s means the path synchronises;
- "in tasks": the sum of the tasks' own times (``dask.diagnostics.Profiler``), the rest of the
  host time being the graph's construction and the scheduler's;
- cProfile's top entries of one synchronous compute (its per-call cost inflates small functions).

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


_SPIN = r"""extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}"""


def host_while_busy(fn):
    """(ms until fn returned, ms until the GPU finished) with the GPU held about 1 s first."""
    spin = cupy.RawKernel(_SPIN, "spin")
    cupy.cuda.Device().synchronize()
    spin((1,), (1,), (cupy.int64(2 * 10**9),))
    t0 = time.perf_counter()
    r = fn()
    t1 = time.perf_counter()
    cupy.cuda.Device().synchronize()
    t2 = time.perf_counter()
    del r
    return (t1 - t0) * 1e3, (t2 - t0) * 1e3


def in_tasks(fn):
    """(ms in the tasks' own code, number of tasks) of one persist."""
    from dask.diagnostics import Profiler

    with Profiler() as prof:
        r = fn()
    cupy.cuda.Device().synchronize()
    del r
    return sum(t.end_time - t.start_time for t in prof.results) * 1e3, len(prof.results)


def task_host_times(x, chunks, rounds=50):
    """Host microseconds of each task function on one chunk (launches not awaited)."""
    from cusoftmax import _dask

    part = x[:, : x.shape[1] // chunks]
    st = _dask._state_chunk(part, keys=(), axes=(1,))
    total = _dask._normalizing(st, op="softmax", axes=(1,))
    pieces = {
        "state of a chunk": lambda: _dask._state_chunk(part, keys=(), axes=(1,)),
        "merge of two states": lambda: _dask._merged([st, st], (1,), True),
        "(m, k) of merged states": lambda: _dask._normalizing(st, op="softmax", axes=(1,)),
        "softmax of a chunk from its (m, k)": lambda: _dask._normalize_chunk(
            part, total, None, None, op="softmax", axes=(1,)),
    }
    for name, fn in pieces.items():
        fn()
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(rounds):
            fn()
        t = (time.perf_counter() - t0) / rounds * 1e6
        cupy.cuda.Device().synchronize()
        print(f"host {name}: {t:.0f} us", flush=True)


def main(rows=64, cols=2**24, chunks=8):
    x = cupy.random.default_rng(0).standard_normal((rows, cols), dtype=cupy.float32)
    d = da.from_array(x, chunks=(rows, cols // chunks), asarray=False)
    task_host_times(x, chunks)
    for op in ("logsumexp", "softmax"):
        f = getattr(cusoftmax, op)
        single = timed(lambda: f(x, axis=1))
        with dask.config.set(scheduler="threads"):
            t = timed(lambda: f(d, axis=1).persist())
            host, done = host_while_busy(lambda: f(d, axis=1).persist())
            busy, tasks = in_tasks(lambda: f(d, axis=1).persist())
        print(f"{op} {rows}x{cols} {chunks} chunks: wall {t:.2f} ms (single call {single:.2f}); "
              f"host while busy {host:.2f} ms (GPU done at {done:.0f}); in tasks {busy:.2f} ms "
              f"over {tasks} tasks", flush=True)
        with dask.config.set(scheduler="sync"):
            g = f(d, axis=1)
            pr = cProfile.Profile()
            pr.enable()
            g.compute()
            cupy.cuda.Device().synchronize()
            pr.disable()
        pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
