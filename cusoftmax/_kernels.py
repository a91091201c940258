"""Kernel sources, compilation (NVRTC through ``cupy.RawModule``), caching and launch."""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .planning import LOAD_SLOTS, OPS, PORTABLE_CLUSTER, TUNING, Tuning, cuda_defines, device_limits

HEADER = "common.cuh"
FILES = {
    "registers": "softmax_fused.cu",
    "short_spans": "softmax_fused.cu",
    "flat": "softmax_fused.cu",
    "tiles": "softmax_fused.cu",
    "block": "softmax_fused.cu",
    "cluster": "softmax_fused.cu",
    "spill": "softmax_fused.cu",
    "grid": "softmax_fused.cu",
    "online": "softmax_online.cu",
    "columns": "softmax_columns.cu",
    "slab": "softmax_columns.cu",
    "reduce_lanes": "reduce.cu",
    "reduce_chunks": "reduce.cu",
    "reduce_columns": "reduce.cu",
    "vjp_lanes": "vjp.cu",
    "vjp_hold": "vjp.cu",
    "vjp_block": "vjp.cu",
    "vjp_chunks": "vjp.cu",
    "vjp_columns": "vjp.cu",
    "topk_lanes": "topk.cu",
    "topk_block": "topk.cu",
    "normalize": "normalize.cu",
    "segment_tiles": "segment.cu",
    "segment_fold": "segment.cu",
    "segment_fixup": "segment.cu",
}
C_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double"}
LANGUAGE = ("-std=c++17",)


def options(tuning: Tuning = TUNING) -> tuple[str, ...]:
    """NVRTC options: the language, then the values the kernels share with the policy."""
    return (*LANGUAGE, *cuda_defines(tuning))


