"""The reduce family: each slice to one value (logsumexp), one read of every element and nothing
held but each thread's running state (kernels/reduce.cu). Its order of choice:

    kernel          layout            when
    reduce_lanes    contiguous rows   a row in a warp's lanes, reduce_lane_min_packs to
                                      reduce_lane_max_packs a lane (reduce_lane_stages
                                      steps in flight);
                                      or streamed by a warp in rounds of that, rows of at most
                                      reduce_warp_max_bytes, reduce_warp_rows_waves warps' worth
    reduce_chunks   contiguous rows   longer rows: a block a chunk, chunks merged in the workspace
    reduce_columns  a strided axis    any: strips of columns a block, the axis in chunks

The plans' output is one element a slice, contiguous, in the layout's order of slices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .columns import strips
from .common import MAX_GRID, THREADS_PER_SM, Plan, block_share, pow2_at_least, vecs, vector_width

KERNELS = ("reduce_lanes", "reduce_chunks", "reduce_columns")


def _grid(items, limits, tuning):
    """Blocks: one an item, at most reduce_waves full residencies (blocks loop over items)."""
    resident = limits.sm_count * (THREADS_PER_SM // tuning.reduce.threads) * tuning.reduce.waves
    return max(1, min(MAX_GRID, resident, items))


def _workspace(lines, chunks, values):
    """(bytes, head bytes to zero) of ReduceWork: a count per line, then 3 doubles a partial
    state; one chunk a line needs none (8 bytes, nothing zeroed)."""
    if chunks == 1:
        return 8, 0
    head = (4 * lines + 7) // 8 * 8
    return head + 24 * lines * chunks * values, head


@dataclass(frozen=True)
class LanesPlan(Plan):
    method = "reduce_lanes"
    lanes: int  # a row's lanes
    packs: int  # packs a lane holds
    at_once: int  # rows a lane group takes at a time
    stages: int  # steps in flight (LaneRing in kernels/reduce.cu)
    warp: bool = False  # copied whole rows at a time by the warp (WarpRing)

    @property
    def template(self):
        return (self.vec, self.lanes, self.packs, self.at_once, self.stages, int(self.warp))

    def args(self, layout):
        return (layout.outer, layout.n, layout.xs[0])


def _resident(itemsize, threads):
    """Blocks an SM at the reduce kernels' launch bounds (HALF_RESIDENT in kernels/common.cuh)."""
    return THREADS_PER_SM // threads // (4 if itemsize == 8 else 2)


def _lane_ring(lanes, pack_bytes, tuning):
    """(steps in flight before shared memory bounds them, copied by the warp) of reduce_lanes:
    rows in reduce_lane_warp_lanes lanes (from, to below) of packs of 4 bytes or more,
    reduce_lane_stages steps copied whole rows at a time by the warp (WarpRing); other rows in
    fewer than reduce_lane_staged_lanes lanes one step ahead in registers (0); packs under 4
    bytes one step in registers (1, StepRing's ASYNC false); else reduce_lane_stages."""
    low, high = tuning.reduce.lane_warp_lanes
    if pack_bytes >= 4 and low <= lanes < high:
        return tuning.reduce.lane_stages, True
    if lanes < tuning.reduce.lane_staged_lanes:
        return 0, False
    return (tuning.reduce.lane_stages if pack_bytes >= 4 else 1), False


def lane_stages(lanes, pack_bytes, per_step, itemsize, limits, tuning):
    """(steps in flight, dynamic shared memory, copied by the warp) of reduce_lanes (LaneRing):
    _lane_ring's steps of `per_step` packs a thread in a ring of one step more, fewer where that
    would leave fewer blocks resident than the launch bounds allow; none shared where they stay
    in registers."""
    depth, warp = _lane_ring(lanes, pack_bytes, tuning)
    if depth == 0 or pack_bytes < 4:
        return depth, 0, warp
    step = per_step * tuning.reduce.threads * pack_bytes
    most = block_share(limits, _resident(itemsize, tuning.reduce.threads)) // step - 1
    stages = max(1, min(depth, most, 7))
    return stages, (stages + 1) * step, warp


