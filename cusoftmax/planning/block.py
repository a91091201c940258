"""The block family: a row in one block's shared memory. 1 read + 1 write."""

from __future__ import annotations

from dataclasses import dataclass

from . import cluster
from .common import MAX_GRID, Plan, padded_bytes, threads_for, vecs


@dataclass(frozen=True)
class BlockPlan(Plan):
    method = "block"


def fits(c) -> bool:
    vec, cols = c.on_chip
    return c.tuning.block.scratch + padded_bytes(cols, c.staged_itemsize, vec) <= c.limits.smem_per_block


def default(c) -> bool:
    """Rows one block holds, where no cluster does or up to cluster_min_bytes."""
    vec, cols = c.on_chip
    return fits(c) and (cluster.size(c) is None or
                        padded_bytes(cols, c.itemsize, vec) <= c.tuning.cluster.min_bytes)


def plan(c, forced=False) -> BlockPlan:
    if not fits(c):
        raise ValueError(
            f"method='block' needs the row in shared memory: {c.cols} elements of {c.itemsize} "
            f"bytes exceed the device's {c.limits.smem_per_block} bytes per block"
        )
    vec, cols = c.on_chip
    nbytes = padded_bytes(cols, c.itemsize, vec)
    return BlockPlan(vec, min(MAX_GRID, c.rows), threads_for(nbytes, c.itemsize, c.tuning),
                     c.tuning.block.scratch + padded_bytes(cols, c.staged_itemsize, vec))


def templates(itemsize, clusters, tuning):
    for vec in vecs(itemsize):
        yield "block", (vec,)
