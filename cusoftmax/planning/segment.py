"""The segment family: softmax, log_softmax and logsumexp over segments of rows
(kernels/segment.cu). Rows of ``cols`` contiguous elements, sorted ids or CSR offsets. Its order
of choice is one set of three launches:

    kernel          when
    segment_tiles   (softmax, log_softmax, logsumexp, the two VJPs)
                    rows of at most max(COLS) elements, x 16-byte aligned, ids or offsets int32
                    or int64: tiles of segment_threads * rows; a thread holds `rows` rows of
                    COLS (1 or 8) columns, 32 bytes of x at the full width
    segment_fold    after it, a block a tile: the totals of segments that cross tiles
    segment_fixup   after it (softmax, log_softmax), a block a tile: their rows

Anything else (more columns, where=, an array scale) is computed by the host (``_segment``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .common import Plan

COLS = (1, 8)  # the kernels' row widths: one element, or up to 8 (the rest left idle)
ID_TYPES = {"int32": "int", "int64": "long long"}
EPILOGUES = {"segment_softmax": "SegmentForward<csm::Softmax>",
             "segment_log_softmax": "SegmentForward<csm::LogSoftmax>",
             "segment_logsumexp": "SegmentForward<csm::LogSumExp>",
             "segment_softmax_vjp": "SegmentBackward<csm::SoftmaxVjp>",
             "segment_log_softmax_vjp": "SegmentBackward<csm::LogSoftmaxVjp>"}
# The element types of each op's kernels. The state (m, d) sums the largest term into d, so
# float64's log_softmax (its largest entry) and logsumexp would keep fewer bits than the host's
# (m, c, s) state: those go to the host (as FUSED_TYPES' float64 log_softmax).
_SIZES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
TYPES = {op: tuple(_SIZES)[:3] if op in ("segment_log_softmax", "segment_logsumexp")
         else tuple(_SIZES) for op in EPILOGUES}
STATE_WORDS = 2  # (m, d) a column in the compute type: SegmentState (SegmentSum: 1)
META_BYTES = 32  # meta[4] of long long a tile: SegmentWork


def rows_of(itemsize: int, cols: int, tuning) -> int:
    """Rows a thread: segment_thread_bytes of x at a width of `cols` (the kernel's COLS)."""
    return max(1, tuning.segment.thread_bytes // itemsize // cols)


def width(cols: int) -> int | None:
    """The kernels' COLS for rows of `cols` elements, or None past the widest."""
    return next((w for w in COLS if cols <= w), None)


@dataclass(frozen=True)
class SegmentPlan(Plan):
    """segment_tiles: x, g (dy; x again for a forward op) and the ids or offsets in, y, the
    workspace and the unsorted flag (one int32, zeroed) out."""

    method = "segment_tiles"
    inputs = 3
    outputs = 3
    id_type: str  # the C type of the ids or offsets
    width: int  # COLS
    rows: int  # ROWS
    n: int
    cols: int
    count: int  # segments
    offsets: bool

    @property
    def template(self):
        return (self.id_type, self.width, self.rows)

    def args(self, layout):
        return (self.n, self.cols, self.count, int(self.offsets))


@dataclass(frozen=True)
class FoldPlan(Plan):
    """segment_fold: y (logsumexp's) and the workspace."""

    method = "segment_fold"
    inputs = 0
    outputs = 2
    width: int
    cols: int

    @property
    def template(self):
        return (self.width,)

    def args(self, layout):
        return (self.grid, self.cols)


@dataclass(frozen=True)
class FixupPlan(Plan):
    """segment_fixup: x, g and the workspace in, y out."""

    method = "segment_fixup"
    inputs = 3
    width: int
    rows: int
    n: int
    cols: int

    @property
    def template(self):
        return (self.width, self.rows)

    def args(self, layout):
        return (self.n, self.cols)


@dataclass(frozen=True)
class Segmented:
    """The launches of one call and its workspace's bytes."""

    tiles: SegmentPlan
    fold: FoldPlan
    fixup: FixupPlan | None
    workspace: int


def plan(op: str, n: int, cols: int, count: int, itemsize: int, id_dtype, offsets: bool,
         aligned: bool, tuning) -> Segmented | None:
    """The launches for `n` rows of `cols` elements of `itemsize` bytes in `count` segments given
    by ids (or `offsets`) of `id_dtype`; None where the kernels cannot take the case (the host
    computes it)."""
    w = width(cols)
    id_type = ID_TYPES.get(np.dtype(id_dtype).name)
    if (w is None or id_type is None or not aligned or n == 0 or cols == 0
            or itemsize not in _sizes(op)):
        return None
    threads, rows = tuning.segment.threads, rows_of(itemsize, w, tuning)
    tiles = math.ceil(n / (threads * rows))
    if tiles >= 2**31:
        return None
    ops = (EPILOGUES[op],)
    compute = 8 if itemsize == 8 else 4
    workspace = tiles * (META_BYTES + 4 * STATE_WORDS * w * compute)
    return Segmented(
        SegmentPlan(1, tiles, threads, 0, ops=ops, id_type=id_type, width=w, rows=rows, n=n,
                    cols=cols, count=count, offsets=offsets),
        FoldPlan(1, tiles, threads, 0, ops=ops, width=w, cols=cols),
        None if op == "segment_logsumexp" else
        FixupPlan(1, tiles, threads, 0, ops=ops, width=w, rows=rows, n=n, cols=cols),
        workspace)


def _sizes(op: str) -> set:
    return {_SIZES[t] for t in TYPES[op]}


def templates(itemsize: int, tuning):
    """Every (kernel, ops, template) the plans above can name for elements of `itemsize`."""
    for op, ep in EPILOGUES.items():
        if itemsize not in _sizes(op):
            continue
        for w in COLS:
            rows = rows_of(itemsize, w, tuning)
            for id_type in ID_TYPES.values():
                yield "segment_tiles", (ep,), (id_type, w, rows)
            yield "segment_fold", (ep,), (w,)
            if op != "segment_logsumexp":
                yield "segment_fixup", (ep,), (w, rows)
