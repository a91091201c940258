"""THE policy: (layout, element size, addresses, device limits, tuning) -> a plan: one launch.

``ORDER`` below is the whole order of choice of the kernels that write every element (softmax,
log_softmax; the reductions to one value a slice, logsumexp, have their own in ``reduce.py``, and
the backward passes in ``vjp.py``, softmax with top-k in ``topk.py``, rows normalised from
given statistics in ``normalize.py``).
Each entry names a kernel family, the layouts it takes (contiguous rows, or a strided reduced
axis), when the default takes it and when it takes a masking load's rows (where=, the Masked
load: None for a family that cannot); the first entry that applies and whose planner returns a
plan wins (a planner returns None where its kernel cannot hold the case: the next entry takes
over). None at the end: the caller makes a contiguous copy with the reduced axes last and plans
again. A forced ``method`` runs that family's planner alone, which raises ValueError naming the
limit where its kernel cannot run. Every tuning value is a field of its family's slice of
``Tuning`` (``tuning.py``, with the records in docs/tuning/ that chose it).
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Callable, NamedTuple

from . import (block, cluster, columns, flat, grid, normalize, online, reduce, registers, slab, tiles,
               topk, vjp)
from .common import (EPILOGUES, FUSED_TYPES, LOAD_KERNELS, LOAD_SLOTS, LOADS, MAX_GRID, OPS,
                     PORTABLE_CLUSTER, REDUCTIONS, VJPS, Case, Limits, Plan, device_limits, ops_of,
                     vector_width)
from .tuning import TUNING, BySize, Tuning, cuda_defines

__all__ = ["EPILOGUES", "FUSED_TYPES", "LOAD_KERNELS", "LOAD_SLOTS", "LOADS", "METHODS", "ORDER",
           "OPS", "MAX_GRID", "PORTABLE_CLUSTER", "REDUCTIONS", "TOPK_TYPES", "VJPS", "TUNING",
           "BySize", "Limits", "Plan", "Tuning", "active", "cuda_defines", "device_limits",
           "normalize_plan", "normalize_templates", "ops_of", "plan", "reduce_plan",
           "reduce_templates", "templates", "topk_plan", "topk_templates", "use", "vector_width",
           "vjp_plan", "vjp_templates"]
TOPK_TYPES = topk.TOPK_TYPES


class Entry(NamedTuple):
    method: str  # the family, as ``method=`` names it
    family: object  # the family's module: its plan(case, forced) and templates(itemsize, ...)
    strided: bool  # takes a strided reduced axis (forced: any layout), else contiguous rows
    when: Callable[[Case], bool]  # the default takes it
    masked: Callable[[Case], bool] | None = None  # ... a masking load's (LOAD_KERNELS)


ORDER = (
    # a strided reduced axis whose inner run is at least columns_min_inner:
    Entry("slab", slab, True, columns.default),  # held across a cluster, where one holds it
    Entry("columns", columns, True, columns.default),  # else two passes over the axis
    # contiguous rows:
    Entry("flat", flat, False, flat.default),  # short, back to back off 16-byte boundaries
    Entry("registers", registers, False, registers.default,  # short; wide where they won
          registers.masked),  # masked: up to masked_registers_max_cols
    Entry("tiles", tiles, False, tiles.default),  # up to tiles_max_bytes
    Entry("block", block, False, block.default,  # in a block, no cluster or <= cluster_min_bytes
          block.default),  # masked: the same, keep bytes staged too
    Entry("cluster", cluster, False, cluster.default,  # in a cluster, or spilling little
          cluster.default),  # masked: the same (a spill's plan: none)
    Entry("grid", grid, False, grid.default),  # float32 to grid_max_row_bytes, with clusters
    Entry("online", online, False, lambda case: True),  # any row
)
METHODS = ("registers", "flat", "tiles", "block", "cluster", "grid", "online", "columns", "slab")
_BY_METHOD = {entry.method: entry for entry in ORDER}


def plan(layout, itemsize: int, addresses, limits: Limits, method=None, tuning=None,
         op: str = "softmax", load: str = "Plain") -> Plan | None:
    """The plan for one call. ``layout`` comes from ``_layout.collapse`` (None when the strides
    allow no [outer][n][inner] view); ``addresses`` are the input's and output's data addresses
    (modulo 16 is enough); ``tuning``: the active one (``use``) by default; ``op``: the operation
    (``EPILOGUES``) and ``load`` (``LOADS``) change the kernels' epilogue and load functor, and
    the plan only through ``Tuning.for_load`` (the Masked load's rows: values a lane of their own).
    None means: make a contiguous copy with the reduced axes last, then plan again."""
    if method not in (None, *METHODS):
        raise ValueError(f"method must be None or one of {METHODS}, got {method!r}")
    t = (_active if tuning is None else tuning).for_load(load)
    return _computing(op, load, _choose(layout, itemsize, addresses, limits, method, t, load))


def _computing(op: str, load: str, chosen: Plan | None) -> Plan | None:
    """The plan with the operation's load functor and epilogue op (every family's planner plans
    for the launch alone); None where the load needs a kernel of LOAD_KERNELS and the plan's is
    not one."""
    ops = ops_of(op, load)
    if chosen is None or chosen.ops == ops:
        return chosen
    if load in LOAD_KERNELS and chosen.kernel not in LOAD_KERNELS[load]:
        return None
    return dataclasses.replace(chosen, ops=ops)


def _choose(layout, itemsize, addresses, limits, method, tuning, load="Plain"):
    if layout is None:
        return None
    case = Case(layout, itemsize, addresses, limits, tuning, load)
    if method is not None:
        entry = _BY_METHOD[method]
        return entry.family.plan(case, forced=True) if entry.strided or layout.rows else None
    placed = load in LOAD_KERNELS
    for entry in ORDER:
        when = entry.masked if placed else entry.when
        if entry.strided != layout.rows and when is not None and when(case):
            chosen = entry.family.plan(case)
            if chosen is not None:
                return chosen
    return None


def reduce_plan(layout, itemsize: int, address: int, limits: Limits, tuning=None,
                op: str = "logsumexp", load: str = "Plain") -> Plan | None:
    """The plan of a reduction of each slice to one value (``op``, one of ``REDUCTIONS``): the
    reduce family's own order of choice (``reduce.py``); ``layout`` from ``_layout.collapse``
    with x's strides for both arrays. None: copy the reduced axes last and plan again."""
    t = _active if tuning is None else tuning
    return _computing(op, load, reduce.plan(layout, itemsize, address, limits, t))


