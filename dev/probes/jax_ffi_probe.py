"""softmax inside jax.jit through an XLA FFI handler that launches the family's own kernel on
XLA's stream (dev/probes/jax_ffi.cc: no Python at launch), against XLA's operations (what
cusoftmax runs inside jit today) and jax.nn.softmax: the question record jax-1 left open.

The handler is built with the C++ compiler against jaxlib's FFI headers (``jax.ffi.include_dir``)
into a temporary folder; each shape's kernel is the one the engine plans for a CuPy array like
it (Plain load; plans with a workspace or a cooperative launch are left out), registered by its
CUfunction. The FFI result is checked bit for bit against the CuPy call's; times are wall
microseconds a call of back-to-back jitted calls (median of 5 rounds).

    PYTHONPATH=. python3 dev/probes/jax_ffi_probe.py [--out DIR]

Without a GPU, ``--lower`` only builds the handler, registers it and lowers one call for CUDA
(what dev/probes/test_probes.py checks).
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SHAPES = ((4, 256), (64, 1000), (256, 4096), (4096, 1024), (64, 65536), (16, 1048576))


def build(folder: Path) -> Path:
    """The handler's shared library, compiled into `folder`."""
    import jax

    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        raise SystemExit("jax_ffi_probe needs a C++ compiler (c++ or g++)")
    lib = folder / "libcsm_ffi.so"
    subprocess.run([compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-w",
                    f"-I{jax.ffi.include_dir()}", str(HERE / "jax_ffi.cc"), "-o", str(lib), "-ldl"],
                   check=True)
    return lib


def register(lib_path: Path):
    """The library loaded, its handler registered for CUDA as "csm_launch"."""
    import jax

    lib = ctypes.cdll.LoadLibrary(str(lib_path))
    lib.csm_register.restype = ctypes.c_int64
    lib.csm_register.argtypes = [ctypes.c_void_p]
    jax.ffi.register_ffi_target("csm_launch", jax.ffi.pycapsule(lib.csm_launch), platform="CUDA")
    return lib


def ffi_softmax(kernel_id: int, plan, tail):
    """softmax of one shape by the registered kernel, as a function of a JAX array."""
    import jax

    def f(x):
        call = jax.ffi.ffi_call("csm_launch", jax.ShapeDtypeStruct(x.shape, x.dtype))
        return call(x, id=np.int64(kernel_id), grid=np.int64(plan.grid),
                    block=np.int64(plan.block), smem=np.int64(plan.smem),
                    tail=np.asarray(tail, np.int64))

    return f


def _wall(fn, x, calls=200):
    import jax

    for _ in range(3):
        jax.block_until_ready(fn(x))
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            y = fn(x)
        jax.block_until_ready(y)
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(rounds)


def _chained(fn, calls=100):
    """`calls` dependent calls of `fn` inside one jit: per call, the device's time alone."""
    import jax

    return jax.jit(lambda v: jax.lax.fori_loop(0, calls, lambda i, a: fn(a), v)), calls


def _device_us(fn, x):
    chained, calls = _chained(fn)
    return _wall(chained, x, calls=5) / calls


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--lower", action="store_true", help="build, register, lower; no GPU")
    args = parser.parse_args(argv)
    import jax

    folder = Path(tempfile.mkdtemp())
    lib = register(build(folder))
    if args.lower:
        class Plan:
            grid, block, smem = 4, 128, 0

        f = ffi_softmax(0, Plan, (4, 256))
        text = jax.jit(f).trace(np.ones((4, 256), np.float32)).lower(
            lowering_platforms=("cuda",)).as_text()
        calls = [line for line in text.splitlines() if "custom_call @csm_launch" in line]
        print(calls[0].strip() if calls else "no custom call")
        return 0 if calls else 1
    import cupy

    import cusoftmax
    from cusoftmax import _engine, _kernels, planning

    device, tuning = cupy.cuda.Device().id, planning.active()
    lines = ["| shape | plan | FFI us | XLA (cusoftmax in jit) us | jax.nn us | same bits "
             "| FFI / XLA / jax.nn, 100 calls in one jit, us a call |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for shape in SHAPES:
        x = cupy.asarray(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
        strides = tuple(s // 4 for s in x.strides)
        layout, plan = _engine._plan(x.shape, strides, strides, (1,), 4, (0, 0), device, None,
                                     tuning, "softmax")
        if plan.workspace() is not None or plan.cooperative:
            lines.append(f"| {shape} | {plan.kernel} | (a workspace: not here) | | | | |")
            continue
        fn = _kernels._bound(plan, "float32", device, tuning)
        kernel_id = lib.csm_register(ctypes.c_void_p(fn.kernel.ptr))
        raw = ffi_softmax(kernel_id, plan, plan.args(layout))
        ours = jax.jit(raw)
        xj = jax.device_put(x.get())
        same = np.array_equal(np.asarray(ours(xj)), cusoftmax.softmax(x).get())
        xla = jax.jit(lambda v: cusoftmax.softmax(v))
        nn = jax.jit(jax.nn.softmax)
        inside = " / ".join(f"{_device_us(f, xj):.2f}" for f in
                            (raw, lambda v: cusoftmax.softmax(v), jax.nn.softmax))
        lines.append(f"| {shape} | {plan.kernel} | {_wall(ours, xj):.1f} | {_wall(xla, xj):.1f} | "
                     f"{_wall(nn, xj):.1f} | {same} | {inside} |")
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(f"\n{jax.devices()[0].device_kind}, JAX {jax.__version__}, float32, last axis\n{table}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "jax_ffi_probe.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
