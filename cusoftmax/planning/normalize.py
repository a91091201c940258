"""The normalize family: softmax or log_softmax of contiguous rows from each row's given max and
constant (kernels/normalize.cu): one read and one write, for a state merged elsewhere (Dask's
chunks of a row). Its order of choice is one kernel:

    kernel      when
    normalize   any rows of contiguous elements (row r at r * ldx in x, r * ldy in y); blocks of
                normalize_threads take (row, piece) items, pieces of about normalize_piece_bytes
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .common import MAX_GRID, THREADS_PER_SM, Plan, vecs, vector_width

@dataclass(frozen=True)
class NormalizePlan(Plan):
    method = "normalize"
    inputs = 2  # x, then the rows' (m, k) pairs
    piece: int  # elements a (row, piece) item

    def args(self, layout):
        return (layout.outer, layout.n, layout.xs[0], layout.ys[0], self.piece)


def plan(layout, itemsize, addresses, limits, tuning) -> Plan | None:
    """The plan for ``layout``'s rows (x, y at `addresses`), or None where they are not rows of
    contiguous elements."""
    if layout is None or not layout.rows:
        return None
    t, threads = tuning, tuning.normalize.threads
    vec = vector_width(itemsize, addresses, (layout.xs[0], layout.ys[0]))
    step = threads * vec * t.walk.batch  # whole batches of walk_run
    piece = min(max(step, t.normalize.piece_bytes // itemsize // step * step),
                math.ceil(layout.n / step) * step)
    items = layout.outer * math.ceil(layout.n / piece)
    resident = limits.sm_count * (THREADS_PER_SM // threads)
    return NormalizePlan(vec, max(1, min(MAX_GRID, items, resident * t.normalize.waves)), threads, 0,
                         piece=piece)


def templates(itemsize, tuning):
    for vec in vecs(itemsize):
        yield "normalize", (vec,)
