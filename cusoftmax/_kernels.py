"""Kernel sources, compilation (NVRTC through ``cupy.RawModule``), caching and launch."""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

HEADER = "common.cuh"
FILES = {
    "softmax_registers": "softmax_fused.cu",
    "softmax_short_spans": "softmax_fused.cu",
    "softmax_flat": "softmax_fused.cu",
    "softmax_tiles": "softmax_fused.cu",
    "softmax_block": "softmax_fused.cu",
    "softmax_cluster": "softmax_fused.cu",
    "softmax_spill": "softmax_fused.cu",
    "softmax_grid": "softmax_fused.cu",
    "softmax_online": "softmax_online.cu",
    "softmax_columns": "softmax_columns.cu",
    "softmax_slab": "softmax_columns.cu",
}
CLUSTER_KERNELS = ("softmax_cluster", "softmax_spill", "softmax_slab")  # template (vec, cluster size, ...)
C_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double"}
OPTIONS = ("-std=c++17",)


def kernel_dir() -> Path:
    """``kernels/``: inside the installed package, or beside it in a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "kernels", here.parent / "kernels"):
        if (candidate / HEADER).is_file():
            return candidate
    raise FileNotFoundError(f"cusoftmax kernels not found beside {here}")


@lru_cache(maxsize=None)
def source(filename: str) -> str:
    """A kernel file with the shared header's text pasted in place of its #include, so that a
    header edit changes CuPy's cache key (CuPy hashes the source, not -I headers)."""
    folder = kernel_dir()
    text = (folder / filename).read_text()
    include = f'#include "{HEADER}"'
    if include not in text:
        raise RuntimeError(f"{filename} does not include {HEADER}")
    return text.replace(include, (folder / HEADER).read_text(), 1)


def name_expression(kernel: str, dtype_name: str, template) -> str:
    args = ", ".join([C_TYPES[dtype_name], *map(str, template)])
    return f"csm::{kernel}<{args}>"


@lru_cache(maxsize=None)
def function(kernel: str, dtype_name: str, template: tuple, device_id: int):
    """The compiled kernel for the current device (CuPy caches the binary on disk too)."""
    import cupy

    expr = name_expression(kernel, dtype_name, template)
    module = cupy.RawModule(code=source(FILES[kernel]), options=OPTIONS, name_expressions=(expr,))
    return module.get_function(expr)


# CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cuda.h), not exported by CuPy.
_NON_PORTABLE_CLUSTER = 14


def _bound(launch, dtype_name, device_id):
    """The function of one launch, with its shared-memory limit raised and, for clusters past
    the portable size, non-portable sizes allowed."""
    from ._dispatch import PORTABLE_CLUSTER

    fn = function(launch.kernel, dtype_name, launch.template, device_id)
    # The limit is the function's, shared by every plan bound to it, so it is only ever raised;
    # its default (48 KiB less the function's static shared memory) is below 48 KiB.
    if launch.smem and fn.max_dynamic_shared_size_bytes < launch.smem:
        fn.max_dynamic_shared_size_bytes = launch.smem
    if launch.kernel in CLUSTER_KERNELS and launch.template[1] > PORTABLE_CLUSTER:
        from cupy_backends.cuda.api import driver

        driver.funcSetAttribute(fn.kernel.ptr, _NON_PORTABLE_CLUSTER, 1)
    return fn


