"""``python -m cusoftmax.bench --op softmax_topk``: softmax and top-k in one call against the
peers' two-op versions, on the shapes of vocabulary sampling, beam search and MoE routing.

Each case is (rows, n, k, flags) of float32 or bfloat16 logits (``--widths``: the cases of
those n alone). Times as the main bench: CUDA events around one call, L2 flushed before it,
median of the repeats (JAX by wall clock around a batch). GB/s counts one read of the logits (the k outputs a row are a rounding error), "of copy"
that over a device-to-device copy's GB/s of the same bytes. Peers: ``torch.topk`` of
``torch.softmax`` (``log_softmax`` with log; the k values over their sum with renormalize) and
``jax.lax.top_k`` of ``jax.nn.softmax`` under ``jit``. cusoftmax's result is checked first on
sampled rows against NumPy's stable argsort (exact indices) and a float64 softmax; a wrong one is
not timed. The host line: microseconds a call, launches not awaited, of softmax_topk and of one
``torch.softmax`` on 8 x 64 float32.
"""

from __future__ import annotations

import time

import numpy as np

from .common import (Timer, _dtype, _gpu_jax, _gpu_torch, _progress, _versions, format_table,
                    host_rounds)

# (label, rows, n, k, log, renormalize)
CASES = [
    ("vocab", 256, 262144, 1, False, False), ("vocab", 256, 262144, 8, False, False),
    ("vocab", 256, 262144, 64, False, False), ("vocab", 256, 262144, 256, False, False),
    ("vocab", 64, 131072, 50, False, False), ("vocab", 256, 32000, 64, False, False),
    ("vocab", 8, 50257, 64, False, False), ("vocab", 1, 262144, 64, False, False),
    ("vocab", 1, 32000, 8, False, False), ("vocab", 64, 152064, 128, False, False),
    ("beam", 8, 50257, 8, True, False), ("beam", 64, 152064, 16, True, False),
    ("beam", 64, 50257, 128, True, False),
    ("moe", 65536, 256, 8, False, True), ("moe", 65536, 256, 8, False, False),
    ("moe", 65536, 64, 6, False, True), ("moe", 16384, 128, 4, False, True),
    ("moe", 65536, 8, 2, False, True), ("moe", 1, 256, 8, False, True),
]


def _check(cupy, x, got, k, log, renormalize, dtype_name):
    """None where sampled rows of `got` have NumPy's indices and softmax's values, else why."""
    from .._accuracy import LOG_TOLERANCE, TOLERANCE, violations

    pick = np.unique(np.linspace(0, x.shape[0] - 1, 6).astype(np.int64))
    a = cupy.asnumpy(x[pick].astype(cupy.float32)).astype(np.float64)
    idx = np.argsort(-a, axis=1, kind="stable")[:, :k]
    if not np.array_equal(cupy.asnumpy(got[1][pick]), idx):
        return "indices differ from NumPy's stable argsort"
    chosen = np.take_along_axis(a, idx, 1)
    base = chosen if renormalize else a
    m = base.max(axis=1, keepdims=True)
    lse = m + np.log(np.exp(base - m).sum(axis=1, keepdims=True))
    ref = chosen - lse if log else np.exp(chosen - lse)
    return violations(cupy.asnumpy(got[0][pick].astype(cupy.float32)), ref, dtype_name,
                      LOG_TOLERANCE if log else TOLERANCE)


def _peers(names, k, log, renormalize):
    peers = {}
    torch = _gpu_torch() if "torch" in names else None
    if torch is not None:
        f_t = torch.log_softmax if log else torch.softmax

        def tf(x):
            t = torch.from_dlpack(x)

            def run():
                v, i = torch.topk(f_t(t, dim=-1), k, dim=-1)
                return (v / v.sum(-1, keepdim=True) if renormalize else v), i
            return run, "events", None
        peers["torch"] = tf
    found = _gpu_jax() if "jax" in names else None
    if found is not None:
        jax, jnp = found
        f_j = jax.nn.log_softmax if log else jax.nn.softmax

        def body(a):
            v, i = jax.lax.top_k(f_j(a, axis=-1), k)
            return (v / v.sum(-1, keepdims=True) if renormalize else v), i

        def jf(x):
            jx, g = jnp.from_dlpack(x), jax.jit(body)
            return (lambda: g(jx)), "wall", (lambda r: r[0].block_until_ready())
        peers["jax"] = jf
    return peers


