"""``python -m cusoftmax.bench --host``: the host path (NumPy arrays) of ``--op`` against its peer,
by wall clock, no GPU needed. The peer is SciPy's function of the same name (softmax,
log_softmax, logsumexp), the NumPy formula of a VJP, or ``argsort`` and SciPy's softmax for
softmax_topk (k = 8). ``--where`` and ``--scale`` time ours with them against ours without
(the peer column then holds that call). Each case: the two calls in turn, each timed call after
an untimed one of its own, median of ``--repeat`` (default 7); the first case is a small
4 x 256 float32 call, timed over loops of calls."""

from __future__ import annotations

import csv
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from .common import _dtype, _progress, format_table
from .report import write_table

DTYPES = ["float64", "float32", "float16", "bfloat16"]
WIDTHS = [1000, 100000]  # rows of these lengths, --total elements a tensor (default 2**22)
AXIS0_WIDTH = 4096  # and (total / 4096, 4096) over axis 0
HOST_TOTAL = 2**22
SMALL = (4, 256)
TOPK = 8


def cases(args):
    """(dtype name, shape, axis) of every timed case but the small one."""
    dtypes = args.dtypes.split(",") if args.dtypes else DTYPES
    widths = [int(w) for w in args.widths.split(",")] if args.widths else WIDTHS
    total = args.total or HOST_TOTAL
    for dt in dtypes:
        for w in widths:
            yield dt, (max(1, total // w), w), -1
        if not args.no_axis0:
            yield dt, (max(1, total // AXIS0_WIDTH), AXIS0_WIDTH), 0


def _calls(op, x, axis, args, rng):
    """(ours, the peer) as functions of no argument for `op` on x."""
    import scipy.special

    import cusoftmax

    fn = getattr(cusoftmax, op)
    kw = {}
    if args.where == "full":
        kw["where"] = rng.random(x.shape) < 0.7
    elif args.where == "padding":
        n = x.shape[axis]
        kw["where"] = np.arange(n).reshape([-1] + [1] * (-1 - axis)) < n * 0.7
    if args.scale is not None:
        kw["scale"] = args.scale
    if op in ("softmax_vjp", "log_softmax_vjp"):
        forward = scipy.special.softmax if op == "softmax_vjp" else scipy.special.log_softmax
        y = forward(x, axis=axis).astype(x.dtype)
        dy = rng.standard_normal(x.shape).astype(x.dtype)
        ours = lambda: fn(y, dy, axis=axis, **kw)  # noqa: E731
        if op == "softmax_vjp":
            peer = lambda: y * (dy - (dy * y).sum(axis=axis, keepdims=True))  # noqa: E731
        else:
            peer = lambda: dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)  # noqa: E731
    elif op == "softmax_topk":
        ours = lambda: fn(x, TOPK, axis=axis, **kw)  # noqa: E731

        def peer():
            i = np.take(np.argsort(-x, axis=axis, kind="stable"), np.arange(TOPK), axis=axis)
            return np.take_along_axis(scipy.special.softmax(x, axis=axis), i, axis=axis), i
    else:
        ours = lambda: fn(x, axis=axis, **kw)  # noqa: E731
        peer = lambda: getattr(scipy.special, op)(x, axis=axis)  # noqa: E731
    if kw:  # ours against ours without where= / scale=
        peer = lambda: (fn(y, dy, axis=axis) if op.endswith("_vjp")  # noqa: E731
                        else fn(x, TOPK, axis=axis) if op == "softmax_topk" else fn(x, axis=axis))
    return ours, peer


def _median_ms(ours, peer, repeat, loop=1):
    """Median milliseconds a call of each, the two in turn, loops of `loop` calls (the peer's
    None where it cannot run the case)."""
    try:
        peer()
    except Exception as e:  # SciPy's logsumexp refuses bfloat16, say
        _progress(f"    the peer cannot run this case: {type(e).__name__}: {e}")
        peer = None
    times = {"ours": [], "peer": []}
    for _ in range(repeat):
        for k, fn in (("ours", ours), ("peer", peer)):
            if fn is None:
                continue
            fn()  # the memory the other one freed is reused as in a loop of this call
            t0 = time.perf_counter()
            for _ in range(loop):
                fn()
            times[k].append((time.perf_counter() - t0) * 1e3 / loop)
    return statistics.median(times["ours"]), statistics.median(times["peer"]) if peer else None


def main(args):
    """The host path of ``args.op`` against its peer: a table of median milliseconds per call
    and the peer's time over ours (> 1: ours faster); CSV and JSON under ``args.out``."""
    try:
        import scipy  # noqa: F401
    except ImportError as e:
        print(f"cusoftmax.bench --host needs SciPy: {e}", file=sys.stderr)
        return 2
    op, repeat = args.op, args.repeat or 7
    if op.endswith("_vjp") and args.scale is not None:
        sys.exit(f"--scale: the VJPs take no scale ({op})")
    peer_name = ("unmasked" if args.where else "unscaled") if (args.where or args.scale) else (
        "NumPy" if op.endswith("_vjp") else "argsort+SciPy" if op == "softmax_topk" else "SciPy")
    head = ["op", "peer", "dtype", "shape", "axis", "ours ms", "peer ms", "peer/ours"]
    rows = []
    todo = [("float32", SMALL, -1)] + list(cases(args))
    for dt_name, shape, axis in todo:
        _progress(f"{op} {dt_name} {shape[0]}x{shape[1]} axis {axis}")
        rng = np.random.default_rng(0)
        x = (rng.standard_normal(shape, dtype=np.float32) * 3).astype(_dtype(None, dt_name))
        ours, peer = _calls(op, x, axis, args, rng)
        loop = 200 if shape == SMALL else 1
        t_ours, t_peer = _median_ms(ours, peer, repeat, loop)
        rows.append([op, peer_name, dt_name, f"{shape[0]}x{shape[1]}", str(axis), f"{t_ours:.4f}",
                     "n/a" if t_peer is None else f"{t_peer:.4f}",
                     "n/a" if t_peer is None else f"{t_peer / t_ours:.2f}"])
    variant = f"where={args.where}" if args.where else f"scale={args.scale}" if args.scale else ""
    legend = (f"The host path (NumPy arrays) against its peer, NumPy {np.__version__}, "
              f"{os.cpu_count()} cores; median milliseconds a call of {repeat}; peer/ours > 1: "
              f"ours faster.")
    print(f"\n{legend}\n{format_table(head, rows)}")
    out = Path(args.out)
    write_table(out, f"host-{op}" + (f"-{variant}" if variant else ""),
                {"kind": "host", "op": op, "variant": variant, "device": "host CPU",
                 "date": time.strftime("%Y-%m-%d"), "legend": legend}, head, rows)
    with open(out / f"host-{op}.csv", "w", newline="") as f:
        csv.writer(f).writerows([head, *rows])
    return 0