def lanes_shape(packs, tuning, most=None, least=1):
    """(lanes, packs a lane, rows at a time) of a row of `packs` packs: `least` packs a lane up
    to a warp, then whole warps of up to `most` (reduce_lane_max_packs) packs a lane (None past
    them); rows at a time for reduce_lane_loads loads a lane in flight."""
    most = most or tuning.reduce.lane_max_packs
    if packs > 32 * most:
        return None
    lanes = min(32, pow2_at_least(math.ceil(packs / min(least, most))))
    per = pow2_at_least(math.ceil(packs / lanes))
    return lanes, per, max(1, tuning.reduce.lane_loads // per)


@dataclass(frozen=True)
class ChunksPlan(Plan):
    method = "reduce_chunks"
    chunk: int  # elements a chunk, a multiple of vec
    chunks: int  # chunks a row
    lines: int  # rows

    def args(self, layout):
        return (layout.outer, layout.n, layout.xs[0], self.chunk, self.chunks)

    def workspace(self):
        return _workspace(self.lines, self.chunks, 1)


@dataclass(frozen=True)
class ColumnsPlan(Plan):
    method = "reduce_columns"
    width: int  # packs a strip
    steps: int  # steps a thread loads before it uses any
    chunk: int  # steps of the axis a chunk
    chunks: int  # chunks a strip
    lines: int  # strips

    def args(self, layout):
        (xso, xsn) = layout.xs
        return (layout.outer, layout.n, layout.inner, xso, xsn, self.chunk, self.chunks, self.width)

    @property
    def template(self):
        return (self.vec, self.steps)

    def workspace(self):
        return _workspace(self.lines, self.chunks, self.width * self.vec)


def _chunks(length, lines, least, most, itemsize, limits, tuning):
    """Chunks of a line of `length` units: enough (line, chunk) items for reduce_item_waves
    full residencies and no partial last one, chunks of at least `least` and at most `most`
    units."""
    resident = limits.sm_count * _resident(itemsize, tuning.reduce.threads)
    wanted = math.ceil(tuning.reduce.item_waves * resident / lines)
    chunks = max(math.ceil(length / most), min(wanted, math.ceil(length / least)), 1)
    # as many more as fill the last wave (64 lines of 17 chunks in 528 slots: 24 chunks)
    filled = math.ceil(lines * chunks / resident) * resident // lines
    return max(chunks, min(filled, math.ceil(length / least)))


def plan(layout, itemsize, address, limits, tuning) -> Plan | None:
    """The reduction's plan for `layout` (x's strides in both), x at `address` (modulo 16 is
    enough); None where no kernel takes the strides (the caller copies the reduced axes last)."""
    if layout is None:
        return None
    t, threads = tuning, tuning.reduce.threads
    if layout.rows:
        rows, n = layout.outer, layout.n
        vec = vector_width(itemsize, (address,), (layout.xs[0],))
        shape = lanes_shape(math.ceil(n / vec), t, least=t.reduce.lane_min_packs[itemsize])
        warps = limits.sm_count * _resident(itemsize, threads) * threads // 32
        if shape is None and (rows >= t.reduce.warp_rows_waves * warps
                              and n * itemsize <= t.reduce.warp_max_bytes):
            shape = (32, t.reduce.lane_max_packs, 1)  # a warp a row, in rounds
        if shape is not None:
            lanes, per, at_once = shape
            grid = _grid(math.ceil(rows * lanes / (threads * at_once)), limits, t)
            stages, smem, warp = lane_stages(lanes, itemsize * vec, per * at_once, itemsize, limits, t)
            return LanesPlan(vec, grid, threads, smem, lanes=lanes, packs=per, at_once=at_once,
                             stages=stages, warp=warp)
        step = threads * vec  # elements a block's batch round covers, per pack a thread
        chunks = _chunks(n, rows, step * t.reduce.min_chunk_steps, t.reduce.max_chunk_bytes // itemsize,
                         itemsize, limits, t)
        chunk = math.ceil(math.ceil(n / chunks) / vec) * vec
        chunks = math.ceil(n / chunk)
        return ChunksPlan(vec, _grid(rows * chunks, limits, t), threads, 0, chunk=chunk,
                          chunks=chunks, lines=rows)
    outer, n, inner = layout.outer, layout.n, layout.inner
    vec = min(vector_width(itemsize, (address,), layout.xs + (inner,)), t.reduce.columns_max_vec)
    width, lines = strips(outer, inner, vec, threads, t.reduce.columns_strip_cols)
    lanes, steps = threads // width, t.reduce.column_steps
    chunks = _chunks(n, lines, lanes * max(steps, t.reduce.min_chunk_steps), math.inf, itemsize,
                     limits, t)
    chunk = math.ceil(n / chunks)
    chunks = math.ceil(n / chunk)
    return ColumnsPlan(vec, _grid(lines * chunks, limits, t), threads, 0, width=width, steps=steps,
                       chunk=chunk, chunks=chunks, lines=lines)


def templates(itemsize, tuning):
    """Every (kernel, template arguments) of the family for one element size (reduce_lanes with
    the steps in flight that a device of enough shared memory takes)."""
    for vec in vecs(itemsize):
        shapes = {lanes_shape(packs, tuning, least=tuning.reduce.lane_min_packs[itemsize])
                  for packs in range(1, 32 * tuning.reduce.lane_max_packs + 1)}
        for lanes, per, at_once in sorted(shapes):
            depth, warp = _lane_ring(lanes, itemsize * vec, tuning)
            yield "reduce_lanes", (vec, lanes, per, at_once, depth, int(warp))
        yield "reduce_chunks", (vec,)
        if vec <= tuning.reduce.columns_max_vec:
            yield "reduce_columns", (vec, tuning.reduce.column_steps)
