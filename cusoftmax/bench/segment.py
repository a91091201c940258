"""``python -m cusoftmax.bench --segments``: on a GPU, the segment kernels against PyG's softmax
and JAX's segment_max / segment_sum chain under jax.jit (``gpu_main``); else the segment
functions on the host (NumPy arrays)
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

from .common import Timer, _dtype, _gpu_jax, _gpu_torch, _progress, _versions, format_table
from .report import write_table

SEGMENT_OPS = ("segment_softmax", "segment_log_softmax", "segment_logsumexp")
EDGES = 2**20
HEADS = (1, 8)


def zipf_lengths(rng, total: int, cap: int, draw: int = 1 << 16) -> np.ndarray:
    """Segment lengths summing to `total`, Zipf-distributed (exponent 2), capped at `cap`,
    drawn `draw` at a time."""
    out, got = [], 0
    while got < total:
        d = np.minimum(rng.zipf(2.0, draw), cap)
        out.append(d)
        got += int(d.sum())
    d = np.concatenate(out)
    d = d[:np.searchsorted(np.cumsum(d), total) + 1]
    d[-1] -= int(d.sum()) - total
    return d[d > 0]


def degrees(rng, edges: int) -> np.ndarray:
    """The host table's node in-degrees: capped at 10,000."""
    return zipf_lengths(rng, edges, 10_000, 4096)


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
    """The same chain by jax.ops's segment reductions, jitted, or None without JAX (an empty
    segment's max of -inf taken as 0, as the library does)."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    def f(x, ids):
        m = jax.ops.segment_max(x, ids, count, indices_are_sorted=sorted_ids)
        m = jnp.where(jnp.isfinite(m), m, 0)
        e = jnp.exp(x - m[ids])
        s = jax.ops.segment_sum(e, ids, count, indices_are_sorted=sorted_ids)
        if op == "segment_logsumexp":
            return m + jnp.log(s)
        return e / s[ids] if op == "segment_softmax" else x - m[ids] - jnp.log(s[ids])

    return jax.jit(f)


def main(args) -> int:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return gpu_main(args)
    except (ImportError, RuntimeError):  # no CuPy or no GPU: the host table
        pass
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
                             "jax": None if jax_fn is None else
                             (lambda: jax_fn(xj, ij).block_until_ready())}
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


# The GPU shapes: (name, elements, heads, segment lengths of rng)
GPU_EDGES = 2**24
ZIPF_CAP = 2**17


def gpu_cases(rng, edges: int):
    return (("mean 16", edges, 1, np.full(edges // 16, 16)),
            ("mean 128", edges, 1, np.full(edges // 128, 128)),
            ("Zipf", edges, 1, zipf_lengths(rng, edges, ZIPF_CAP)),
            ("Zipf x 8 heads", edges // 4, 8, zipf_lengths(rng, edges // 4, ZIPF_CAP)))


SEGMENT_VJPS = ("segment_softmax_vjp", "segment_log_softmax_vjp")


def _peers(op, count, torch, jx):
    """name -> setup(x_torch, ids_torch, x_jax, ids_jax, dy_torch, dy_jax) -> a call to time,
    for the peers present. A forward op's call is the peer's forward; a VJP's (SEGMENT_VJPS) is
    the backward pass alone of the peer's forward (its autograd, the forward run in setup):
    PyG's softmax (softmax only), JAX's chain (``_jax_chain``) through ``jax.vjp``. "JAX
    sorted" passes indices_are_sorted."""
    out = {}
    forward = op.removesuffix("_vjp")
    if torch is not None and forward == "segment_softmax":
        try:
            from torch_geometric.utils import softmax as pyg_softmax
        except ImportError:
            pyg_softmax = None
        if pyg_softmax is not None and op == forward:
            out["PyG"] = lambda xt, it, xj, ij, gt, gj: (
                lambda: pyg_softmax(xt, it, num_nodes=count))
        elif pyg_softmax is not None:
            def pyg_backward(xt, it, xj, ij, gt, gj):
                xr = xt.detach().requires_grad_()
                yt = pyg_softmax(xr, it, num_nodes=count)
                return lambda: torch.autograd.grad(yt, xr, gt, retain_graph=True)[0]

            out["PyG"] = pyg_backward
    if jx is not None:
        jax = jx[0]
        for srt in (True, False):
            chain = _jax_chain(forward, count, srt)
            if op == forward:
                setup = (lambda xt, it, xj, ij, gt, gj, g=chain: (lambda: g(xj, ij)))
            else:
                pull = jax.jit(lambda back, dy: back(dy)[0])

                def setup(xt, it, xj, ij, gt, gj, g=chain, pull=pull):
                    back = jax.vjp(lambda v: g(v, ij), xj)[1]
                    return lambda: pull(back, gj)
            out["JAX sorted" if srt else "JAX"] = setup
    return out


