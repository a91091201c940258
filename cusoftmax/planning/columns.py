"""The columns family: a strided reduced axis in chunks, strips of the inner axis a block, in
one launch of resident blocks taking (strip, chunk) items: 2 reads + 1 write, no transpose."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .common import Plan, pow2_at_least, strided_args, two_pass_grid, two_pass_workspace, vecs


@dataclass(frozen=True)
class ColumnsPlan(Plan):
    method = "columns"
    width: int  # packs a strip
    chunk: int  # steps of the reduced axis a chunk
    chunks: int  # chunks a strip
    lines: int  # strips
    per_group: int  # strips a group of the schedule

    def args(self, layout):
        return (*strided_args(layout), self.chunk, self.chunks, self.per_group, self.width)

    def workspace(self):
        return two_pass_workspace(self.lines, self.chunks, self.width * self.vec)


def default(c) -> bool:
    return c.layout.inner >= c.tuning.columns.min_inner


def strips(outer, inner, vec, threads, cols) -> tuple[int, int]:
    """(packs a strip, strips) of a columns kernel: `cols` columns a strip, at most `threads`
    packs, no more than the inner run's (a power of two)."""
    width = min(max(1, cols // vec), threads, pow2_at_least(math.ceil(inner / vec)))
    return width, outer * math.ceil(inner / (width * vec))


def plan(c, forced=False) -> ColumnsPlan:
    t, (outer, n, inner) = c.tuning, (c.layout.outer, c.layout.n, c.layout.inner)
    vec = min(c.strided_vec, t.columns.max_vec)
    width, lines = strips(outer, inner, vec, t.columns.threads, t.columns.strip_cols)
    chunk = max(t.columns.min_chunk, math.ceil(n / t.columns.max_chunks))
    chunks = math.ceil(n / chunk)
    grid, per_group = two_pass_grid(lines, chunks, t.columns.blocks_per_sm, t.columns.group_waves,
                                    c.limits)
    return ColumnsPlan(vec, grid, t.columns.threads, 0, width=width, chunk=chunk, chunks=chunks,
                       lines=lines, per_group=per_group)


def templates(itemsize, clusters, tuning):
    for vec in vecs(itemsize):
        if vec <= tuning.columns.max_vec:
            yield "columns", (vec,)
