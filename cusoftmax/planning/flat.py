"""The flat family: short rows that lie back to back off 16-byte boundaries, x's and y's alike
about them; each warp stages a run of consecutive rows in shared memory by 16-byte copies, W
lanes a row of E values each. 1 read + 1 write."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .common import Plan, looped_grid


@dataclass(frozen=True)
class FlatPlan(Plan):
    method = "flat"
    per_lane: int  # E: values a lane
    lanes: int  # W: lanes a row
    run: int  # rows a warp stages at once

    @property
    def template(self):
        return (self.per_lane, self.lanes)

    def args(self, layout):
        return (*super().args(layout), self.run)


def shape(cols, tuning):
    """(W, E) of flat rows of ``cols`` elements: the fewest lanes (a power of two) holding the
    row in at most flat_lane_values values a lane, else 32; E = ceil(cols / W)."""
    width = next(w for w in (1, 2, 4, 8, 16, 32)
                 if math.ceil(cols / w) <= tuning.flat.lane_values or w == 32)
    return width, math.ceil(cols / width)


def default(c) -> bool:
    return c.back_to_back and c.span and c.row_bytes <= c.tuning.flat.max_bytes.get(c.itemsize, 0)


def plan(c, forced=False) -> FlatPlan | None:
    """None where the rows are not back to back or x's and y's lie unlike (the caller copies)."""
    t, cols, itemsize = c.tuning, c.cols, c.itemsize
    if cols > t.flat.max_cols:
        raise ValueError(
            f"method='flat' holds rows of at most {t.flat.max_cols} elements (32 lanes of 32 "
            f"values); {cols} do not fit"
        )
    if not (c.back_to_back and c.alike):
        return None
    width, per_lane = shape(cols, t)
    groups = 32 // width
    run = max(1, t.flat.warp_bytes // (cols * itemsize) // groups) * groups
    wide = 16 // itemsize
    smem = t.flat.block // 32 * ((run * cols + 2 * wide - 2) // wide) * 16  # as softmax_flat's cap
    grid = looped_grid(c.rows, t.flat.block // 32 * run, t.flat.block, c.limits, t.warp.waves)
    return FlatPlan(wide, grid, t.flat.block, smem, per_lane=per_lane, lanes=width, run=run)


def templates(itemsize, clusters, tuning):
    """(E, W) of every row length the flat kernel takes (16-byte packs only)."""
    for width, per_lane in sorted({shape(cols, tuning) for cols in range(1, tuning.flat.max_cols + 1)}):
        yield "flat", (per_lane, width)