def gpu_main(args) -> int:
    """The segment kernels on the GPU, the forward functions and the VJPs: sorted ids, offsets
    and shuffled ids (the sort counted) against the peers; kernel time by events (JAX's by wall
    time: its own stream), fraction of a copy of the bytes moved."""
    import cupy

    import cusoftmax

    torch, jx = _gpu_torch(), _gpu_jax()
    timer = Timer(cupy, args.repeat or 20)
    dtypes = args.dtypes.split(",") if args.dtypes else ["float32", "bfloat16"]
    edges = args.total or GPU_EDGES
    ops = [args.op] if args.op and args.op.startswith("segment_") else [*SEGMENT_OPS, *SEGMENT_VJPS]
    rng = np.random.default_rng(0)
    head = ["op", "dtype", "case", "segments", "ids", "ours us", "of copy", "wall us",
            "PyG us", "JAX us", "PyG/ours", "JAX/ours"]
    rows = []
    for name, n, heads, lengths in gpu_cases(rng, edges):
        count = len(lengths)
        sorted_ids = np.repeat(np.arange(count), lengths)
        shuffled = rng.permutation(sorted_ids)
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        for dt in dtypes:
            dtype = _dtype(cupy, dt)
            shape = (n,) if heads == 1 else (n, heads)
            x = cupy.asarray(rng.standard_normal(shape).astype(np.float32)).astype(dtype)
            dy = cupy.asarray(rng.standard_normal(shape).astype(np.float32)).astype(dtype)
            for op in ops:
                fn = getattr(cusoftmax, op)
                vjp = op in SEGMENT_VJPS
                forward = getattr(cusoftmax, op.removesuffix("_vjp"))
                peers = _peers(op, count, torch, jx)
                for ids_name, ids in (("sorted", sorted_ids), ("offsets", None),
                                      ("shuffled", shuffled)):
                    _progress(f"{op} {dt} {name} {ids_name}")
                    if ids is None:
                        segs, id_bytes = {"offsets": cupy.asarray(offsets)}, 0
                    else:
                        ic = cupy.asarray(ids)
                        segs, id_bytes = {"segment_ids": ic, "num_segments": count}, ic.nbytes
                    if vjp:  # y of the same segments; y and dy read, dx written
                        y = forward(x, **segs)
                        call = lambda: fn(y, dy, **segs)
                        moved = 3 * x.nbytes + id_bytes
                    else:
                        call = lambda: fn(x, **segs)
                        out_bytes = x.nbytes if op != "segment_logsumexp" else \
                            count * heads * dtype.itemsize
                        moved = x.nbytes + out_bytes + id_bytes
                    # a copy of half the bytes moved reads and writes them all
                    floor = timer.copy(cupy.empty(moved // 2, np.uint8))
                    ours = timer.events(call)
                    wall = timer.wall(call, lambda r: cupy.cuda.Device().synchronize())
                    got = {}
                    if ids is not None:
                        xt = it = xj = ij = gt = gj = None
                        if torch is not None:
                            as_torch = torch.bfloat16 if dt == "bfloat16" else torch.float32
                            xt, gt = (torch.as_tensor(a.astype(np.float32), device="cuda")
                                      .to(as_torch) for a in (x, dy))
                            it = torch.as_tensor(ic, device="cuda")
                        if jx is not None:
                            jnp = jx[1]
                            as_jax = jnp.bfloat16 if dt == "bfloat16" else jnp.float32
                            xj, gj = (jnp.asarray(a.astype(np.float32).get()).astype(as_jax)
                                      for a in (x, dy))
                            ij = jnp.asarray(ids.astype(np.int32))
                        for peer, setup in peers.items():
                            if peer.startswith("JAX") and \
                                    (peer == "JAX sorted") != (ids_name == "sorted"):
                                continue
                            run = setup(xt, it, xj, ij, gt, gj)
                            if peer.startswith("JAX"):
                                got["JAX"] = timer.wall(run, lambda r: r.block_until_ready())
                            else:
                                got[peer] = timer.events(run)
                    pyg, jaxt = got.get("PyG"), got.get("JAX")
                    rows.append([op, dt, name, str(count), ids_name, f"{ours:.1f}",
                                 f"{floor / ours:.2f}",
                                 f"{wall:.1f}",
                                 "n/a" if pyg is None else f"{pyg:.1f}",
                                 "n/a" if jaxt is None else f"{jaxt:.1f}",
                                 "n/a" if pyg is None else f"{pyg / ours:.1f}",
                                 "n/a" if jaxt is None else f"{jaxt / ours:.1f}"])
                    _progress(" | ".join(rows[-1]))
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    legend = (f"The segment kernels on {device}: {edges} elements (the heads case a quarter, 8 "
              f"columns), median of {timer.repeat}; 'of copy': a device copy's time of the "
              f"bytes moved (x read, y written, the ids read; a VJP's y and dy read, dx "
              f"written) over ours; wall: back-to-back calls; PyG and JAX (jit; wall time) on "
              f"the same ids, a VJP's peer the backward pass of its autograd; shuffled: ours "
              f"sorts. {_versions()}")
    print(f"\n{legend}\n{format_table(head, rows)}")
    write_table(Path(args.out), "segments-gpu",
                {"kind": "segments", "op": "segment functions", "variant": "gpu",
                 "device": device, "date": time.strftime("%Y-%m-%d"), "legend": legend},
                head, rows)
    return 0
