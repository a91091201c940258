"""Array adapters: whatever the caller passed becomes a CuPy array (GPU) or a NumPy array (host),
and the result goes back in the caller's framework, without a copy."""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any, Callable, NamedTuple

import numpy as np

_DLPACK_CPU = 1
_DLPACK_GPU = (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged


@lru_cache(maxsize=None)
def cupy_or_none():
    try:
        return importlib.import_module("cupy")
    except ImportError:
        return None


# CUDA runtime errors that mean "no GPU to use here", in a user's words.
_NO_GPU = {
    "cudaErrorInsufficientDriver": "the NVIDIA driver is missing or older than the CUDA runtime "
                                   "CuPy was built for",
    "cudaErrorNoDevice": "no CUDA device is visible to this process",
}


def no_gpu_reason() -> str | None:
    """None where CuPy can use a CUDA device, else why not, as "no usable CUDA device: ..."
    with the cause kept."""
    cupy = cupy_or_none()
    if cupy is None:
        return "no usable CUDA device: CuPy is not installed (the cuda12 or cuda13 extra)"
    try:
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
        return "no usable CUDA device: the CUDA runtime reports none"
    except Exception as e:  # no driver, no device
        return explain_no_gpu(e)


def explain_no_gpu(e: BaseException) -> str:
    """An error from the CUDA runtime as "no usable CUDA device: <meaning> (<cause>)"."""
    text = f"{type(e).__name__}: {e}"
    meaning = next((m for code, m in _NO_GPU.items() if code in text), None)
    return (f"no usable CUDA device: {meaning} ({text})" if meaning
            else f"no usable CUDA device ({text})")


def _framework(obj) -> str:
    return type(obj).__module__.partition(".")[0]


def _wrapper(framework: str, on_gpu: bool) -> Callable[[Any], Any] | None:
    """How to hand a result back to ``framework`` (zero-copy through DLPack or the CUDA array
    interface); None where the CuPy (or NumPy) array goes back itself (unknown producers too)."""
    if framework == "torch":
        return importlib.import_module("torch").from_dlpack
    if framework in ("jax", "jaxlib"):
        return importlib.import_module("jax.numpy").from_dlpack
    if framework == "numba" and on_gpu:
        return importlib.import_module("numba.cuda").as_cuda_array
    return None


class Adapted(NamedTuple):
    array: Any  # a cupy.ndarray or a numpy.ndarray
    on_gpu: bool
    framework: str  # "cupy", "numpy", "torch", "jax", "numba", ...
    wrap: Callable[[Any], Any] | None  # hands a result back to the framework; None: as it is


def adapt(obj, arrays_only: bool = False) -> Adapted:
    """``obj`` as a CuPy or NumPy array. ``arrays_only``: refuse what ``numpy.asarray`` would
    copy into a new array (lists, scalars), where a result written there would be lost."""
    if type(obj) is np.ndarray:
        return Adapted(obj, False, "numpy", None)
    if isinstance(obj, np.ma.MaskedArray):
        raise TypeError("numpy.ma.MaskedArray is not taken (its mask would be ignored): pass "
                        "x.data with where=~numpy.ma.getmaskarray(x)")
    if isinstance(obj, np.ndarray):  # np.matrix, np.memmap, ...: the ndarray behind it
        return Adapted(obj.view(np.ndarray), False, "numpy", None)
    cupy = cupy_or_none()
    if cupy is not None and isinstance(obj, cupy.ndarray):
        return Adapted(obj, True, "cupy", None)
    framework = _framework(obj)
    if hasattr(obj, "__dlpack_device__"):
        kind = int(obj.__dlpack_device__()[0])
        if kind == _DLPACK_CPU:
            return Adapted(np.from_dlpack(obj), False, framework, _wrapper(framework, False))
        if kind in _DLPACK_GPU:
            if cupy is None:
                raise RuntimeError("a GPU array was passed but CuPy is not installed")
            try:
                arr = cupy.from_dlpack(obj)
            except cupy.cuda.runtime.CUDARuntimeError as e:
                raise RuntimeError(explain_no_gpu(e)) from e
            return Adapted(arr, True, framework, _wrapper(framework, True))
        raise TypeError(f"unsupported DLPack device type {kind} for {type(obj).__name__}")
    if hasattr(obj, "__cuda_array_interface__"):
        if cupy is None:
            raise RuntimeError("a GPU array was passed but CuPy is not installed")
        return Adapted(cupy.asarray(obj), True, framework, _wrapper(framework, True))
    if arrays_only:
        raise TypeError(f"expected an array, got {type(obj).__name__}")
    return Adapted(np.asarray(obj), False, "numpy", None)