def reduce_templates(itemsize: int, tuning: Tuning = TUNING):
    """Every (kernel, template arguments) of the reduce family for one element size."""
    yield from reduce.templates(itemsize, tuning)


def vjp_plan(layout, itemsize: int, addresses, limits: Limits, tuning=None,
             op: str = "softmax_vjp") -> Plan | None:
    """The plan of a backward pass (``op``, one of ``VJPS``) of y, dy and dx alike, ``layout``
    from ``_layout.collapse`` (the vjp family's own order, ``vjp.py``). None: copy the reduced
    axes last and contiguous, then plan again."""
    t = _active if tuning is None else tuning
    return _computing(op, "Plain", vjp.plan(layout, itemsize, addresses, limits, t))


def vjp_templates(itemsize: int, tuning: Tuning = TUNING):
    """Every (kernel, template arguments) of the vjp family for one element size."""
    yield from vjp.templates(itemsize, tuning)


def topk_plan(rows: int, n: int, ldx: int, k: int, renorm: bool, itemsize: int, address: int,
              limits: Limits, tuning=None, op: str = "softmax", load: str = "Plain") -> Plan | None:
    """The plan of ``softmax_topk`` over `rows` rows of `n` contiguous elements, row r at r *
    `ldx` (the topk family's own order, ``topk.py``); ``op``: softmax or log_softmax, the values'
    epilogue; ``load``: as ``plan``. None: the caller computes it by array operations."""
    t = _active if tuning is None else tuning
    return _computing(op, load, topk.plan(rows, n, ldx, k, renorm, itemsize, address, limits, t))


def normalize_plan(layout, itemsize: int, addresses, limits: Limits, tuning=None,
                   op: str = "softmax", load: str = "Plain") -> Plan | None:
    """The plan of softmax or log_softmax (``op``) of rows from their given max and constant
    (the normalize family, ``normalize.py``); None where ``layout`` is not contiguous rows."""
    t = _active if tuning is None else tuning
    return _computing(op, load, normalize.plan(layout, itemsize, addresses, limits, t))


def normalize_templates(itemsize: int, tuning: Tuning = TUNING):
    """Every (kernel, template arguments) of the normalize family for one element size."""
    yield from normalize.templates(itemsize, tuning)


def topk_templates(itemsize: int, tuning: Tuning = TUNING):
    """Every (kernel, template arguments) of the topk family for one element size."""
    yield from topk.templates(itemsize, tuning)


def templates(itemsize: int, clusters: bool = True, tuning: Tuning = TUNING, load: str = "Plain"):
    """Every (kernel, template arguments) the policy can emit for one element size
    (``clusters``: include the cluster kernels, which need sm_90) and load functor."""
    planned = tuning.for_load(load)
    for entry in ORDER:
        yield from entry.family.templates(itemsize, clusters, planned)


_active = TUNING


def active() -> Tuning:
    """The tuning plans are made with (the plan and kernel caches are keyed by it)."""
    return _active


@contextmanager
def use(tuning: Tuning):
    """Plan with ``tuning`` inside the block (benchmarks of a variant)."""
    global _active
    previous, _active = _active, tuning
    try:
        yield tuning
    finally:
        _active = previous
