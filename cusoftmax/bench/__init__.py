"""Benchmark: ``python -m cusoftmax.bench --help``.

GB/s counts the least traffic any softmax needs, one read and one write of the tensor, over the
kernel time (CUDA events around one call, L2 flushed before it, the stream held until the call
has enqueued its work, median of the repeats). The
ceiling is a device-to-device copy of the same bytes, timed the same way in the same run; each
result is reported as a fraction of it, and as a ratio to every peer that is installed
(cupyx.scipy.special.softmax always; torch.softmax, jax.nn.softmax and a one-program-per-row
Triton softmax when importable). JAX runs on its own streams, so it is timed by wall clock
around a batch of calls ending in ``block_until_ready`` (no flush inside the batch). Every result
is checked against a float64 reference before it is timed: a wrong cusoftmax result is not
timed; a peer outside cusoftmax's accuracy bound is timed and marked '*'.

``--op log_softmax`` times log_softmax the same way, against the peers' log_softmax and our own
softmax in the same run (column "vs softmax": our softmax's time over our log_softmax's).
``--op logsumexp`` times logsumexp, GB/s counting one read of the tensor (its fraction of copy:
bytes read over time against the copy's GB/s). ``--op softmax_vjp`` and ``--op log_softmax_vjp``
time the backward passes on y (our forward's output) and a random dy, GB/s counting y and dy read
and dx written, against torch's ``_softmax_backward_data`` (``_log_softmax_backward_data``) and
``jax.vjp`` of the forward under ``jit`` (which runs the forward too, from x). Every op but
``--where`` also reports the host time of a call on 4 x 256 float32 (ours and torch's same op).

``--scale S`` times softmax, log_softmax or logsumexp with ``scale=S`` against the same call
without it in the same run (column "vs unscaled": the unscaled call's time over the scaled one's),
in place of the peers; results are checked against the reference of ``S * x``.

``--where full`` (a random bool mask of x's shape) or ``--where padding`` (one of the reduced
axis's length, broadcast along the slices) times softmax or log_softmax with ``where=`` against
the same call without it and ``jax.nn``'s with ``where=`` under ``jit``; GB/s counts the mask's
bytes too (read once), and results are checked against the masked reference.

``--op softmax_topk`` times softmax_topk on its own cases against the peers' two-op versions
(cusoftmax/bench/topk.py).

``--host`` times the host path (NumPy arrays) of ``--op`` against SciPy's function (the NumPy
formula of a VJP), by wall clock, honouring ``--dtypes``, ``--widths``, ``--total``, ``--where``,
``--scale``, ``--no-axis0`` and ``--out`` (cusoftmax/bench/host.py); it needs no GPU. ``--segments``
times the segment functions on the host against NumPy's and JAX's scatter chains
(cusoftmax/bench/segment.py). ``--dask``
times the family over Dask arrays of CuPy chunks against one call on the same data
(cusoftmax/bench/dask_chunks.py). ``--report DIR ...`` writes BENCHMARKS.md from the tables of
result folders (cusoftmax/bench/report.py).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from .common import (Timer, _dtype, _gpu_jax, _gpu_torch, _progress, _versions, format_table,
                     host_rounds)
from .report import write_table
from .segment import SEGMENT_OPS, SEGMENT_VJPS

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

DEFAULT_WIDTHS = [2**k for k in range(5, 23)]  # 32 .. 4,194,304
DEFAULT_DTYPES = ["float32", "bfloat16", "float16"]
AXIS0_SHAPES = [(4096, 16384), (16384, 4096)]  # softmax over axis 0, C-contiguous
LONG_ROWS = [2**24, 2**27]  # float32, one row each
# Operations named alike in cusoftmax, cupyx.scipy.special, torch and jax.nn, and the passes
# over the tensor each needs at least (GB/s counts them): a read and a write, or a read alone.
BENCH_OPS = ("softmax", "log_softmax", "logsumexp", "softmax_vjp", "log_softmax_vjp", "softmax_topk")
PASSES = {"softmax": 2, "log_softmax": 2, "logsumexp": 1, "softmax_vjp": 3, "log_softmax_vjp": 3}
VJPS = {"softmax_vjp": "softmax", "log_softmax_vjp": "log_softmax"}  # backward pass: its forward


def _int_expr(text: str) -> int:
    """An element count such as 67108864 or 2**26."""
    base, _, exp = text.partition("**")
    return int(base) ** int(exp) if exp else int(base)


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m cusoftmax.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtypes", default=None,
                   help=f"comma-separated dtypes (default: {','.join(DEFAULT_DTYPES)}; "
                        "with --host: float64,float32,float16,bfloat16)")
    p.add_argument("--widths", default=None,
                   help="comma-separated row widths (default: powers of two 32 .. 4194304)")
    p.add_argument("--total", type=_int_expr, default=None,
                   help="elements per tensor, e.g. 2**26 (default: 2**26; with --host: 2**22)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timed calls per case (default: 30; with --host: 7)")
    p.add_argument("--op", default="softmax", choices=BENCH_OPS + SEGMENT_OPS + SEGMENT_VJPS,
                   help="the operation timed (default: %(default)s; the segment functions with "
                        "--segments, which else times them all)")
    p.add_argument("--scale", type=float, default=None,
                   help="time scale=SCALE against the same call without it (softmax, log_softmax, "
                        "logsumexp)")
    p.add_argument("--where", choices=("full", "padding"), default=None,
                   help="time where= masks (softmax, log_softmax): a mask of x's shape, or one "
                        "along the reduced axis broadcast over the slices")
    p.add_argument("--host", action="store_true",
                   help="time the host path of --op against SciPy (no GPU needed)")
    p.add_argument("--segments", action="store_true",
                   help="the segment functions on the host against NumPy's and JAX's scatter "
                        "chains (no GPU needed; --dtypes, --total edges, --repeat, --out)")
    p.add_argument("--torch-op", action="store_true",
                   help="the family as torch operators against torch's own: a loss's forward "
                        "and backward, eager and compiled, and the host time of a call (needs "
                        "torch with CUDA; --dtypes, --repeat, --out)")
    p.add_argument("--jax-jit", action="store_true",
                   help="the family inside jax.jit (the kernels' custom call) against jax.nn's "
                        "jitted ops: device and wall time a call (needs JAX with CUDA; --dtypes, "
                        "--widths of its shapes, --out)")
    p.add_argument("--dask", action="store_true",
                   help="the family over Dask arrays of CuPy chunks against one call (needs Dask)")
    p.add_argument("--dask-chunks", default="8,16", help="with --dask: chunks along the axis")
    p.add_argument("--dask-gib", type=int, default=4,
                   help="with --dask: GiB of the float32 array, 64 rows (default: %(default)s)")
    p.add_argument("--dask-cluster", action="store_true",
                   help="with --dask: on a dask_cuda.LocalCUDACluster of one worker")
    p.add_argument("--peers", default="cupyx,torch,jax,triton",
                   help="peers to run when importable (default: %(default)s)")
    p.add_argument("--methods", default="",
                   help="also time these forced cusoftmax methods (comma-separated, e.g. "
                        "registers,block,cluster,online), reported as fractions of copy")
    p.add_argument("--no-axis0", action="store_true", help="skip the axis-0 shapes")
    p.add_argument("--no-long", action="store_true", help="skip the single long rows")
    p.add_argument("--out", default="bench-results", help="folder for CSV, JSON, PNG")
    p.add_argument("--report", nargs="+", metavar="DIR", default=None,
                   help="write BENCHMARKS.md from the tables in these result folders")
    return p.parse_args(argv)


def _reference_ok(cupy, x, y, axis, dtype_name, op="softmax", dy=None):
    """Sampled slices of y against a float64 softmax (log_softmax, logsumexp) of the same input;
    for a backward pass, y is dx, x the forward's output and dy the gradient."""
    from .._accuracy import LOG_TOLERANCE, TOLERANCE, VJP_TOLERANCE, violations, vjp_reference

    if op in VJPS:
        ref, size = vjp_reference(cupy, x, dy, (axis % x.ndim,), op == "log_softmax_vjp")
        return violations(cupy.asnumpy(y.astype(cupy.float64)), cupy.asnumpy(ref), dtype_name,
                          VJP_TOLERANCE, of=cupy.asnumpy(cupy.broadcast_to(size, ref.shape)))
    if op == "logsumexp":
        x64 = cupy.moveaxis(x, axis, -1).astype(cupy.float64)
        m = x64.max(axis=-1)
        ref = m + cupy.log(cupy.exp(x64 - m[..., None]).sum(axis=-1))
        return violations(cupy.asnumpy(y.astype(cupy.float64)), cupy.asnumpy(ref), dtype_name,
                          LOG_TOLERANCE)
    xs, ys = (cupy.moveaxis(a, axis, -1) for a in (x, y))
    xs, ys = xs.reshape(-1, xs.shape[-1]), ys.reshape(-1, ys.shape[-1])
    pick = np.unique(np.linspace(0, xs.shape[0] - 1, 8).astype(np.int64))
    x64 = xs[pick].astype(cupy.float64)
    t = x64 - x64.max(axis=-1, keepdims=True)
    e = cupy.exp(t)
    if op == "log_softmax":
        ref, table = t - cupy.log(e.sum(axis=-1, keepdims=True)), LOG_TOLERANCE
    else:
        ref, table = e / e.sum(axis=-1, keepdims=True), TOLERANCE
    return violations(cupy.asnumpy(ys[pick].astype(cupy.float64)), cupy.asnumpy(ref), dtype_name,
                      table)