def _host_us(cupy, names, calls=2000, rounds=7):
    """Host microseconds a call (launches not awaited), best round: softmax_topk of 8 x 64
    float32, k = 2, renormalized, and one torch.softmax of the same tensor."""
    import cusoftmax

    x = cupy.asarray(np.random.default_rng(0).standard_normal((8, 64), dtype=np.float32))
    fns = {"cusoftmax": lambda: cusoftmax.softmax_topk(x, 2, renormalize=True)}
    torch = _gpu_torch() if "torch" in names else None
    if torch is not None:
        t = torch.from_dlpack(x)
        fns["torch.softmax"] = lambda: torch.softmax(t, dim=-1)
    return host_rounds(cupy, fns, rounds, calls)


def main(args):
    """The table for ``args`` (cusoftmax.bench's, on a machine it found a GPU on)."""
    import cupy

    import cusoftmax

    names = args.peers.split(",")
    timer = Timer(cupy, args.repeat or 30)
    dtypes = args.dtypes.split(",") if args.dtypes else ["float32", "bfloat16"]
    device = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()
    widths = {int(w) for w in args.widths.split(",")} if args.widths else None
    cases = [(dt, *c) for dt in dtypes for c in CASES if widths is None or c[2] in widths]
    lines, peer_names = [], []
    for j, (dt, label, rows, n, k, log, renorm) in enumerate(cases, 1):
        flags = "".join(f for f, on in ((" log", log), (" renorm", renorm)) if on)
        _progress(f"[{j}/{len(cases)}] {dt} {label} {rows}x{n} k={k}{flags}")
        x = (cupy.random.default_rng(j).standard_normal((rows, n), dtype=cupy.float32) * 3).astype(
            _dtype(cupy, dt))
        copy_us = timer.copy(x)
        ours = lambda: cusoftmax.softmax_topk(x, k, log=log, renormalize=renorm)  # noqa: E731
        bad = _check(cupy, x, ours(), k, log, renorm, dt)
        cells = [dt, label, f"{rows}x{n}", str(k), flags.strip() or "-"]
        if bad:
            _progress(f"    cusoftmax: WRONG RESULT, not timed: {bad}")
            lines.append(cells + ["ERR"] * 3)
            continue
        us = timer.events(ours)
        cells += [f"{us:.1f}", f"{x.nbytes / us / 1e3:.0f}", f"{x.nbytes / us / (2 * x.nbytes / copy_us):.2f}"]
        for name, factory in _peers(names, k, log, renorm).items():
            if name not in peer_names:
                peer_names.append(name)
            try:
                fn, kind, sync = factory(x)
                t = timer.events(fn) if kind == "events" else timer.wall(fn, sync)
                cells.append(f"{t / us:.2f}")
            except Exception as e:  # a peer that cannot run this case
                _progress(f"    {name}: n/a ({type(e).__name__}: {str(e)[:120]})")
                cells.append("n/a")
        _progress("    " + " ".join(cells[5:]))
        lines.append(cells)
        del x
        cupy.get_default_memory_pool().free_all_blocks()
    width = max(len(c) for c in lines)
    head = ["dtype", "case", "shape", "k", "flags", "ours us", "GB/s read", "of copy"]
    head += [f"vs {p}" for p in peer_names][: width - len(head)]
    lines = [c + ["n/a"] * (len(head) - len(c)) for c in lines]
    host = _host_us(cupy, names)
    print(f"\n{device}, {time.strftime('%Y-%m-%d')}, softmax_topk; 'vs X' = X's time / ours "
          f"(> 1: ours faster); versions {_versions()}")
    print(format_table(head, lines))
    print("host us per call (8x64 float32): " + ", ".join(f"{k} {v:.1f}" for k, v in host.items()))
    return 0
