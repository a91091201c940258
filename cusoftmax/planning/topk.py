"""The topk family: softmax and top-k in one read of each row (kernels/topk.cu), for float16,
bfloat16 and float32 rows, k up to topk_max_k. Its order of choice:

    kernel       when
    topk_lanes   rows of at most 32 * topk_lane_elements elements and k <= topk_lane_max_k
                 (<= 32): a row in W lanes of a warp, topk_lane_elements each (W a power of
                 two), k rounds of the group's least key
    topk_block   any other row: blocks stream chunks of it (several a row where rows are fewer
                 than topk_items_per_sm an SM), each warp keeping its K best, merged per row;
                 16-byte packs where x allows them, else elements one at a time
    (none)       k past topk_max_k, or rows past topk_max_cols: the caller's array operations

Rows are contiguous along the axis, row r at r * ldx; the outputs are (rows, k) values and int64
positions, C-contiguous.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .common import MAX_GRID, THREADS_PER_SM, Plan, pow2_at_least, vector_width

KERNELS = ("topk_lanes", "topk_block")
TOPK_TYPES = ("float16", "bfloat16", "float32")  # computed in float; float64 by array operations
BLOCK_CAPACITIES = (32, 64, 256)  # K of topk_block: each warp's list


def _capacity(k, choices):
    return next((c for c in choices if k <= c), None)


def lane_capacity(lanes, per):
    """K of topk_lanes for a group of `lanes` lanes of `per` elements: at most 32 (a lane's
    chosen keys are K / lanes registers)."""
    return min(32, lanes * per)


@dataclass(frozen=True)
class TopkPlan(Plan):
    """The launch for one call's rows: their count, length and stride, k, renormalize."""

    outputs = 2  # values, positions
    rows: int
    n: int
    ldx: int
    k: int
    renorm: bool


@dataclass(frozen=True)
class LanesPlan(TopkPlan):
    method = "topk_lanes"
    lanes: int
    per: int  # elements a lane

    @property
    def capacity(self):
        """K: the most keys the group may choose (a row's, up to topk_lane_max_k)."""
        return lane_capacity(self.lanes, self.per)

    @property
    def template(self):
        return (self.lanes, self.per, self.capacity)

    def args(self, layout=None):
        return (self.rows, self.n, self.ldx, self.k, int(self.renorm))


@dataclass(frozen=True)
class BlockPlan(TopkPlan):
    method = "topk_block"
    capacity: int  # K
    chunk: int  # elements a chunk, a multiple of vec
    chunks: int  # chunks a row

    @property
    def template(self):
        return (self.vec, self.capacity)

    def args(self, layout=None):
        return (self.rows, self.n, self.ldx, self.k, int(self.renorm), self.chunk, self.chunks)

    def workspace(self):
        """A count per row, then each chunk's K keys and (m, d); 8 bytes, nothing zeroed, where
        rows are whole chunks."""
        if self.chunks == 1:
            return 8, 0
        head = (4 * self.rows + 7) // 8 * 8
        return head + self.rows * self.chunks * (8 * self.capacity + 16), head


def plan(rows, n, ldx, k, renorm, itemsize, address, limits, tuning) -> Plan | None:
    """The plan for `rows` rows of `n` elements at stride `ldx` (x at `address`), k of each; None
    where no kernel takes it."""
    t, threads = tuning, tuning.topk.threads
    # K of topk_block: a list that holds k, at most a key a thread in its final writes
    capacity = _capacity(k, [c for c in BLOCK_CAPACITIES if c <= threads])
    if k > t.topk.max_k or capacity is None or n > t.topk.max_cols or rows * n == 0:
        return None
    resident = limits.sm_count * (THREADS_PER_SM // threads)
    if n <= 32 * t.topk.lane_elements and k <= min(32, t.topk.lane_max_k):
        lanes = min(32, pow2_at_least(math.ceil(n / t.topk.lane_elements)))
        grid = min(MAX_GRID, resident * t.topk.waves, math.ceil(rows * lanes / threads))
        return LanesPlan(1, max(1, grid), threads, 0, rows=rows, n=n, ldx=ldx, k=k, renorm=renorm,
                         lanes=lanes, per=t.topk.lane_elements)
    # The widest pack where x allows it, else elements one at a time.
    vec = vector_width(itemsize, (address,), (ldx,))
    vec = vec if vec * itemsize == 16 else 1
    # Chunks for topk_items_per_sm (row, chunk) items an SM, of at least topk_min_chunk
    # elements, at most topk_max_chunks a row (the last block merges them all).
    wanted = math.ceil(t.topk.items_per_sm * limits.sm_count / rows)
    chunks = max(1, min(wanted, t.topk.max_chunks, n // t.topk.min_chunk))
    chunk = math.ceil(math.ceil(n / chunks) / vec) * vec
    chunks = math.ceil(n / chunk)
    grid = min(MAX_GRID, resident * t.topk.waves, rows * chunks)
    return BlockPlan(vec, grid, threads, 0, rows=rows, n=n, ldx=ldx, k=k, renorm=renorm,
                     capacity=capacity, chunk=chunk, chunks=chunks)


def templates(itemsize, tuning):
    """Every (kernel, template arguments) of the family for one element size."""
    for lanes in (1, 2, 4, 8, 16, 32):
        per = tuning.topk.lane_elements
        yield "topk_lanes", (lanes, per, lane_capacity(lanes, per))
    for vec in (1, 16 // itemsize):
        for capacity in BLOCK_CAPACITIES:
            if capacity > tuning.topk.threads:
                continue
            yield "topk_block", (vec, capacity)