def _launcher(launch, fn, tail, cooperative=False, workspace=None):
    """``run(x, y)``: launches ``fn`` on CuPy arrays x and y on the current stream through the
    driver, with their device addresses followed by the fixed integer arguments ``tail``;
    ``workspace``: (bytes, bytes to zero) of a two-pass kernel's workspace, allocated and zeroed
    on the same stream and passed after y. Every argument has an 8-byte slot (an int parameter
    reads the low 4 bytes, little-endian), packed once per thread; a call writes only the
    addresses. This costs about the driver's launch alone, where a RawKernel call converts each
    argument again (tools/host_launch.py measures both). ``cooperative``: every block resident
    at once, or the launch fails."""
    import ctypes

    import cupy
    from cupy_backends.cuda.api import driver

    ptr, grid, block, smem = fn.kernel.ptr, launch.grid, launch.block, launch.smem
    current_stream = cupy.cuda.get_current_stream
    pointers = 2 if workspace is None else 3
    n = pointers + len(tail)
    per_thread = threading.local()  # a slot buffer is written and read by one launch at a time

    def slots():
        buf = (ctypes.c_int64 * n)(*([0] * pointers), *(int(v) for v in tail))
        base = ctypes.addressof(buf)
        params = (ctypes.c_void_p * n)(*(base + 8 * i for i in range(n)))
        per_thread.buf = (buf, ctypes.addressof(params), params)
        return per_thread.buf

    launch_kernel = driver.launchCooperativeKernel if cooperative else driver.launchKernel
    extra = () if cooperative else (0,)  # the cooperative launch takes no `extra`

    def run(x, y, work=None):
        buf, params, _ = getattr(per_thread, "buf", None) or slots()
        buf[0] = x.data.ptr
        buf[1] = y.data.ptr
        if work is not None:
            buf[2] = work.data.ptr
        launch_kernel(ptr, grid, 1, 1, block, 1, 1, smem, current_stream().ptr, params, *extra)

    if workspace is None:
        return run
    nbytes, zeroed = workspace

    def run_two_pass(x, y):
        work = cupy.empty(nbytes, dtype=np.uint8)
        work.data.memset_async(0, zeroed)  # on the current stream, as the launch
        run(x, y, work)

    return run_two_pass


def _resident_grid(launch, fn, plan, device_id):
    """The grid kernel's launch with its grid cut to the blocks resident at once on this device
    (the occupancy the driver reports for this function, block size and shared memory), which
    must hold a row: at most lag + 1 chunks of it per block; and the kernel's other
    preconditions (see softmax_grid)."""
    import dataclasses

    from cupy_backends.cuda.api import driver

    from ._dispatch import device_limits

    per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, launch.block, launch.smem)
    resident = per_sm * device_limits(device_id).sm_count
    if plan.ahead < 1 or plan.lag < 0 or launch.block < 64:
        raise ValueError(
            f"method='grid' needs a copy in flight (ahead {plan.ahead}), lag >= 0 ({plan.lag}) "
            f"and two warps a block (warp 1 polls; {launch.block} threads)"
        )
    if plan.chunks > (plan.lag + 1) * resident:
        raise RuntimeError(
            f"method='grid' needs {plan.chunks} chunks of a row held at once; this device holds "
            f"{plan.lag + 1} in each of {resident} resident blocks of {launch.block} threads and "
            f"{launch.smem} bytes of shared memory"
        )
    return dataclasses.replace(launch, grid=min(resident, plan.lines * plan.chunks))


@lru_cache(maxsize=1024)
def bind(plan, layout, dtype_name: str, device_id: int):
    """A callable ``run(x, y)`` that launches ``plan`` on CuPy arrays seen through ``layout``,
    on the current stream. Everything but the two arrays' addresses is prepared here, once."""
    import cupy

    launch = plan.launch
    fn = _bound(launch, dtype_name, device_id)
    outer, n, inner = layout.outer, layout.n, layout.inner
    (xso, xsn), (yso, ysn) = layout.xs, layout.ys
    if plan.method == "flat":
        return _launcher(launch, fn, (outer, n, xso, yso, plan.per_group))
    if plan.method in ("registers", "tiles"):
        return _launcher(launch, fn, (outer, n, xso, yso, plan.width))
    if launch.kernel == "softmax_spill":  # also the packs of its slice a block holds
        return _launcher(launch, fn, (outer, n, xso, yso, plan.held))
    if plan.method in ("block", "cluster"):
        return _launcher(launch, fn, (outer, n, xso, yso))
    if plan.method == "slab":
        return _launcher(launch, fn, (outer, n, inner, xso, xsn, yso, ysn, plan.width))
    if plan.method not in ("grid", "online", "columns"):
        raise AssertionError(plan.method)
    from ._dispatch import workspace_bytes

    if plan.method == "grid":
        launch = _resident_grid(launch, fn, plan, device_id)
        tail = (outer, n, xso, yso, plan.chunk, plan.chunks, plan.ahead, plan.lag)
    elif plan.method == "online":
        tail = (outer, n, xso, yso, plan.chunk, plan.chunks, plan.per_group, plan.held)
    else:
        tail = (outer, n, inner, xso, xsn, yso, ysn, plan.chunk, plan.chunks, plan.per_group,
                plan.width)
    return _launcher(launch, fn, tail, cooperative=plan.method == "grid",
                     workspace=workspace_bytes(plan))
