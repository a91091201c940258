"""The grid family: rows spread over the whole GPU, chunks held in blocks resident all at once
(a cooperative launch), each row's (m, d) merged across them. 1 read + 1 write."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .common import BLOCK_RESERVED, THREADS_PER_SM, Plan, padded_bytes, two_pass_workspace, vecs

GRID_STATIC_BYTES = 1024  # softmax_grid's static shared memory, at most (tests/test_compile.py)


@dataclass(frozen=True)
class GridPlan(Plan):
    method = "grid"
    cooperative = True
    chunk: int  # elements a chunk
    chunks: int  # chunks a row
    lines: int  # rows
    ahead: int  # chunks a block has in flight
    lag: int  # steps between a chunk's (m, d) and its write

    def args(self, layout):
        return (*super().args(layout), self.chunk, self.chunks, self.ahead, self.lag)

    def workspace(self):
        return two_pass_workspace(self.lines, self.chunks, 1)

    def resident(self, blocks: int) -> GridPlan:
        """This plan on ``blocks`` blocks resident at once (the driver's count for its function),
        which must hold a row: at most lag + 1 chunks of it a block; and the kernel's other
        preconditions (see softmax_grid)."""
        if self.ahead < 1 or self.lag < 0 or self.block < 64:
            raise ValueError(
                f"method='grid' needs a copy in flight (ahead {self.ahead}), lag >= 0 ({self.lag}) "
                f"and two warps a block (warp 1 polls; {self.block} threads)"
            )
        if self.chunks > (self.lag + 1) * blocks:
            raise RuntimeError(
                f"method='grid' needs {self.chunks} chunks of a row held at once; this device holds "
                f"{self.lag + 1} in each of {blocks} resident blocks of {self.block} threads and "
                f"{self.smem} bytes of shared memory"
            )
        return dataclasses.replace(self, grid=min(blocks, self.lines * self.chunks))


def shape(itemsize, vec, limits, tuning) -> tuple[int, int, int]:
    """(packs per chunk, shared memory per block, the most chunks a row may have): grid_lag + 1
    chunks per resident block (checked again against the driver's count at launch)."""
    t = tuning
    per = max(1, t.grid.chunk_bytes // (vec * itemsize))
    smem = t.block.scratch + (t.grid.ahead + t.grid.lag) * per * vec * itemsize
    per_sm = min(THREADS_PER_SM // t.grid.threads,
                 limits.smem_per_sm // (smem + GRID_STATIC_BYTES + BLOCK_RESERVED))
    return per, smem, (t.grid.lag + 1) * limits.sm_count * per_sm


def default(c) -> bool:
    t = c.tuning
    return (c.itemsize == t.grid.itemsize and c.limits.clusters
            and padded_bytes(c.cols, c.itemsize, c.vec) <= t.grid.max_row_bytes)


def plan(c, forced=False) -> GridPlan | None:
    """None (forced: ValueError) when a row has more chunks than the resident blocks hold."""
    t, vec = c.tuning, c.vec
    per, smem, most = shape(c.itemsize, vec, c.limits, t)
    chunks = math.ceil(math.ceil(c.cols / vec) / per)
    if chunks > most:
        if not forced:
            return None
        raise ValueError(
            f"method='grid' holds a row in at most {most} chunks of {per * vec} elements "
            f"({t.grid.lag + 1} in each block resident on {c.limits.sm_count} SMs): {c.cols} "
            f"elements do not fit"
        )
    resident = most // (t.grid.lag + 1)
    return GridPlan(vec, min(resident, c.rows * chunks), t.grid.threads, smem, chunk=per * vec,
                    chunks=chunks, lines=c.rows, ahead=t.grid.ahead, lag=t.grid.lag)


def templates(itemsize, clusters, tuning):
    for vec in vecs(itemsize):
        yield "grid", (vec,)