def _vjp_peers(names, op, given):
    """The backward pass's peers: factory(y, axis) as _peers', dy and the forward's x in
    `given` (set for each case)."""
    peers = {}
    torch = _gpu_torch() if "torch" in names else None
    if torch is not None:
        f_t = getattr(torch.ops.aten, f"_{VJPS[op]}_backward_data")

        def tf(y, axis):
            ty, tg = torch.from_dlpack(y), torch.from_dlpack(given["dy"])
            return (lambda: f_t(tg, ty, axis % y.ndim, ty.dtype)), "events", None
        peers["torch"] = tf
    found = _gpu_jax() if "jax" in names else None
    if found is not None:
        jax, jnp = found
        forward = getattr(jax.nn, VJPS[op])

        def jf(y, axis):
            jx, jg = jnp.from_dlpack(given["x"]), jnp.from_dlpack(given["dy"])
            f = jax.jit(lambda a, g: jax.vjp(lambda z: forward(z, axis=axis), a)[1](g)[0])
            return (lambda: f(jx, jg)), "wall", (lambda r: r.block_until_ready())
        peers["jax"] = jf
    return peers


def _peers(names, cupy, op="softmax"):
    """name -> factory(x, axis) returning (callable, timing kind, sync) or None if n/a."""
    peers = {}
    if "cupyx" in names:
        import cupyx.scipy.special as cs

        f_cs = getattr(cs, op)
        peers["cupyx"] = lambda x, axis: (lambda: f_cs(x, axis=axis), "events", None)
    torch = _gpu_torch() if "torch" in names else None
    if torch is not None:
        f_t = getattr(torch, op)

        def tf(x, axis):
            t = torch.from_dlpack(x)
            return (lambda: f_t(t, dim=axis)), "events", None
        peers["torch"] = tf
    found = _gpu_jax() if "jax" in names else None
    if found is not None:
        jax, jnp = found
        f_j = getattr(jax.nn, op)

        def jf(x, axis):
            jx = jnp.from_dlpack(x)
            f = jax.jit(lambda a: f_j(a, axis=axis))
            return (lambda: f(jx)), "wall", (lambda r: r.block_until_ready())
        peers["jax"] = jf
    if "triton" in names and op == "softmax":
        try:
            from .triton_peer import triton_softmax

            peers["triton"] = lambda x, axis: triton_softmax(x, axis)
        except ImportError:
            pass
    return peers


