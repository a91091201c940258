"""``python -m cusoftmax.bench --segments``: the segment functions on the host (NumPy arrays)
against the chain a graph library runs (scatter-max, gather, subtract and exp, scatter-add,
gather, divide; here NumPy's ``ufunc.at``), and against ``jax.ops.segment_max`` /
``segment_sum`` under ``jax.jit`` on JAX's CPU backend where JAX imports. Segment lengths follow
a power law (node in-degrees of 1 to about 10,000), ids sorted or shuffled; ``(edges, heads)``
arrays, softmax over each node's edges for each head. Median milliseconds a call of
``--repeat`` (default 7), the calls in turn."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import numpy as np

from .common import _progress, format_table
from .report import write_table

SEGMENT_OPS = ("segment_softmax", "segment_log_softmax", "segment_logsumexp")
EDGES = 2**20
HEADS = (1, 8)


def degrees(rng, edges: int) -> np.ndarray:
    """Segment lengths summing to `edges`, Zipf-distributed (exponent 2) and capped at 10,000."""
    out, total = [], 0
    while total < edges:
        d = np.minimum(rng.zipf(2.0, 4096), 10_000)
        out.append(d)
        total += int(d.sum())
    d = np.concatenate(out)
    d = d[:np.searchsorted(np.cumsum(d), edges) + 1]
    d[-1] -= int(d.sum()) - edges
    return d[d > 0]


def _numpy_chain(op, x, ids, count):
    """The graph libraries' chain in NumPy: scatter-max, gather, exp, scatter-add, gather,
    divide (log: subtract the log of the sum)."""
    m = np.full((count,) + x.shape[1:], -np.inf, x.dtype)
    np.maximum.at(m, ids, x)
    e = np.exp(x - m[ids])
    s = np.zeros((count,) + x.shape[1:], x.dtype)
    np.add.at(s, ids, e)
    if op == "segment_logsumexp":
        return m + np.log(s)
    return e / s[ids] if op == "segment_softmax" else x - m[ids] - np.log(s[ids])


def _jax_chain(op, count, sorted_ids):
    """The same chain by jax.ops's segment reductions under jax.jit, or None without JAX."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def f(x, ids):
        m = jax.ops.segment_max(x, ids, count, indices_are_sorted=sorted_ids)
        e = jnp.exp(x - m[ids])
        s = jax.ops.segment_sum(e, ids, count, indices_are_sorted=sorted_ids)
        if op == "segment_logsumexp":
            return m + jnp.log(s)
        return e / s[ids] if op == "segment_softmax" else x - m[ids] - jnp.log(s[ids])

    jitted = jax.jit(f)
    return lambda x, ids: jitted(x, ids).block_until_ready()


def main(args) -> int:
    import cusoftmax

    repeat = args.repeat or 7
    dtypes = args.dtypes.split(",") if args.dtypes else ["float32", "float64"]
    edges = args.total or EDGES
    head = ["op", "dtype", "edges x heads", "segments", "ids", "ours ms", "NumPy chain ms",
            "JAX jit ms", "NumPy/ours", "JAX/ours"]
    rows = []
    rng = np.random.default_rng(0)
    lengths = degrees(rng, edges)
    count = len(lengths)
    sorted_ids = np.repeat(np.arange(count), lengths)
    shuffled = rng.permutation(sorted_ids)
    for op in SEGMENT_OPS:
        fn = getattr(cusoftmax, op)
        for dt in dtypes:
            for heads in HEADS:
                shape = (edges,) if heads == 1 else (edges, heads)
                x = rng.standard_normal(shape).astype(dt)
                for name, ids in (("sorted", sorted_ids), ("shuffled", shuffled)):
                    _progress(f"{op} {dt} {shape} {name}")
                    jax_fn = _jax_chain(op, count, name == "sorted")
                    if jax_fn is not None:
                        import jax.numpy as jnp

                        xj, ij = jnp.asarray(x), jnp.asarray(ids)
                    calls = {"ours": lambda: fn(x, ids, num_segments=count),
                             "numpy": lambda: _numpy_chain(op, x, ids, count),
                             "jax": None if jax_fn is None else (lambda: jax_fn(xj, ij))}
                    times = {k: [] for k in calls}
                    for _ in range(repeat):
                        for k, call in calls.items():
                            if call is None:
                                continue
                            call()
                            t0 = time.perf_counter()
                            call()
                            times[k].append((time.perf_counter() - t0) * 1e3)
                    med = {k: statistics.median(v) if v else None for k, v in times.items()}
                    rows.append([op, dt, f"{edges}x{heads}", str(count), name,
                                 f"{med['ours']:.2f}", f"{med['numpy']:.2f}",
                                 "n/a" if med["jax"] is None else f"{med['jax']:.2f}",
                                 f"{med['numpy'] / med['ours']:.2f}",
                                 "n/a" if med["jax"] is None else f"{med['jax'] / med['ours']:.2f}"])
    legend = (f"The segment functions on the host (NumPy {np.__version__}, {os.cpu_count()} "
              f"cores) against the graph libraries' chain in NumPy and jax.ops under jax.jit "
              f"(CPU); Zipf segment lengths; median milliseconds a call of {repeat}; peer/ours "
              f"> 1: ours faster.")
    print(f"\n{legend}\n{format_table(head, rows)}")
    write_table(Path(args.out), "segments-host",
                {"kind": "segments", "op": "segment functions", "variant": "host",
                 "device": "host CPU", "date": time.strftime("%Y-%m-%d"), "legend": legend},
                head, rows)
    return 0
