"""The registers family: a row in registers. Short rows (at most a warp's: shuffles only) loop
a block's lane groups over rows; wide rows take a block of whole warps a row. Rows off 16-byte
boundaries whose x and y lie alike may take their spans' 16-byte packs (short rows then run the
short_spans kernel; wide rows choose in the kernel). 1 read + 1 write."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .common import (MAX_BLOCKS_PER_SM, MAX_GRID, THREADS_PER_SM, Plan, looped_grid, pow2_at_least,
                     short_width, span_shape, vecs)


@dataclass(frozen=True)
class RegistersPlan(Plan):
    method = "registers"
    per_lane: int  # packs a lane holds
    batch: int  # rows a lane group takes an iteration; 0: a wide row, a block a row
    lanes: int  # lanes a row
    spans: bool  # packs of the rows' aligned spans

    @property
    def kernel(self) -> str:
        return "short_spans" if self.spans and self.batch else "registers"

    @property
    def template(self):
        # short rows name their lanes at compile time (their shuffles unroll); wide rows at run time
        return (self.vec, self.per_lane, self.batch, self.lanes if self.batch else 0)

    def args(self, layout):
        return (*super().args(layout), self.lanes)


def short_cols(itemsize, tuning):
    """The longest short row the policy takes: by registers_max_cols and registers_max_bytes,
    at most a warp's."""
    most = max(tuning.registers.max_cols, tuning.registers.max_bytes // itemsize)
    return min(tuning.registers.short_cols, most)


def shape(cols, vec, itemsize, tuning):
    """(lanes per row, packs per lane, rows per lane group: 0 for rows of several warps), or
    None when the row does not fit registers_max_lanes lanes of registers_wide_values values."""
    packs = math.ceil(cols / vec)
    if cols <= short_cols(itemsize, tuning):
        width = short_width(packs)
        per_lane = pow2_at_least(math.ceil(packs / width))
        return width, per_lane, short_batch(per_lane, vec, itemsize, tuning)
    per_lane = tuning.registers.wide_values // vec
    width = 32 * math.ceil(packs / (32 * per_lane))  # whole warps
    return (width, per_lane, 0) if width <= tuning.registers.max_lanes else None


def short_batch(per_lane, vec, itemsize, tuning):
    """Rows per lane group per iteration for short rows: about warp_lane_values elements per
    lane (float64 rows of one pack a lane: warp_lane_values_float64_one_pack), at most
    warp_max_rows."""
    one_pack = itemsize == 8 and per_lane == 1
    values = tuning.warp.lane_values_float64_one_pack if one_pack else tuning.warp.lane_values
    batch = 1
    while batch < tuning.warp.max_rows and 2 * batch * per_lane * vec <= values:
        batch *= 2
    return batch


def default(c) -> bool:
    """Short rows, and the longer rows whose wide rows won (see the records cited by each
    registers_wide_* field)."""
    t, cols, itemsize, vec = c.tuning, c.cols, c.itemsize, c.vec
    if cols <= short_cols(itemsize, t):
        return True
    if itemsize > 4:
        return False
    if c.span:
        return cols * itemsize <= t.registers.wide_span_max_bytes[itemsize]
    if vec * itemsize < 16:
        return vec <= t.registers.wide_narrow_vec and cols <= t.registers.wide_narrow_max_cols
    if cols * itemsize > t.registers.wide_max_bytes:
        return False
    lanes = shape(cols, vec, itemsize, t)[0]
    resident = min(MAX_BLOCKS_PER_SM, THREADS_PER_SM // lanes)
    return resident * cols * itemsize >= t.registers.wide_min_resident_bytes


def masked(c) -> bool:
    """A masking load's rows (their keep bytes held too, Tuning.for_load), wherever they fit up
    to masked_registers_max_cols."""
    t = c.tuning
    return c.cols <= t.masked.registers_max_cols and shape(c.cols, c.vec, c.itemsize, t) is not None


def _spanned(c, batch):
    """The shape of the rows in their spans' packs, or None where they keep their own packs:
    short rows take spans only past registers_short_span_min_bytes, from small packs."""
    t, itemsize = c.tuning, c.itemsize
    spanned = c.span and shape(*reversed(span_shape(c.cols, itemsize)), itemsize, t)
    if not spanned or not batch:
        return spanned or None
    pack, stays_short = c.vec * itemsize, spanned[2] > 0
    if c.row_bytes <= t.registers.short_span_min_bytes or not (
            pack <= t.registers.short_span_max_pack or
            (pack <= t.registers.short_span_max_short_pack and itemsize <= 4 and stays_short)):
        return None
    return spanned


def plan(c, forced=False) -> RegistersPlan:
    t, vec = c.tuning, c.vec
    own = shape(c.cols, vec, c.itemsize, t)
    if own is None:
        raise ValueError(
            f"method='registers' holds rows of at most {t.registers.max_lanes} lanes x "
            f"{t.registers.wide_values} values; {c.cols} elements in packs of {vec} do not fit"
        )
    spanned = _spanned(c, own[2])
    if spanned:
        vec = 16 // c.itemsize
    width, per_lane, batch = spanned or own
    if batch:
        float32_packs = c.itemsize == 4 and vec == 4 and not spanned
        waves = t.registers.float32_waves if float32_packs else t.warp.waves
        block = t.warp.block
        grid = looped_grid(c.rows, block // width * batch, block, c.limits, waves)
    else:
        block, grid = width, min(MAX_GRID, c.rows)
    return RegistersPlan(vec, grid, block, 0, per_lane=per_lane, batch=batch, lanes=width,
                         spans=bool(spanned))


def templates(itemsize, clusters, tuning):
    for vec in vecs(itemsize):
        for width in (1 << k for k in range(6)):  # short rows: a pack per lane below 32 lanes
            per_lane = 1
            while per_lane * vec <= (short_cols(itemsize, tuning) // 32 if width == 32 else vec):
                template = (vec, per_lane, short_batch(per_lane, vec, itemsize, tuning), width)
                yield "registers", template
                if vec * itemsize == 16:  # and in their spans
                    yield "short_spans", template
                per_lane *= 2
        yield "registers", (vec, tuning.registers.wide_values // vec, 0, 0)  # several warps