FORCED = "method:"  # impl name prefix of a forced cusoftmax method


def _forced(cusoftmax, method, op="softmax"):
    def factory(x, axis):
        fn = lambda: getattr(cusoftmax, op)(x, axis=axis, method=method)  # noqa: E731
        try:
            fn()
        except ValueError:  # the method cannot hold this row: n/a
            return None
        return fn, "events", None
    return factory


def _masked_peers(names, op, ours, given):
    """Ours without the mask, and jax.nn's op with ``where=`` under jit where JAX is installed."""
    peers = {"unmasked": lambda x, axis: (lambda: ours(x, axis=axis), "events", None)}
    found = _gpu_jax() if "jax" in names else None
    if found is not None:
        jax, jnp = found
        f_j = getattr(jax.nn, op)

        def jf(x, axis):
            jx, jw = jnp.from_dlpack(x), jnp.asarray(given["where"].get())
            f = jax.jit(lambda a, w: f_j(a, axis=axis, where=w))
            return (lambda: f(jx, jw)), "wall", (lambda r: r.block_until_ready())
        peers["jax"] = jf
    return peers


def _masked_reference_ok(cupy, x, y, where, axis, dtype_name, op):
    """y against a float64 reference of x's masked slices (left-out places 0, or -inf)."""
    from .._accuracy import LOG_TOLERANCE, TOLERANCE, violations

    w = cupy.broadcast_to(where, x.shape)
    x64 = cupy.where(w, x.astype(cupy.float64), -cupy.inf)
    m = x64.max(axis=axis, keepdims=True)
    with np.errstate(all="ignore"):
        t = x64 - cupy.where(cupy.isfinite(m), m, 0)
        e = cupy.exp(t)
        s = e.sum(axis=axis, keepdims=True)
        ref = t - cupy.log(s) if op == "log_softmax" else e / s
    ref = cupy.where(w, ref, -cupy.inf if op == "log_softmax" else 0.0)
    table = LOG_TOLERANCE if op == "log_softmax" else TOLERANCE
    return violations(cupy.asnumpy(y.astype(cupy.float64)), cupy.asnumpy(ref), dtype_name, table)


