"""What the bench's modules share: the kernel timer, tables, progress lines, dtypes, the peers'
GPU imports and the versions line."""

from __future__ import annotations

import math
import statistics
import sys
import threading
import time

import numpy as np


def format_table(head, lines) -> str:
    """A Markdown-style table of string cells, columns padded to their widest cell."""
    widths = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(head)]
    rows = [head, ["-" * w for w in widths], *lines]
    return "\n".join((" | " if r is not rows[1] else "-|-").join(c.ljust(w) for c, w in zip(r, widths))
                     for r in rows)


def _progress(msg):
    print(msg, file=sys.stderr, flush=True)


class Timer:
    """Median kernel time of fn() in microseconds, L2 flushed before each call."""

    def __init__(self, cupy, repeat):
        self.cupy, self.repeat = cupy, repeat
        l2 = cupy.cuda.Device().attributes.get("L2CacheSize", 64 << 20)
        self.flush = cupy.empty(l2, dtype=cupy.float32)  # 4x the L2's bytes

    def events(self, fn):
        """The GPU time between events around fn()'s work: the stream is held (a host function
        waiting on a gate) until fn() has enqueued it all, so the host's time in fn(), or a
        slower host, never shows as an idle GPU between the events. The hold ends after 0.1 s
        without the gate, so a fn that waits for the stream only waits that long."""
        cp = self.cupy
        for _ in range(3):
            fn()
        times = []
        stream = cp.cuda.get_current_stream()
        for _ in range(self.repeat):
            self.flush.fill(0)
            gate = threading.Event()
            stream.launch_host_func(lambda g: g.wait(0.1), gate)
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            fn()
            b.record()
            gate.set()
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b) * 1e3)
        return statistics.median(times)

    def copy(self, x):
        """The time of a device-to-device copy of x, the ceiling every result is held to."""
        cp = self.cupy
        dst = cp.empty_like(x)
        return self.events(lambda: cp.cuda.runtime.memcpyAsync(
            dst.data.ptr, x.data.ptr, x.nbytes, cp.cuda.runtime.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr))

    def wall(self, fn, sync, batch=10):
        for _ in range(3):
            sync(fn())
        times = []
        for _ in range(max(3, self.repeat // batch)):
            t0 = time.perf_counter()
            for _ in range(batch):
                r = fn()
            sync(r)
            times.append((time.perf_counter() - t0) / batch * 1e6)
        return statistics.median(times)


def _gpu_torch():
    """torch where it is installed and sees a GPU, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _gpu_jax():
    """(jax, jax.numpy) where JAX is installed and runs on a GPU, else None."""
    try:
        import jax
        import jax.numpy as jnp

        return (jax, jnp) if jax.devices()[0].platform == "gpu" else None
    except (ImportError, RuntimeError):
        return None


def _dtype(cupy, name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def host_rounds(cupy, fns, rounds=7, calls=2000):
    """name -> the best round's host microseconds a call of fns[name] (launches not awaited),
    the implementations' rounds taken in turn."""
    out = dict.fromkeys(fns, math.inf)
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(200):
                fn()
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out[name] = min(out[name], (time.perf_counter() - t0) / calls * 1e6)
            cupy.cuda.Device().synchronize()
    return out


def _versions():
    import importlib.metadata as md

    out = {}
    for pkg in ("cusoftmax", "cupy-cuda12x", "cupy-cuda13x", "torch", "jax", "triton", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    if "cusoftmax" not in out:
        from .. import __version__

        out["cusoftmax"] = f"{__version__} (source tree)"
    return out
