"""The cluster family: a row cut over a thread-block cluster's shared memory (sm_90+), 1 read +
1 write; past what a cluster holds with cluster_blocks_per_sm blocks an SM, the spill kernel:
each block holds what it can and reads the rest of its slice twice."""

from __future__ import annotations

from dataclasses import dataclass

from .common import (MAX_GRID, PORTABLE_CLUSTER, ClusterLaunch, block_share, cluster_size, slice_bytes, threads_for,
                     vecs)


@dataclass(frozen=True)
class ClusterPlan(ClusterLaunch):
    method = "cluster"


@dataclass(frozen=True)
class SpillPlan(ClusterPlan):
    held: int  # packs of its slice a block holds

    @property
    def kernel(self):
        return "spill"

    def args(self, layout):
        return (*super().args(layout), self.held)


def shared_slice_bytes(limits, tuning) -> int:
    """The largest slice of a row's cluster block with cluster_blocks_per_sm blocks an SM."""
    return block_share(limits, tuning.cluster.blocks_per_sm) - tuning.block.scratch


def size(c):
    """The cluster size for the case's row (as held on chip), or None: see common.cluster_size,
    with slices small enough to share an SM as the last small limit."""
    def find():
        t, (vec, cols) = c.tuning, c.on_chip
        smalls = (*t.cluster.slice_bytes, shared_slice_bytes(c.limits, t))
        return cluster_size(lambda s: slice_bytes(cols, c.staged_itemsize, vec, s), c.limits, t,
                            lambda s: t.block.scratch, smalls)
    return c.once("cluster_size", find)


def shares_sm(c) -> bool:
    """Some cluster holds the row with cluster_blocks_per_sm of its blocks an SM."""
    vec, cols = c.on_chip
    found = size(c)
    if found is None:
        return False
    return slice_bytes(cols, c.staged_itemsize, vec, found) <= shared_slice_bytes(c.limits, c.tuning)


def _spill(c):
    """(plan, spill per held byte) for a row longer than the largest cluster holds with
    cluster_blocks_per_sm blocks an SM (fewer than 2**31 elements: the kernel's offsets in a
    spill); None without clusters, where no spill is needed, or past that."""
    if shares_sm(c) or not c.limits.clusters:
        return None
    t, (vec, cols), itemsize = c.tuning, c.on_chip, c.itemsize
    most = c.limits.max_cluster
    held = shared_slice_bytes(c.limits, t) // (vec * itemsize)
    per = slice_bytes(cols, itemsize, vec, most) // (vec * itemsize)  # packs of its slice
    if per <= held or (per - held) * vec >= 2**31:
        return None
    grid = min(MAX_GRID // most, c.rows) * most
    smem = t.block.scratch + held * vec * itemsize
    return SpillPlan(vec, grid, t.spill.threads, smem, size=most, held=held), (per - held) / held


def spill(c):
    return c.once("spill", lambda: _spill(c))


def default(c) -> bool:
    spilled = spill(c)
    return shares_sm(c) or (spilled is not None and spilled[1] <= c.tuning.cluster.spill_max)


def plan(c, forced=False) -> ClusterPlan:
    spilled = spill(c)
    if spilled is not None:
        return spilled[0]
    found = size(c)
    if found is None:
        raise ValueError(
            "method='cluster' needs thread-block clusters (compute capability 9.0+, this "
            f"device: {c.limits.capability}) and rows that leave each of its blocks fewer "
            "than 2**31 elements to read twice"
        )
    t, (vec, cols) = c.tuning, c.on_chip
    nbytes = slice_bytes(cols, c.itemsize, vec, found)
    grid = min(MAX_GRID // found, c.rows) * found
    threads = threads_for(nbytes, c.itemsize, t)
    return ClusterPlan(vec, grid, threads, t.block.scratch + slice_bytes(cols, c.staged_itemsize, vec, found),
                       size=found)


def templates(itemsize, clusters, tuning):
    if not clusters:
        return
    for vec in vecs(itemsize):
        for found in tuning.cluster.sizes:
            yield "cluster", (vec, found)
        for most in sorted({PORTABLE_CLUSTER, tuning.cluster.sizes[-1]}):  # the largest, spilling
            yield "spill", (vec, most)