def _cases(args):
    dtypes = args.dtypes.split(",") if args.dtypes else DEFAULT_DTYPES
    widths = [int(w) for w in args.widths.split(",")] if args.widths else DEFAULT_WIDTHS
    for dt in dtypes:
        for w in widths:
            if w <= (args.total or 2**26):
                yield dt, ((args.total or 2**26) // w, w), -1
    if not args.no_axis0:
        for dt in dtypes:
            for shape in AXIS0_SHAPES:
                yield dt, shape, 0
    if not args.no_long and "float32" in dtypes:
        for n in LONG_ROWS:
            yield "float32", (1, n), -1


def _host_overhead(cupy, peers, rounds=7, calls=2000, op="softmax", scale=None):
    """Host microseconds per call on a tiny input (4 x 256 float32), launches not awaited: the
    best round of each implementation, their rounds taken in turn (so a drift of the host's
    speed during the measurement reaches every implementation alike). With `scale`: ours with
    it, ours without it, and torch's op of ``scale * x`` (two ops) where torch is installed."""
    import cusoftmax

    x = cupy.asarray(np.random.default_rng(0).standard_normal((4, 256), dtype=np.float32))
    ours = getattr(cusoftmax, op)
    fns = {"cusoftmax": lambda: ours(x, axis=-1)}  # the peers' dim=-1 (logsumexp's default: all)
    if op in VJPS:  # y and dy: torch's backward op (its own binding, the shortest way in)
        y, dy = getattr(cusoftmax, VJPS[op])(x), x * 0.5
        fns = {"cusoftmax": lambda: ours(y, dy)}
        if "torch" in peers:
            import torch

            ty, tg = torch.from_dlpack(y), torch.from_dlpack(dy)
            f_t = getattr(torch, f"_{VJPS[op]}_backward_data")
            fns["torch"] = lambda: f_t(tg, ty, 1, ty.dtype)
        return host_rounds(cupy, fns, rounds, calls)
    if scale is not None:
        fns = {"cusoftmax": lambda: ours(x, axis=-1, scale=scale), "unscaled": lambda: ours(x, axis=-1)}
        if _gpu_torch() is not None:
            import torch

            t, f_t = torch.from_dlpack(x), getattr(torch, op)
            fns["torch"] = lambda: f_t(t * scale, dim=-1)
        return host_rounds(cupy, fns, rounds, calls)
    if "torch" in peers:
        import torch

        t, f_t = torch.from_dlpack(x), getattr(torch, op)
        fns["torch"] = lambda: f_t(t, dim=-1)
    if "cupyx" in peers:
        import cupyx.scipy.special as cs

        f_cs = getattr(cs, op)
        fns["cupyx"] = lambda: f_cs(x, axis=-1)
    return host_rounds(cupy, fns, rounds, calls)


def main(argv=None):
    args = _parse(argv)
    if args.op.startswith("segment_") and not args.segments:
        raise SystemExit(f"--op {args.op} is timed by --segments")
    if args.report:
        from .report import main as report_main

        return report_main(args.report)
    if args.host:
        from .host import main as host_main

        return host_main(args)
    if args.segments:
        from .segment import main as segment_main

        return segment_main(args)
    if args.torch_op:
        from .torch_op import main as torch_op_main

        return torch_op_main(args)
    if args.jax_jit:
        from .jax_jit import main as jax_jit_main

        return jax_jit_main(args)
    if args.dask:
        from .dask_chunks import main as dask_main

        return dask_main(args)
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        print(f"cusoftmax.bench needs a CUDA GPU and CuPy: {e}", file=sys.stderr)
        return 2
    if args.op == "softmax_topk":
        from .topk import main as topk_main

        return topk_main(args)
    import cusoftmax

    from .._composed import compute_types, scaled as scaled_x

    dev = cupy.cuda.Device()
    name = cupy.cuda.runtime.getDeviceProperties(dev.id)["name"].decode()
    timer = Timer(cupy, args.repeat or 30)
    op = args.op
    ours = getattr(cusoftmax, op)
    given = {}  # a backward pass's dy and forward input, per case
    if op in VJPS:
        peers = _vjp_peers(args.peers.split(","), op, given)
        vjp = ours
        ours = lambda y, axis: vjp(y, given["dy"], axis=axis)  # noqa: E731
    elif args.where is not None:
        if op not in ("softmax", "log_softmax"):
            sys.exit(f"--where: softmax and log_softmax, not {op}")
        peers = _masked_peers(args.peers.split(","), op, ours, given)
        plain = ours
        ours = lambda x, axis: plain(x, axis=axis, where=given["where"])  # noqa: E731
    elif args.scale is not None:
        if op not in ("softmax", "log_softmax", "logsumexp"):
            sys.exit(f"--scale: softmax, log_softmax and logsumexp take a scale, not {op}")
        plain, scale = ours, args.scale
        ours = lambda x, axis: plain(x, axis=axis, scale=scale)  # noqa: E731
        peers = {"unscaled": lambda x, axis: (lambda: plain(x, axis=axis), "events", None)}
    else:
        peers = _peers(args.peers.split(","), cupy, op)
    if op == "log_softmax" and args.scale is None and args.where is None:  # our softmax: its target
        peers["softmax"] = lambda x, axis: (lambda: cusoftmax.softmax(x, axis=axis), "events", None)
    cases = list(_cases(args))
    methods = [m for m in args.methods.split(",") if m]
    if methods and op not in ("softmax", "log_softmax"):
        sys.exit(f"--methods: the forced kernel families are softmax's and log_softmax's, not {op}'s")
    rows = []
    _progress(f"{name}: {op}, {len(cases)} cases, peers: {', '.join(peers) or 'none'}")
    for i, (dt_name, shape, axis) in enumerate(cases, 1):
        dt = _dtype(cupy, dt_name)
        _progress(f"[{i}/{len(cases)}] {dt_name} {shape[0]}x{shape[1]} axis {axis}")
        x = (cupy.random.default_rng(i).standard_normal(shape, dtype=cupy.float32) * 3).astype(dt)
        if op in VJPS:  # the backward pass's input: the forward's output y, and dy
            given["x"] = x
            given["dy"] = cupy.random.default_rng(10**6 + i).standard_normal(shape, dtype=cupy.float32).astype(dt)
            x = getattr(cusoftmax, VJPS[op])(x, axis=axis)
        if args.where is not None:  # the mask: x's shape, or the reduced axis's length
            mshape = x.shape if args.where == "full" else tuple(
                n if d == axis % x.ndim else 1 for d, n in enumerate(x.shape))
            given["where"] = cupy.random.default_rng(2 * 10**6 + i).random(mshape) < 0.7
        nbytes = PASSES[op] * x.nbytes + (given["where"].nbytes if args.where else 0)
        copy_us = timer.copy(x)
        impls = {"cusoftmax": lambda x, axis: (lambda: ours(x, axis=axis), "events", None)}
        impls.update(peers)
        impls.update({f"{FORCED}{m}": _forced(cusoftmax, m, op) for m in methods})
        row = {"device": name, "op": op, "dtype": dt_name, "rows": shape[0], "cols": shape[1], "axis": axis,
               "copy_GBps": 2 * x.nbytes / copy_us / 1e3}  # a copy reads and writes
        for impl, factory in impls.items():
            try:
                made = factory(x, axis)
                if made is None:
                    continue
                fn, kind, sync = made
                y = fn()
                if sync:
                    sync(y)
                y = cupy.from_dlpack(y) if not isinstance(y, cupy.ndarray) else y
                scaled = args.scale is not None and impl != "unscaled"
                ref_x = scaled_x(cupy, x, args.scale, compute_types(x.dtype)[0]) if scaled else x
                if args.where is not None and impl != "unmasked":
                    bad = _masked_reference_ok(cupy, x, y, given["where"], axis, dt_name, op)
                else:
                    bad = _reference_ok(cupy, ref_x, y, axis, dt_name, "softmax" if impl == "softmax" else op,
                                        given.get("dy"))
                if bad and (impl == "cusoftmax" or impl.startswith(FORCED)):
                    row[f"{impl}_error"] = bad
                    _progress(f"    {impl}: WRONG RESULT, not timed: {bad}")
                    continue
                if bad:  # a peer outside cusoftmax's accuracy bound: timed, marked '*'
                    row[f"{impl}_inexact"] = bad
                del y
                us = timer.events(fn) if kind == "events" else timer.wall(fn, sync)
                row[f"{impl}_us"] = us
                row[f"{impl}_GBps"] = nbytes / us / 1e3
                row[f"{impl}_frac"] = row[f"{impl}_GBps"] / row["copy_GBps"]
            except Exception as e:  # a peer that cannot run this case: n/a, reason kept
                row[f"{impl}_error"] = f"{type(e).__name__}: {str(e)[:200]}"
                _progress(f"    {impl}: n/a ({row[f'{impl}_error']})")
        rows.append(row)
        done = [f"{k[:-5]} {v:.2f}" for k, v in row.items() if k.endswith("_frac")]
        _progress(f"    of copy: {', '.join(done)}")  # a run cut short still leaves its figures
        del x
        cupy.get_default_memory_pool().free_all_blocks()
    overhead = {} if args.where else _host_overhead(cupy, peers, op=op, scale=args.scale)
    _report(rows, list(impls), overhead, name, Path(args.out), op)
    return 0


def _report(rows, impls, overhead, device, out: Path, op="softmax"):
    out.mkdir(parents=True, exist_ok=True)
    peers = [p for p in impls if p != "cusoftmax" and not p.startswith(FORCED)]
    forced = [p for p in impls if p.startswith(FORCED)]
    head = (["dtype", "shape", "axis", "copy GB/s", "ours GB/s", "ours/copy"]
            + [f"vs {p}" for p in peers] + [f"{p[len(FORCED):]}/copy" for p in forced])
    lines = []
    for r in rows:
        ours = r.get("cusoftmax_us")
        cells = [r["dtype"], f"{r['rows']}x{r['cols']}", str(r["axis"]), f"{r['copy_GBps']:.0f}",
                 f"{r['cusoftmax_GBps']:.0f}" if ours else "ERR",
                 f"{r['cusoftmax_frac']:.2f}" if ours else "ERR"]
        for p in peers:
            mark = "*" if f"{p}_inexact" in r else ""
            cells.append(f"{r[f'{p}_us'] / ours:.2f}{mark}" if ours and f"{p}_us" in r else "n/a")
        cells += [f"{r[f'{p}_frac']:.2f}" if f"{p}_frac" in r else "n/a" for p in forced]
        lines.append(cells)
    meta = {"device": device, "date": time.strftime("%Y-%m-%d"), "versions": _versions(),
            "host_us_per_call_4x256_float32": overhead}
    legend = (f"{device}, {meta['date']}, {op}; 'vs X' = X's time / ours (> 1: ours faster); "
              "* = X's result is outside cusoftmax's accuracy bound for the dtype")
    text = format_table(head, lines)
    print(f"\n{legend}\n{text}")
    if overhead:  # not measured for where=
        print(f"host us per call (4x256 float32, {op}): " +
              ", ".join(f"{k} {v:.1f}" for k, v in overhead.items()))
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    keys = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("dtype", "rows", "cols", "axis"), k))
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, keys)
        w.writeheader()
        w.writerows(rows)
    (out / "table.md").write_text(f"{legend}\n\n{text}\n")
    write_table(out, op, {"kind": "gpu", "op": op, "device": device, "date": meta["date"],
                          "legend": legend}, head, lines)
    _plot(rows, impls, device, out / "bench.png")


def _plot(rows, impls, device, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _progress("matplotlib is not installed: no plot")
        return
    sweep = [r for r in rows if r["axis"] == -1 and r["rows"] > 1]
    dtypes = sorted({r["dtype"] for r in sweep})
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6 * len(dtypes), 4.5), squeeze=False)
    for ax, dt in zip(axes[0], dtypes):
        rs = sorted((r for r in sweep if r["dtype"] == dt), key=lambda r: r["cols"])
        cols = [r["cols"] for r in rs]
        ax.plot(cols, [r["copy_GBps"] for r in rs], "k--", label="device copy")
        for impl in impls:
            pts = [(r["cols"], r[f"{impl}_GBps"]) for r in rs if f"{impl}_GBps" in r]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, label=impl)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("row width (elements)")
        ax.set_ylabel("GB/s (passes over the tensor)")
        ax.set_title(f"{dt}, {rs[0]['rows'] * rs[0]['cols'] if rs else 0} elements")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(device)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