def kernel_dir() -> Path:
    """``kernels/``: inside the installed package, or beside it in a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "kernels", here.parent / "kernels"):
        if (candidate / HEADER).is_file():
            return candidate
    raise FileNotFoundError(f"cusoftmax kernels not found beside {here}")


_INCLUDE = re.compile(r'^#include "([^"]+)"[^\n]*$', re.M)


def paste_includes(read, filename: str, seen=None) -> str:
    """``read(filename)`` with each ``#include "X"`` replaced by ``read(X)``, recursively, each
    header once (the headers are ``#pragma once``): CuPy hashes the source string, not headers
    found through -I, so a header edit must change the string."""
    seen = set() if seen is None else seen
    seen.add(filename)
    return _INCLUDE.sub(lambda m: "" if m[1] in seen else paste_includes(read, m[1], seen),
                        read(filename))


@lru_cache(maxsize=None)
def source(filename: str) -> str:
    """A kernel file of kernels/ with its headers' text pasted in (paste_includes)."""
    folder = kernel_dir()
    return paste_includes(lambda name: (folder / name).read_text(), filename)


def instantiations(clusters: bool = True):
    """Every (kernel, dtype name, template, ops) the library can launch (``clusters``: with the
    cluster kernels, sm_90 and newer)."""
    from . import planning
    from .planning import segment

    for load, op in ((load, op) for load, ops in planning.LOADS.items() for op in ops):
        for dtype_name in planning.FUSED_TYPES[op]:
            itemsize = 2 if dtype_name == "bfloat16" else np.dtype(dtype_name).itemsize
            made = (planning.reduce_templates(itemsize) if op in planning.REDUCTIONS
                    else planning.vjp_templates(itemsize) if op in planning.VJPS
                    else planning.templates(itemsize, clusters=clusters, load=load))
            if op in ("softmax", "log_softmax"):
                made = [*made, *planning.normalize_templates(itemsize)]
                if dtype_name in planning.TOPK_TYPES:
                    made = [*made, *planning.topk_templates(itemsize)]
            for kernel, template in made:
                if kernel in planning.LOAD_KERNELS.get(load, (kernel,)):
                    yield kernel, dtype_name, tuple(template), planning.ops_of(op, load)
    for dtype_name in sorted(set().union(*segment.TYPES.values())):
        itemsize = 2 if dtype_name == "bfloat16" else np.dtype(dtype_name).itemsize
        for kernel, ops, template in segment.templates(itemsize, TUNING):
            yield kernel, dtype_name, template, ops


def name_expression(kernel: str, dtype_name: str, template, ops=OPS) -> str:
    """``csm::<family><csm::<load>, csm::<epilogue>, <element type>, <template...>>``."""
    args = ", ".join([*(f"csm::{op}" for op in ops), C_TYPES[dtype_name], *map(str, template)])
    return f"csm::{kernel}<{args}>"


@lru_cache(maxsize=None)
def function(kernel: str, dtype_name: str, template: tuple, ops: tuple, defines: tuple, device_id: int):
    """The compiled kernel for the current device, built with ``defines`` (``cuda_defines`` of a
    tuning; CuPy caches the binary on disk too, keyed by source and options)."""
    import cupy

    expr = name_expression(kernel, dtype_name, template, ops)
    module = cupy.RawModule(code=source(FILES[kernel]), options=(*LANGUAGE, *defines),
                            name_expressions=(expr,))
    return module.get_function(expr)


# CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cuda.h), not exported by CuPy.
_NON_PORTABLE_CLUSTER = 14


def _bound(plan, dtype_name, device_id, tuning):
    """The function of one plan, with its shared-memory limit raised and, for clusters past
    the portable size, non-portable sizes allowed."""
    fn = function(plan.kernel, dtype_name, plan.template, plan.ops, cuda_defines(tuning), device_id)
    # The limit is the function's, shared by every plan bound to it, so it is only ever raised;
    # its default (48 KiB less the function's static shared memory) is below 48 KiB.
    if plan.smem and fn.max_dynamic_shared_size_bytes < plan.smem:
        fn.max_dynamic_shared_size_bytes = plan.smem
    if plan.cluster > PORTABLE_CLUSTER:
        from cupy_backends.cuda.api import driver

        driver.funcSetAttribute(fn.kernel.ptr, _NON_PORTABLE_CLUSTER, 1)
    return fn


def load_word(load: str, value=None) -> int:
    """The kernels' last argument, the load functor (kernels/ops.cuh), as a 64-bit slot: 0 for
    Plain (an empty struct), the bits of the float64 scale for Scaled (Masked fills
    ``planning.LOAD_SLOTS`` slots: its mask's address and three strides)."""
    if load == "Plain":
        return 0
    return int(np.float64(value).view(np.int64))


class LaunchSpec(NamedTuple):
    """One bound launch, everything fixed but the arrays' addresses (``run.spec``), for fronts
    that launch it themselves (kernels/xla_launch.cc): the function (a CUfunction), its grid and
    block (one dimension each), dynamic shared memory, whether the launch is cooperative, the
    integer arguments after the addresses (the load functor's ``planning.LOAD_SLOTS`` slots
    follow them), and the workspace ((bytes, head bytes zeroed first) or None)."""
    function: int
    grid: int
    block: int
    smem: int
    cooperative: bool
    tail: tuple
    workspace: tuple | None


def _launcher(plan, fn, tail):
    """``run(x, y)``: launches ``fn`` as ``plan`` says on CuPy arrays x and y (``plan.inputs``
    inputs, then ``plan.outputs`` outputs: ``run(y, dy, dx)`` for a backward pass, ``run(x,
    values, indices)`` for a top-k) on the current stream through the driver, with their device
    addresses followed by the fixed integer arguments ``tail`` and the load functor's slots
    (``run(x, y, load=load_word(...))``, or a tuple of up to ``planning.LOAD_SLOTS`` words; 0
    unless given); the plan's workspace, if any, is
    allocated, its head zeroed on the same stream, and passed after the outputs. Every argument
    has an 8-byte slot (an int parameter reads the low 4 bytes, little-endian), packed once per
    thread; a call writes only the addresses (and the load's slot where given). This costs about
    the driver's launch alone, where a RawKernel call converts each argument again
    (tools/host_launch.py measures both). A cooperative plan has every block resident at once, or
    the launch fails. ``run.spec`` is the launch as data (``LaunchSpec``); a plan of the Plain load
    has ``run.launch(pointers, stream)`` too: the same launch from given device addresses (a
    workspace's too) on a given stream (the torch front's fast path)."""
    import ctypes

    import cupy
    from cupy_backends.cuda.api import driver, runtime

    ptr, grid, block, smem = fn.kernel.ptr, plan.grid, plan.block, plan.smem
    cooperative, workspace = plan.cooperative, plan.workspace()
    current_stream = cupy.cuda.get_current_stream
    arrays = plan.inputs + plan.outputs
    pointers = arrays + (workspace is not None)
    n = pointers + len(tail) + LOAD_SLOTS
    per_thread = threading.local()  # a slot buffer is written and read by one launch at a time

    def slots():  # a thread's first launch of this kernel
        if not driver.ctxGetCurrent():  # the driver API launches in the thread's current context,
            runtime.free(0)  # which a thread that made no runtime call has not bound yet
        buf = (ctypes.c_int64 * n)(*([0] * pointers), *(int(v) for v in tail), *([0] * LOAD_SLOTS))
        base = ctypes.addressof(buf)
        params = (ctypes.c_void_p * n)(*(base + 8 * i for i in range(n)))
        per_thread.buf = (buf, ctypes.addressof(params), params)
        return per_thread.buf

    launch_kernel = driver.launchCooperativeKernel if cooperative else driver.launchKernel
    extra = () if cooperative else (0,)  # the cooperative launch takes no `extra`

    def run(*given, load=None):
        buf, params, _ = getattr(per_thread, "buf", None) or slots()
        for i, a in enumerate(given):  # the arrays, then the workspace
            buf[i] = a.data.ptr
        if load is not None:  # the load functor's struct, from its slot on
            words = load if type(load) is tuple else (load,)
            buf[n - LOAD_SLOTS:n - LOAD_SLOTS + len(words)] = words
        launch_kernel(ptr, grid, 1, 1, block, 1, 1, smem, current_stream().ptr, params, *extra)

    run.spec = LaunchSpec(ptr, grid, block, smem, cooperative, tuple(int(v) for v in tail),
                          workspace)
    if plan.ops[0] == "Plain":
        def launch(addresses, stream: int):
            """The launch alone, for fronts that hold their own buffers: the arrays' device
            addresses (``run``'s arrays, in order, then the workspace's where the plan has one:
            ``launch.workspace``, (bytes, head bytes to zero on `stream` first), else None) and
            a CUDA stream handle."""
            buf, params, _ = getattr(per_thread, "buf", None) or slots()
            buf[:pointers] = addresses
            launch_kernel(ptr, grid, 1, 1, block, 1, 1, smem, stream, params, *extra)

        launch.workspace = workspace
        run.launch = launch
    if workspace is None:
        return run
    nbytes, zeroed = workspace

    def run_two_pass(*given, load=None):
        work = cupy.empty(nbytes, dtype=np.uint8)
        if zeroed:
            work.data.memset_async(0, zeroed)  # on the current stream, as the launch
        run(*given, work, load=load)

    run_two_pass.spec = run.spec
    if hasattr(run, "launch"):
        run_two_pass.launch = run.launch
    return run_two_pass


@lru_cache(maxsize=1024)
def bind(plan, layout, dtype_name: str, device_id: int, tuning: Tuning = TUNING):
    """A callable ``run(x, y)`` that launches ``plan`` (made with ``tuning``, whose values the
    kernel is compiled with) on CuPy arrays seen through ``layout``, on the current stream.
    Everything but the two arrays' addresses is prepared here, once. A cooperative plan runs on
    the blocks the driver reports resident at once for its function."""
    fn = _bound(plan, dtype_name, device_id, tuning)
    if plan.cooperative:
        from cupy_backends.cuda.api import driver

        per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, plan.block, plan.smem)
        plan = plan.resident(per_sm * device_limits(device_id).sm_count)
    return _launcher(plan, fn, plan.args(layout))
