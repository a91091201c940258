"""``python -m cusoftmax.bench --jax-jit``: the family inside ``jax.jit`` on a GPU (the kernels'
custom call, ``cusoftmax/_xla.py``) against ``jax.nn``'s jitted ops:

- device time a call: one jitted program of ``CHAIN`` dependent calls (unrolled: no loop
  control on the device; an optimization barrier after each, so XLA fuses no call into the
  next), its wall time over ``CHAIN``; the inputs stay in L2 where they fit, alike for both;
- wall time a call of back-to-back jitted calls (what a caller of one small jitted function
  sees);
- each op's traffic floor from a device copy of x (CuPy, L2 flushed): softmax reads and writes
  x (1 copy), logsumexp reads it (0.5), a VJP reads y and dy and writes dx (1.5), the
  cross-entropy's gradient reads x and t and writes dx at best (1.5).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from .common import Timer, _dtype, _gpu_jax, _progress, _versions, format_table
from .report import write_table

CHAIN = 20
SHAPES = ((4, 256), (4096, 256), (1024, 4096), (256, 32768), (64, 131072), (16, 1048576))
FLOOR = {"softmax": 1.0, "log_softmax": 1.0, "logsumexp": 0.5, "softmax_vjp": 1.5,
         "log_softmax_vjp": 1.5, "grad xent, VJP kernel": 1.5, "grad xent, XLA backward": 1.5}


def _ops(jax, jnp, cusoftmax):
    """op -> (ours, jax's): functions of (x, t)."""
    def lse(fn):
        return lambda x, t: fn(x, axis=-1)

    def vjp(ours, log):
        def theirs(y, g):  # the formula in jax.numpy
            s = jnp.sum(g, -1, keepdims=True) if log else jnp.sum(g * y, -1, keepdims=True)
            return g - jnp.exp(y) * s if log else y * (g - s)
        return ours, theirs

    def xent(fn):
        return jax.grad(lambda x, t: -jnp.sum(t * fn(x, axis=-1)))

    return {"softmax": (lambda x, t: cusoftmax.softmax(x), lambda x, t: jax.nn.softmax(x)),
            "log_softmax": (lambda x, t: cusoftmax.log_softmax(x),
                            lambda x, t: jax.nn.log_softmax(x)),
            "logsumexp": (lse(cusoftmax.logsumexp), lse(jax.nn.logsumexp)),
            "softmax_vjp": vjp(cusoftmax.softmax_vjp, False),
            "log_softmax_vjp": vjp(cusoftmax.log_softmax_vjp, True),
            "grad xent, VJP kernel": (xent(cusoftmax.log_softmax), xent(jax.nn.log_softmax)),
            "grad xent, XLA backward": (xent(cusoftmax.log_softmax), xent(jax.nn.log_softmax))}


def _chained(jax, jnp, fn):
    def program(x, t):
        for _ in range(CHAIN):  # the barrier keeps XLA from fusing one call into the next
            y = fn(x, t)
            # a result of another shape (logsumexp's) feeds the next call through one element
            y = y if y.shape == x.shape else x.at[0, 0].add(jnp.sum(y) * 0)
            x = jax.lax.optimization_barrier(y)
        return x
    return jax.jit(program)


def _median_wall(jax, fn, args, calls, rounds=7):
    for _ in range(3):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            r = fn(*args)
        jax.block_until_ready(r)
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main(args) -> int:
    found = _gpu_jax()
    if found is None:
        print("--jax-jit needs JAX with a CUDA device")
        return 1
    jax, jnp = found
    import cupy

    import cusoftmax
    from cusoftmax import _jax, _xla

    if not _xla.usable():
        print(f"--jax-jit: jitted calls cannot launch the kernels: {_xla.library()[1]}")
        return 1
    timer = Timer(cupy, args.repeat or 20)
    dtypes = args.dtypes.split(",") if args.dtypes else ["float32", "bfloat16"]
    head = ["op", "dtype", "shape", "ours us", "jax.nn us", "jax/ours", "ours of floor",
            "jax.nn of floor", "ours wall us", "jax.nn wall us", "kernel"]
    rows = []
    rng = np.random.default_rng(0)
    widths = {int(w) for w in args.widths.split(",")} if args.widths else None
    shapes = [s for s in SHAPES if widths is None or s[-1] in widths]
    for dt in dtypes:
        dtype = _dtype(cupy, dt)
        for shape in shapes:
            x = rng.normal(0, 2, shape).astype(dtype)
            copy_us = timer.copy(cupy.asarray(x))
            xj = jnp.asarray(x)
            tj = jnp.asarray(rng.random(shape).astype(dtype))
            for op, (ours, theirs) in _ops(jax, jnp, cusoftmax).items():
                _progress(f"jax-jit {op} {dt} {shape}")
                a = jax.nn.softmax(xj) if op.endswith("vjp") else xj
                a = jnp.log(a) if op == "log_softmax_vjp" else a
                got = {}
                chosen = _jax.KERNEL_BACKWARD
                _jax.KERNEL_BACKWARD = not op.endswith("XLA backward")
                _jax._with_vjp.cache_clear()
                for name, fn in (("ours", ours), ("jax", theirs)):
                    got[name] = _median_wall(jax, _chained(jax, jnp, fn), (a, tj), 5) / CHAIN
                    got[name + " wall"] = _median_wall(jax, jax.jit(fn), (a, tj), 50)
                kernel = _xla.TARGET in jax.jit(ours).lower(a, tj).as_text()
                _jax.KERNEL_BACKWARD = chosen
                _jax._with_vjp.cache_clear()
                floor = copy_us * FLOOR[op]
                rows.append([op, dt, "x".join(map(str, shape)), f"{got['ours']:.1f}",
                             f"{got['jax']:.1f}", f"{got['jax'] / got['ours']:.2f}",
                             f"{floor / got['ours']:.2f}", f"{floor / got['jax']:.2f}",
                             f"{got['ours wall']:.1f}", f"{got['jax wall']:.1f}",
                             "yes" if kernel else "no"])
                print(" | ".join(rows[-1]), flush=True)
    device = jax.devices()[0].device_kind
    legend = (f"Inside jax.jit on {device}: device time a call ({CHAIN} dependent calls in one "
              f"program), of the traffic floor (a device copy of x: 1, logsumexp 0.5, VJPs and "
              f"the cross-entropy's gradient 1.5), and wall time a call of back-to-back jitted "
              f"calls; jax/ours > 1: ours faster; kernel: our custom call in the program. "
              f"{_versions()}")
    print(f"\n{legend}\n{format_table(head, rows)}")
    write_table(Path(args.out), "jax-jit",
                {"kind": "jax-jit", "op": "softmax", "variant": "jax-jit", "device": device,
                 "date": time.strftime("%Y-%m-%d"), "legend": legend}, head, rows)
    return 0
