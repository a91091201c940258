"""The slab family: a strided reduced axis held on chip (sm_90+): strips of the inner axis,
each strip over the whole reduced axis cut over a thread-block cluster. 1 read + 1 write."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .common import MAX_GRID, ClusterLaunch, cluster_size, pow2_at_least, strided_args, threads_for, vecs


@dataclass(frozen=True)
class SlabPlan(ClusterLaunch):
    method = "slab"
    width: int  # packs a strip
    lines: int  # strips

    def args(self, layout):
        return (*strided_args(layout), self.width)


def slice_bytes(n, width, vec, itemsize, size):
    """Bytes of one slab block's slice: its steps of the reduced axis (n cut over `size`
    blocks, as the kernel's `per`) times a strip of `width` packs."""
    return math.ceil(n / size) * width * vec * itemsize


def scratch(size, cols, tuning):
    """Shared memory of a slab block ahead of its slice: slab_scratch, then two rounds of (m, d)
    float pairs of `cols` columns from `size` blocks or slab_max_warps warps, the more."""
    return tuning.slab.scratch + 16 * max(size, tuning.slab.max_warps) * cols


def shape(n, inner, itemsize, vec, limits, tuning):
    """(packs per strip, cluster size), or None when no cluster holds the axis: strips of the
    first width of slab_strip_bytes whose slices stay within slab_slice_bytes on some cluster
    size, else of its last width (the smallest cluster that holds them)."""
    t = tuning
    if itemsize > 4:
        return None
    for strip in t.slab.strip_bytes:
        width = min(32, t.slab.max_cols // vec, max(1, strip // (vec * itemsize)),
                    pow2_at_least(math.ceil(inner / vec)))
        size = cluster_size(lambda s: slice_bytes(n, width, vec, itemsize, s), limits, t,
                            lambda s: scratch(s, width * vec, t), (t.slab.slice_bytes,))
        if size is not None and slice_bytes(n, width, vec, itemsize, size) <= t.slab.slice_bytes:
            return width, size
    return None if size is None else (width, size)  # the last width, larger slices


def plan(c, forced=False) -> SlabPlan | None:
    """None (forced: ValueError) where no cluster holds the axis."""
    t, (outer, n, inner), itemsize = c.tuning, (c.layout.outer, c.layout.n, c.layout.inner), c.itemsize
    vec = c.strided_vec
    found = shape(n, inner, itemsize, vec, c.limits, t)
    if found is None:
        if not forced:
            return None
        raise ValueError(
            "method='slab' needs thread-block clusters (compute capability 9.0+, this device: "
            f"{c.limits.capability}), a float type of at most 4 bytes and the reduced axis "
            f"({n} steps) times a strip of the inner axis in {c.limits.max_cluster} "
            f"blocks' shared memory ({c.limits.smem_per_block} bytes each)"
        )
    width, size = found
    lines = outer * math.ceil(inner / (width * vec))
    nbytes = slice_bytes(n, width, vec, itemsize, size)
    threads = min(t.slab.max_threads, max(t.slab.min_threads, threads_for(nbytes, itemsize, t)))
    grid = min(lines, MAX_GRID // size) * size
    smem = scratch(size, width * vec, t) + nbytes
    return SlabPlan(vec, grid, threads, smem, width=width, size=size, lines=lines)


def templates(itemsize, clusters, tuning):
    if not clusters or itemsize > 4:
        return
    for vec in vecs(itemsize):
        for size in tuning.cluster.sizes:
            yield "slab", (vec, size)
