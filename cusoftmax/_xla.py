"""The family's kernels inside jitted JAX programs on NVIDIA GPUs: an XLA FFI custom call
(kernels/xla_launch.cc) launches the kernel that the engine plans for a dense array of the
traced shape, on XLA's stream, with no Python at run time.

At trace time, each call signature (op, shape, dtype, axes, scale) is planned and its kernel
bound on every visible GPU, as the engine does for a CuPy array like it (``_engine``), and the
launch registered with the handler (``launch_id``). Only launches that take XLA's buffers as
they are qualify: one kernel over dense operands (no copy, no cast, no second pass over a
moved axis). Everything else stays XLA's operations (``_jax``).

The handler is compiled once per source and jaxlib version with the C++ compiler (``c++``,
``g++`` or ``$CXX``) against jaxlib's FFI headers into ``$CUSOFTMAX_CACHE_DIR`` (default
``~/.cache/cusoftmax``). ``CUSOFTMAX_JAX_KERNELS=0`` keeps every jitted call on XLA's
operations.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import _arrays, planning
from .planning import FUSED_TYPES, LOAD_SLOTS

SOURCE = "xla_launch.cc"  # in kernels/
TARGET = "cusoftmax_launch"
PLATFORM = "cuda"  # jax.lax.platform_dependent's name of the platform the kernels run on
# The ops a jitted program can launch, and the engine's way to each one's launch.
OPS = ("softmax", "log_softmax", "logsumexp", "softmax_vjp", "log_softmax_vjp")
_lock = threading.Lock()


def _cache_dir() -> Path:
    given = os.environ.get("CUSOFTMAX_CACHE_DIR")
    return Path(given) if given else Path.home() / ".cache" / "cusoftmax"


def build(folder: Path | None = None) -> Path:
    """The handler's shared library: compiled into `folder` (the cache by default) unless a
    build of this source for this jaxlib is there. Raises RuntimeError where it cannot be
    built (no compiler, the compiler's message)."""
    import jax
    import jaxlib

    from ._kernels import kernel_dir

    source = kernel_dir() / SOURCE
    include = jax.ffi.include_dir()
    key = hashlib.sha256(source.read_bytes() + jaxlib.__version__.encode()).hexdigest()[:16]
    folder = _cache_dir() if folder is None else Path(folder)
    lib = folder / f"xla_launch-{key}.so"
    if lib.exists():
        return lib
    compiler = next((c for c in (os.environ.get("CXX"), "c++", "g++") if c and shutil.which(c)),
                    None)
    if compiler is None:
        raise RuntimeError("no C++ compiler found (c++, g++ or $CXX)")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        part = Path(tmp) / lib.name
        done = subprocess.run([compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-w",
                               f"-I{include}", str(source), "-o", str(part), "-ldl"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-2000:]}")
        os.replace(part, lib)  # whole or not at all, for processes building side by side
    return lib


@lru_cache(maxsize=None)
def library():
    """(the handler's library, loaded and its target registered for CUDA, None) or (None, why
    jitted calls stay on XLA's operations)."""
    setting = os.environ.get("CUSOFTMAX_JAX_KERNELS", "1").strip().lower()
    if setting in ("0", "false", "off", "no"):
        return None, "CUSOFTMAX_JAX_KERNELS is off"
    why = _arrays.no_gpu_reason()
    if why is not None:
        return None, why
    try:
        return register(build()), None
    except (RuntimeError, OSError) as e:
        return None, f"the XLA handler could not be built: {e}"


def register(path: Path, target: str = TARGET):
    """The handler's library at `path`, loaded, its handler registered for CUDA as `target`
    (no GPU needed)."""
    import jax

    lib = ctypes.cdll.LoadLibrary(str(path))
    lib.csm_new.restype = ctypes.c_int64
    lib.csm_set.restype = ctypes.c_int
    lib.csm_set.argtypes = [ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64,
                            ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.c_int64,
                            ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]
    jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(lib.csm_launch), platform="CUDA")
    return lib


def usable() -> bool:
    """Whether jitted calls can launch the kernels (a GPU, the handler built)."""
    return library()[0] is not None


def _launch(op: str, shape: tuple, dtype: np.dtype, axes: tuple, scale):
    """(the engine's ``LaunchSpec`` for `op` of dense C-contiguous arrays of `shape` and
    `dtype` on the current device, its load word) or None where no single launch takes them."""
    import cupy

    from . import _engine, _family

    x = cupy.empty(shape, dtype)
    load, word = _engine.load_of(scale)
    if op in ("softmax", "log_softmax"):
        run = _engine._runner(x, cupy.empty_like(x), axes, None, op, load)
    elif op == "logsumexp":
        run, order = _engine._reducer(x, axes, op, load)
        if order != sorted(order):  # slices not in the result's order: a transpose after
            return None
    else:  # a backward pass: the engine keeps the launch where it takes y and dy as they are
        axis = axes[0] if len(axes) == 1 else axes
        dy = cupy.empty_like(x)
        getattr(_family, op)(x, dy, axis)
        run = _engine.remembered(x, axis, op, dy=dy)
    spec = getattr(run, "spec", None)
    return None if spec is None else (spec, word)


@lru_cache(maxsize=4096)
def launch_id(op: str, shape: tuple, dtype_name: str, axes: tuple, scale,
              tuning=None) -> tuple | None:
    """(the handler's id of `op` of dense arrays like these, planned under ``tuning`` (the
    active one, which the engine plans with: part of the key) and bound on every visible GPU,
    the bytes of its workspace) or None where the kernels do not take the call (XLA's
    operations do). ``scale``: None or a float the kernels' Scaled load takes."""
    import cupy

    from ._engine import fused_scale

    lib = library()[0]
    dtype = np.dtype(dtype_name)
    if (lib is None or op not in OPS or dtype.name not in FUSED_TYPES[op]
            or 0 in shape or not axes or (scale is not None and fused_scale(scale, dtype) is None)):
        return None  # a scale the Scaled load does not take (not positive and finite): XLA's
    found = {}
    for device in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(device):
            found[device] = _launch(op, shape, dtype, axes, scale)
        if found[device] is None:
            return None
    nbytes = max(spec.workspace[0] if spec.workspace else 0 for spec, _ in found.values())
    if nbytes and any(spec.workspace is None for spec, _ in found.values()):
        return None  # devices that plan it unlike each other: one result list serves them all
    with _lock:
        ident = lib.csm_new()
        for device, (spec, word) in found.items():
            words = spec.tail + (word or 0,) + (0,) * (LOAD_SLOTS - 1)
            zeroed = spec.workspace[1] if spec.workspace else 0
            lib.csm_set(ident, device, spec.function, spec.grid, spec.block, spec.smem,
                        int(spec.cooperative), zeroed, len(words),
                        (ctypes.c_int64 * len(words))(*words))
    return ident, nbytes


def call(op: str, operands, out_shape: tuple, dtype, axes: tuple, scale):
    """`op` of traced JAX arrays by its kernel (a custom call on the CUDA platform), or None
    where the kernels do not take the call."""
    import jax

    found = launch_id(op, tuple(operands[0].shape), np.dtype(dtype).name, axes, scale,
                      planning.active())
    if found is None:
        return None
    ident, nbytes = found
    results = [jax.ShapeDtypeStruct(out_shape, dtype)]
    if nbytes:
        results.append(jax.ShapeDtypeStruct((nbytes,), np.uint8))
    outs = jax.ffi.ffi_call(TARGET, results, vmap_method="sequential")(*operands,
                                                                        id=np.int64(ident))
    return outs[0]
