"""Kernel sources, compilation (NVRTC through ``cupy.RawModule``), caching and launch."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

HEADER = "common.cuh"
FILES = {
    "softmax_registers": "softmax_fused.cu",
    "softmax_tiles": "softmax_fused.cu",
    "softmax_block": "softmax_fused.cu",
    "softmax_cluster": "softmax_fused.cu",
    "online_partials": "softmax_online.cu",
    "online_finish": "softmax_online.cu",
    "columns_partials": "softmax_columns.cu",
    "columns_merge": "softmax_columns.cu",
    "columns_finish": "softmax_columns.cu",
}
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
    """(function, grid, block, shared bytes) with the function's shared-memory limit raised and,
    for clusters past the portable size, non-portable sizes allowed."""
    from ._dispatch import PORTABLE_CLUSTER

    fn = function(launch.kernel, dtype_name, launch.template, device_id)
    if launch.smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = launch.smem
    if launch.kernel == "softmax_cluster" and launch.template[1] > PORTABLE_CLUSTER:
        from cupy_backends.cuda.api import driver

        driver.funcSetAttribute(fn.kernel.ptr, _NON_PORTABLE_CLUSTER, 1)
    return fn, (launch.grid,), (launch.block,), launch.smem


@lru_cache(maxsize=1024)
def bind(plan, layout, dtype_name: str, device_id: int):
    """A callable ``run(x, y)`` that launches ``plan`` on CuPy arrays seen through ``layout``,
    on the current stream. Everything but the two arrays is prepared here, once."""
    import cupy

    i64 = np.int64
    outer, n, inner = i64(layout.outer), i64(layout.n), i64(layout.inner)
    (xso, xsn), (yso, ysn) = (tuple(map(i64, s)) for s in (layout.xs, layout.ys))
    chunk, chunks = i64(plan.chunk), i64(plan.chunks)
    k = [_bound(l, dtype_name, device_id) for l in plan.launches]

    if plan.method in ("registers", "tiles"):
        (f, g, b, sm), tail = k[0], (outer, n, xso, yso, np.int32(plan.width))
        return lambda x, y: f(g, b, (x, y) + tail, shared_mem=sm)
    if plan.method in ("block", "cluster"):
        (f, g, b, sm), tail = k[0], (outer, n, xso, yso)
        return lambda x, y: f(g, b, (x, y) + tail, shared_mem=sm)
    if plan.method == "online":
        words = 2 * layout.outer * plan.chunks

        def run_online(x, y):
            part = cupy.empty(words, dtype=np.float64)
            (f0, g0, b0, _), (f1, g1, b1, _) = k
            f0(g0, b0, (x, outer, n, xso, chunk, chunks, part))
            f1(g1, b1, (x, y, outer, n, xso, yso, chunk, chunks, part))

        return run_online
    if plan.method == "columns":
        words = 2 * layout.outer * plan.chunks * layout.inner

        def run_columns(x, y):
            part = cupy.empty(words, dtype=np.float64)
            (f0, g0, b0, _), (f1, g1, b1, _), (f2, g2, b2, _) = k
            f0(g0, b0, (x, outer, n, inner, xso, xsn, chunk, chunks, part))
            f1(g1, b1, (outer, inner, chunks, part))
            f2(g2, b2, (x, y, outer, n, inner, xso, xsn, yso, ysn, chunk, chunks, part))

        return run_columns
    raise AssertionError(plan.method)
