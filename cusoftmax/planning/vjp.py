"""The vjp family: the backward passes of softmax and log_softmax, dx from y and dy
(kernels/vjp.cu). Its order of choice:

    kernel       when
    vjp_columns  a strided reduced axis of an inner run of at least columns_min_inner: strips of
                 columns_strip_cols columns, (strip, chunk) items of vjp_columns_chunk_bytes of
                 each array in the two-pass schedule (else None: the caller copies to rows)
    vjp_lanes    a row in a warp's lanes, at most vjp_lane_max_packs packs of each a lane (by
                 element size)
    vjp_hold     rows of vjp_hold_min_bytes of each array or more, up to vjp_hold_threads
                 threads of vjp_hold_packs packs, at least an SM's worth of them: a block a row,
                 held (y in registers, dy in shared memory), read once
    vjp_block    longer rows, at least vjp_min_rows_per_sm of them an SM: a block a row, of
                 about vjp_block_packs packs of each array a thread (up to vjp_threads)
    vjp_chunks   fewer longer rows: (row, chunk) items of vjp_chunk_bytes of each array, in the
                 two-pass schedule, groups of vjp_group_waves waves of items

The three arrays are alike: the same strides (the caller copies where they are not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .columns import ColumnsPlan, strips
from .common import (BLOCK_RESERVED, MAX_GRID, THREADS_PER_SM, Plan, strided_args, two_pass_grid,
                     two_pass_workspace, vecs, vector_width)
from .reduce import lanes_shape

KERNELS = ("vjp_lanes", "vjp_hold", "vjp_block", "vjp_chunks", "vjp_columns")

VJP_HOLD_STATIC_BYTES = 512  # vjp_hold's static shared memory, at most (tests/test_compile.py)


@dataclass(frozen=True)
class VjpLanesPlan(Plan):
    method = "vjp_lanes"
    inputs = 2  # y, dy
    lanes: int
    packs: int
    at_once: int

    @property
    def template(self):
        return (self.vec, self.lanes, self.packs, self.at_once)

    def args(self, layout):
        return (layout.outer, layout.n)


@dataclass(frozen=True)
class VjpBlockPlan(Plan):
    method = "vjp_block"
    inputs = 2

    def args(self, layout):
        return (layout.outer, layout.n)


@dataclass(frozen=True)
class VjpHoldPlan(Plan):
    method = "vjp_hold"
    inputs = 2
    packs: int  # packs of each array a thread holds

    @property
    def template(self):
        return (self.vec, self.packs)

    def args(self, layout):
        return (layout.outer, layout.n)


def _hold(rows, n, vec, itemsize, limits, t) -> Plan | None:
    """vjp_hold's plan, or None where the row is out of its range or too few rows fill the SMs:
    whole warps of vjp_hold_packs packs a thread, dy's packs in shared memory."""
    packs = math.ceil(n / vec)
    if n * itemsize < t.vjp.hold_min_bytes or packs > t.vjp.hold_threads * t.vjp.hold_packs:
        return None
    block = 32 * math.ceil(packs / (32 * t.vjp.hold_packs))
    smem = block * t.vjp.hold_packs * vec * itemsize
    # resident: the launch bounds' registers (vjp_hold_threads' worth), shared memory with the
    # block's static bytes and the driver's reserve
    per_sm = max(1, min(t.vjp.hold_threads // block,
                        limits.smem_per_sm // (smem + VJP_HOLD_STATIC_BYTES + BLOCK_RESERVED)))
    if rows < limits.sm_count * per_sm:
        return None
    # a block a row: the hardware hands rows to SMs as blocks end, where blocks looping over a
    # residency's rows left some a row more than others (8192 rows on 528 blocks) [vjp-7]
    return VjpHoldPlan(vec, min(MAX_GRID, rows), block, smem, packs=t.vjp.hold_packs)


@dataclass(frozen=True)
class VjpChunksPlan(Plan):
    method = "vjp_chunks"
    inputs = 2
    chunk: int  # elements a chunk, a multiple of vec
    chunks: int  # chunks a row
    lines: int  # rows
    per_group: int  # rows a group of the schedule

    def args(self, layout):
        return (layout.outer, layout.n, self.chunk, self.chunks, self.per_group)

    def workspace(self):
        return two_pass_workspace(self.lines, self.chunks, 1)


@dataclass(frozen=True)
class VjpColumnsPlan(ColumnsPlan):
    """The columns family's strips and chunks over y and dy (alike: one pair of strides)."""

    method = "vjp_columns"
    inputs = 2

    def args(self, layout):
        return (*strided_args(layout)[:5], self.chunk, self.chunks, self.per_group, self.width)


def plan(layout, itemsize, addresses, limits, tuning) -> Plan | None:
    """The plan for `layout` (``_layout.Layout``; y, dy and dx alike, at `addresses`), or None:
    copy the reduced axes last and contiguous, then plan again."""
    t, threads = tuning, tuning.vjp.threads
    if not layout.rows:
        return _columns(layout, itemsize, addresses, limits, t)
    rows, n = layout.outer, layout.n
    vec = vector_width(itemsize, addresses, (n,))
    resident = limits.sm_count * (THREADS_PER_SM // threads)
    shape = lanes_shape(math.ceil(n / vec), t, t.vjp.lane_max_packs[itemsize])
    if shape is not None:
        lanes, per, at_once = shape
        grid = min(MAX_GRID, resident * t.reduce.waves, math.ceil(rows * lanes / (threads * at_once)))
        return VjpLanesPlan(vec, max(1, grid), threads, 0, lanes=lanes, packs=per, at_once=at_once)
    held = _hold(rows, n, vec, itemsize, limits, t)
    if held is not None:
        return held
    if rows < t.vjp.min_rows_per_sm * limits.sm_count:
        chunk = max(vec, t.vjp.chunk_bytes // itemsize // vec * vec)
        chunks = math.ceil(n / chunk)
        per_sm = THREADS_PER_SM // threads // (4 if itemsize == 8 else 2)  # HALF_RESIDENT (common.cuh)
        grid, per_group = two_pass_grid(rows, chunks, per_sm, t.vjp.group_waves, limits)
        return VjpChunksPlan(vec, grid, threads, 0, chunk=chunk, chunks=chunks, lines=rows,
                             per_group=per_group)
    # A block of whole warps, at least vjp_block_packs packs of each array a thread where the
    # row has them, up to vjp_threads.
    block = min(threads, 32 * math.ceil(math.ceil(n / vec) / (32 * t.vjp.block_packs)))
    blocks = limits.sm_count * min(32, THREADS_PER_SM // block) * t.reduce.waves
    # The rows of a wave are read twice: where their y and dy pass vjp_block_l2_bytes but a
    # block an SM's fit, fewer blocks an SM (a shared-memory reservation) keep them in L2.
    smem, fit = 0, t.vjp.block_l2_bytes // (limits.sm_count * 2 * n * itemsize)
    if 1 <= fit < min(32, THREADS_PER_SM // block) // 2:
        smem = limits.smem_per_sm // (fit + 1)
    return VjpBlockPlan(vec, min(MAX_GRID, blocks, rows), block, smem)


def _columns(layout, itemsize, addresses, limits, t) -> Plan | None:
    outer, n, inner = layout.outer, layout.n, layout.inner
    if inner < t.columns.min_inner:
        return None
    vec = vector_width(itemsize, addresses, layout.xs)
    width, lines = strips(outer, inner, vec, t.vjp.threads, t.columns.strip_cols)
    chunk = max(1, t.vjp.columns_chunk_bytes // (width * vec * itemsize))
    chunks = math.ceil(n / chunk)
    grid, per_group = two_pass_grid(lines, chunks, t.vjp.columns_blocks_per_sm, t.vjp.group_waves,
                                    limits)
    return VjpColumnsPlan(vec, grid, t.vjp.threads, 0, width=width, chunk=chunk, chunks=chunks,
                          lines=lines, per_group=per_group)


def templates(itemsize, tuning):
    for vec in vecs(itemsize):
        most = tuning.vjp.lane_max_packs[itemsize]
        shapes = {lanes_shape(p, tuning, most) for p in range(1, 32 * most + 1)}
        for lanes, per, at_once in sorted(shapes):
            yield "vjp_lanes", (vec, lanes, per, at_once)
        yield "vjp_hold", (vec, tuning.vjp.hold_packs)
        yield "vjp_block", (vec,)
        yield "vjp_chunks", (vec,)
        yield "vjp_columns", (vec,)
