"""Kernel sources, compilation (NVRTC through ``cupy.RawModule``), caching and launch."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

HEADER = "common.cuh"
FILES = {
    "softmax_warp": "softmax_fused.cu",
    "softmax_block": "softmax_fused.cu",
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


_smem_raised: dict = {}


def _launch(launch, dtype_name, device_id, args):
    fn = function(launch.kernel, dtype_name, launch.template, device_id)
    if launch.smem > 48 * 1024 and _smem_raised.get(fn, 0) < launch.smem:
        fn.max_dynamic_shared_size_bytes = launch.smem
        _smem_raised[fn] = launch.smem
    fn((launch.grid,), (launch.block,), args, shared_mem=launch.smem)


def run(plan, layout, x, y) -> None:
    """Launch ``plan`` on CuPy arrays ``x`` -> ``y`` seen through ``layout``, on the current stream."""
    import cupy

    i64 = np.int64
    dt, dev = x.dtype.name, x.device.id
    outer, n, inner = i64(layout.outer), i64(layout.n), i64(layout.inner)
    (xso, xsn), (yso, ysn) = (tuple(map(i64, s)) for s in (layout.xs, layout.ys))
    if plan.method == "warp":
        _launch(plan.launches[0], dt, dev, (x, y, outer, n, xso, yso, np.int32(plan.width)))
    elif plan.method == "block":
        _launch(plan.launches[0], dt, dev, (x, y, outer, n, xso, yso))
    elif plan.method == "online":
        part = cupy.empty(2 * layout.outer * plan.chunks, dtype=np.float64)
        chunk, chunks = i64(plan.chunk), i64(plan.chunks)
        _launch(plan.launches[0], dt, dev, (x, outer, n, xso, chunk, chunks, part))
        _launch(plan.launches[1], dt, dev, (x, y, outer, n, xso, yso, chunk, chunks, part))
    elif plan.method == "columns":
        part = cupy.empty(2 * layout.outer * plan.chunks * layout.inner, dtype=np.float64)
        chunk, chunks = i64(plan.chunk), i64(plan.chunks)
        _launch(plan.launches[0], dt, dev, (x, outer, n, inner, xso, xsn, chunk, chunks, part))
        _launch(plan.launches[1], dt, dev, (outer, inner, chunks, part))
        _launch(plan.launches[2], dt, dev,
                (x, y, outer, n, inner, xso, xsn, yso, ysn, chunk, chunks, part))
    else:
        raise AssertionError(plan.method)
