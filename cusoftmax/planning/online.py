"""The online family: any row, in chunks, in one launch of resident blocks taking (row, chunk)
items: a read pass for each chunk's (m, d), a write pass (its read may hit L2; a block keeps the
first elements of a chunk it read in shared memory). 2 reads + 1 write."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .common import Plan, block_share, two_pass_grid, two_pass_workspace, vecs

ONLINE_STATIC_BYTES = 1024  # softmax_online's static shared memory, at most (tests/test_compile.py)


@dataclass(frozen=True)
class OnlinePlan(Plan):
    method = "online"
    chunk: int  # elements a chunk
    chunks: int  # chunks a row
    lines: int  # rows
    per_group: int  # rows a group of the schedule
    held: int  # elements of a chunk a block keeps in shared memory

    def args(self, layout):
        return (*super().args(layout), self.chunk, self.chunks, self.per_group, self.held)

    def workspace(self):
        """The two-pass workspace, then the elements held of each chunk; the statistics are
        zeroed too (each row's publish_norm word, kernels/softmax_online.cu)."""
        nbytes, head = two_pass_workspace(self.lines, self.chunks, 1)
        return nbytes + 4 * self.lines * self.chunks, head + 16 * self.lines


def plan(c, forced=False) -> OnlinePlan:
    # Below 2**31 elements for any row that fits a GPU (the kernel's offsets within a chunk).
    t, vec, itemsize = c.tuning, c.vec, c.itemsize
    chunk = max(t.online.min_chunk_bytes // itemsize, math.ceil(c.cols / t.online.max_chunks))
    chunk = math.ceil(chunk / vec) * vec
    chunks = math.ceil(c.cols / chunk)
    per_sm = t.online.blocks_per_sm[itemsize]
    step = t.online.threads * vec  # held elements: whole steps of the walk
    room = min(t.online.hold_bytes, block_share(c.limits, per_sm) - ONLINE_STATIC_BYTES,
               c.limits.smem_per_block)
    held = min(chunk, room // itemsize) // step * step if itemsize in t.online.holds else 0
    grid, per_group = two_pass_grid(c.rows, chunks, per_sm, t.online.group_waves, c.limits)
    return OnlinePlan(vec, grid, t.online.threads, held * itemsize, chunk=chunk, chunks=chunks,
                      lines=c.rows, per_group=per_group, held=held)


def templates(itemsize, clusters, tuning):
    for vec in vecs(itemsize):
        yield "online", (vec,)
