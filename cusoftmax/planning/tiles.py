"""The tiles family: short rows staged per warp in shared memory, several rows a lane group.
1 read + 1 write."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .common import Plan, looped_grid, short_width, vecs


@dataclass(frozen=True)
class TilesPlan(Plan):
    method = "tiles"
    rows: int  # rows a lane group stages
    lanes: int  # lanes a row

    @property
    def template(self):
        return (self.vec, self.rows)

    def args(self, layout):
        return (*super().args(layout), self.lanes)


def default(c) -> bool:
    return c.row_bytes <= c.tuning.tiles.max_bytes


def plan(c, forced=False) -> TilesPlan:
    t, vec, itemsize = c.tuning, c.vec, c.itemsize
    packs = math.ceil(c.cols / vec)
    width = short_width(packs)
    group_bytes = 32 // width * packs * vec * itemsize  # one row per lane group of a warp
    warps = t.tiles.block // 32
    batch = max([r for r in t.tiles.rows if r * group_bytes <= t.tiles.warp_bytes], default=1)
    smem = warps * batch * group_bytes
    if smem > c.limits.smem_per_block:
        raise ValueError(
            f"method='tiles' stages {warps} warps' rows in shared memory: rows of "
            f"{c.cols} elements of {itemsize} bytes exceed the device's {c.limits.smem_per_block} "
            "bytes per block"
        )
    grid = looped_grid(c.rows, warps * 32 // width * batch, t.tiles.block, c.limits, t.warp.waves)
    return TilesPlan(vec, grid, t.tiles.block, smem, rows=batch, lanes=width)


def templates(itemsize, clusters, tuning):
    for vec in vecs(itemsize):
        for rows in tuning.tiles.rows:
            yield "tiles", (vec, rows)
