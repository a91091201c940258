"""``python -m cusoftmax.bench --dask``: the family over a Dask array of CuPy chunks cut along the
reduced axis, against one cusoftmax call on the same data as one CuPy array.

Each case is a (64, n) float32 array of ``--dask-gib`` GiB cut into `--dask-chunks` chunks along
axis 1. Times are wall clock around a call and the wait for its result (median of the repeats): for
the Dask array, the graph's construction, its scheduling and every task (``persist`` of the result,
so its chunks are not gathered into one array); for the CuPy array, the call and a device
synchronisation. "single/dask" is the single call's time over the Dask time (1: no cost for the
chunking). ``--dask-cluster`` runs the Dask side on a ``dask_cuda.LocalCUDACluster`` of one worker,
its chunks made on the worker. "state B" is what a chunk sends to the tree's combine: one state (m
float32, c and s float64) a row.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time

import numpy as np

from .common import _progress, format_table

ROWS = 64  # rows of the array; --dask-gib 4 makes rows of 2**24: 512 MiB chunks at 8, 256 at 16
OPS = ("softmax", "logsumexp", "log_softmax")


def _timed(fn, wait, repeat):
    wait(fn())  # warm-up: kernels compiled, memory pooled
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        wait(fn())
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(args):
    try:
        import cupy
        import dask

        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        print(f"cusoftmax.bench --dask needs Dask, CuPy and a CUDA GPU: {e}", file=sys.stderr)
        return 2
    import cusoftmax

    repeat = args.repeat or 10
    n = args.dask_gib * 2**30 // (4 * ROWS)
    x = cupy.random.default_rng(0).standard_normal((ROWS, n), dtype=cupy.float32) * 3
    sync = lambda r: cupy.cuda.Device().synchronize()  # noqa: E731
    with contextlib.ExitStack() as stack:
        client, wait = _scheduler(stack, args.dask_cluster)
        lines = [_case(op, chunks, x, client, wait, sync, repeat)
                 for chunks in map(int, args.dask_chunks.split(",")) for op in OPS]
    kind = "LocalCUDACluster of one worker" if args.dask_cluster else "threaded scheduler"
    print(f"\n{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {time.strftime('%Y-%m-%d')}, "
          f"Dask {dask.__version__}, {kind}; float32, axis 1 cut into chunks; median of {repeat}")
    print(format_table(["op", "shape", "chunks", "MiB a chunk", "state B", "tasks", "single ms",
                        "dask ms", "dask GB/s", "single/dask"], lines))
    return 0


def _scheduler(stack, cluster):
    """(the cluster's client or None, how to wait for a persisted result) on the threaded
    scheduler or a LocalCUDACluster of one worker, entered on `stack`."""
    import dask

    if not cluster:
        stack.enter_context(dask.config.set(scheduler="threads"))
        return None, lambda r: None  # persist returns once every task has run
    from dask_cuda import LocalCUDACluster
    from distributed import Client, wait

    client = stack.enter_context(Client(stack.enter_context(LocalCUDACluster(n_workers=1))))

    def done(r):  # every task returned, then the worker's queued kernels finished
        wait(r)
        client.run(_synchronize)

    return client, done


def _synchronize():
    import cupy

    cupy.cuda.Device().synchronize()


def _chunk(rows, n, block_info=None):
    import cupy

    seed = block_info[None]["chunk-location"][1]
    return cupy.random.default_rng(seed).standard_normal((rows, n), dtype=cupy.float32) * 3


def _case(op, chunks, x, client, wait, sync, repeat):
    import cupy
    import dask.array as da

    import cusoftmax

    rows, n = x.shape
    if client is None:
        xd = da.from_array(x, chunks=(rows, n // chunks), asarray=False)
    else:  # made on the worker, kept there
        xd = da.map_blocks(_chunk, rows, n // chunks, chunks=((rows,), (n // chunks,) * chunks),
                           dtype=np.float32, meta=cupy.empty((0, 0), cupy.float32))
        xd = client.persist(xd)
        wait(xd)
    fn = getattr(cusoftmax, op)
    single = _timed(lambda: fn(x, axis=1), sync, repeat)
    tasks = len(fn(xd, axis=1).__dask_graph__())
    ms = _timed(lambda: fn(xd, axis=1).persist(), lambda r: (wait(r), sync(r)), repeat)
    nbytes = x.nbytes * (1 if op == "logsumexp" else 2)  # least traffic: read (and write)
    line = [op, f"{rows}x{n}", str(chunks), f"{x.nbytes // chunks >> 20}", str(rows * 20), str(tasks),
            f"{single:.2f}", f"{ms:.2f}", f"{nbytes / ms / 1e6:.0f}", f"{single / ms:.2f}"]
    _progress(" ".join(line))
    return line
