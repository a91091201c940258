"""THE dispatch policy: (layout, dtype, addresses, device limits) -> a plan of kernel launches.

Read top-down, the choice is::

    rows of at most WARP_MAX_COLS elements      -> "warp"    row in registers, 1 read + 1 write
    rows whose bytes fit one block's shared mem  -> "block"   row in shared memory, 1 read + 1 write
    any other rows                               -> "online"  (m, d) per chunk, 2 reads + 1 write
    a strided reduced axis, inner run >= COLUMNS_MIN_INNER
                                                 -> "columns" (m, d) per chunk of the axis,
                                                              2 reads + 1 write, no transpose
    a strided reduced axis, short inner run      -> contiguous copy, then the row policy

A forced ``method`` skips the choice; a method that cannot run on the input (a row too long for
registers or shared memory) raises ``ValueError`` naming the limit. Beside every number: the
measurement that chose it (BENCHMARKS.md has the runs), or "none yet" where it is a first value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

METHODS = ("warp", "block", "online", "columns")

# Register-resident rows: at most 32 values of the compute type per lane (32 lanes per row).
# Evidence: register budget (32 values + ~30 of state keeps 16 warps per SM resident); not tuned.
WARP_MAX_PER_LANE = 32
WARP_MAX_COLS = 32 * WARP_MAX_PER_LANE
WARP_BLOCK = 128
# Short rows: each lane group takes R rows per iteration so every lane has about
# WARP_LANE_BYTES of loads in flight. Evidence: H200, 2026-11-30, 2**26 float32: with one 16-byte
# pack per lane, widths 64 and 128 ran at 0.69 and 0.64 of copy against 0.96 at 256 (2 packs);
# with 64 bytes per lane, 0.95 and 0.94.
WARP_LANE_BYTES = 64
WARP_MAX_ROWS = 4
# Grid: at most WARP_WAVES full residencies of WARP_BLOCK-thread blocks; warps loop over rows.
WARP_WAVES = 4

# Shared-memory rows: threads per block by row bytes, first row that fits wins.
# Evidence: none yet, a first version (about 8 to 16 packs of 16 bytes per thread).
BLOCK_THREADS = ((16 * 1024, 128), (32 * 1024, 256), (64 * 1024, 512), (math.inf, 1024))
BLOCK_SCRATCH = 32 * 8  # bytes ahead of the row: 32 doubles of reduction scratch

# Online rows: chunk length from the row length alone (never from the batch), at least
# ONLINE_MIN_CHUNK elements and at most ONLINE_MAX_CHUNKS chunks per row. Evidence: H200,
# 2026-11-30: 16 Ki-element chunks (one batch of loads per thread, then a block merge) ran rows
# of 65 Ki..1 Mi at 0.38 of copy (float32) and 0.16 (bfloat16); 64 Ki chunks: 0.55 and 0.22
# (0.41 for bfloat16 once its stores were whole 16-byte stores).
ONLINE_MIN_CHUNK = 64 * 1024
ONLINE_MAX_CHUNKS = 4096
ONLINE_THREADS = 512

# Strided reduced axis: the columns kernels need enough contiguous inner elements to coalesce;
# below this a transposing copy plus a row kernel is cheaper. Evidence: none yet (32 float32 keep
# whole 32-byte sectors per access). The reduced axis is cut into chunks of at least
# COLUMNS_MIN_CHUNK steps, at most COLUMNS_MAX_CHUNKS of them, from n alone: enough threads
# (inner packs x chunks) to fill the GPU when the inner axis is only a few thousand wide. The
# partials cost 16 bytes per chunk per column: at most a quarter byte per element.
COLUMNS_MIN_INNER = 32
COLUMNS_MIN_CHUNK = 64
COLUMNS_MAX_CHUNKS = 64
COLUMNS_THREADS = 256
# At most 4 elements per thread per step (16 bytes of float32, 8 of half types). Evidence: H200,
# 2026-11-30, axis 0 of 4096 x 16384 and 16384 x 4096: with 16-byte packs and 256-step chunks
# bfloat16 ran 128 blocks of 256 threads (12% occupancy, 0.15-0.19 of copy); with 8-byte packs
# for every dtype and chunks down to 64 steps (up to 256 of them) float32 fell from 0.53 / 0.48
# to 0.46 / 0.35 while bfloat16 rose to 0.27 / 0.20; 4-element packs and at most 64 chunks:
# float32 0.49 / 0.48, bfloat16 0.27 / 0.22.
COLUMNS_MAX_VEC = 4

MAX_GRID = 2**31 - 1


@dataclass(frozen=True)
class Limits:
    """What the policy reads off a device."""

    sm_count: int
    smem_per_block: int  # opt-in dynamic shared memory per block, bytes
    capability: tuple[int, int]


@lru_cache(maxsize=None)
def device_limits(device_id: int) -> Limits:
    import cupy

    device = cupy.cuda.Device(device_id)
    attrs = device.attributes
    major, minor = divmod(int(device.compute_capability), 10)
    return Limits(
        sm_count=attrs["MultiProcessorCount"],
        smem_per_block=attrs["MaxSharedMemoryPerBlockOptin"],
        capability=(major, minor),
    )


@dataclass(frozen=True)
class Launch:
    kernel: str  # name in kernels/, e.g. "softmax_warp"
    template: tuple[int, ...]  # template arguments after the element type
    grid: int
    block: int
    smem: int = 0


@dataclass(frozen=True)
class Plan:
    method: str
    vec: int  # elements per vector access
    launches: tuple[Launch, ...]
    chunk: int = 0  # online, columns: elements of the reduced axis per chunk
    chunks: int = 0  # online, columns: chunks per slice
    width: int = 0  # warp: lanes per row


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def vector_width(itemsize: int, addresses, strides) -> int:
    """The widest power-of-two pack, at most 16 bytes, that every address and stride allows."""
    v = 16 // itemsize
    while v > 1 and (any(a % (v * itemsize) for a in addresses) or any(s % v for s in strides)):
        v //= 2
    return v


def templates(itemsize: int):
    """Every (kernel, template arguments) this policy can emit for one element size."""
    for vec in (1 << k for k in range((16 // itemsize).bit_length())):
        per_lane = 1
        while per_lane * vec <= WARP_MAX_PER_LANE:
            for rows in (1, 2, 4):
                if rows <= WARP_MAX_ROWS and rows * per_lane * vec <= WARP_MAX_PER_LANE:
                    yield "softmax_warp", (vec, per_lane, rows)
            per_lane *= 2
        for kernel in ("softmax_block", "online_partials", "online_finish", "columns_partials",
                       "columns_finish"):
            yield kernel, (vec,)
    yield "columns_merge", ()


def fits_block(cols: int, itemsize: int, vec: int, limits: Limits) -> bool:
    return BLOCK_SCRATCH + math.ceil(cols / vec) * vec * itemsize <= limits.smem_per_block


def _warp(rows, cols, itemsize, vec, limits) -> Plan:
    packs = math.ceil(cols / vec)
    width = min(32, _pow2_at_least(packs))
    per_lane = _pow2_at_least(math.ceil(packs / width))
    batch = 1
    while (batch < WARP_MAX_ROWS and 2 * batch * per_lane * vec * itemsize <= WARP_LANE_BYTES
           and 2 * batch * per_lane * vec <= WARP_MAX_PER_LANE):
        batch *= 2
    rows_per_block = WARP_BLOCK // width * batch
    resident = limits.sm_count * (2048 // WARP_BLOCK) * WARP_WAVES
    grid = min(MAX_GRID, resident, math.ceil(rows / rows_per_block))
    launch = Launch("softmax_warp", (vec, per_lane, batch), grid, WARP_BLOCK)
    return Plan("warp", vec, (launch,), width=width)


def _block(rows, cols, itemsize, vec) -> Plan:
    row_bytes = math.ceil(cols / vec) * vec * itemsize
    threads = next(t for limit, t in BLOCK_THREADS if row_bytes <= limit)
    smem = BLOCK_SCRATCH + row_bytes
    return Plan("block", vec, (Launch("softmax_block", (vec,), min(MAX_GRID, rows), threads, smem),))


def _online(rows, cols, vec) -> Plan:
    chunk = max(ONLINE_MIN_CHUNK, math.ceil(cols / ONLINE_MAX_CHUNKS))
    chunk = math.ceil(chunk / vec) * vec
    chunks = math.ceil(cols / chunk)
    grid = min(MAX_GRID, rows * chunks)
    return Plan(
        "online",
        vec,
        (
            Launch("online_partials", (vec,), grid, ONLINE_THREADS),
            Launch("online_finish", (vec,), grid, ONLINE_THREADS),
        ),
        chunk=chunk,
        chunks=chunks,
    )


def _grid(threads_needed, block):
    return min(MAX_GRID, math.ceil(threads_needed / block))


def _columns(outer, n, inner, vec) -> Plan:
    chunk = max(COLUMNS_MIN_CHUNK, math.ceil(n / COLUMNS_MAX_CHUNKS))
    chunks = math.ceil(n / chunk)
    walkers = _grid(outer * chunks * math.ceil(inner / vec), COLUMNS_THREADS)
    merge = _grid(outer * inner, COLUMNS_THREADS)
    return Plan(
        "columns",
        vec,
        (
            Launch("columns_partials", (vec,), walkers, COLUMNS_THREADS),
            Launch("columns_merge", (), merge, COLUMNS_THREADS),
            Launch("columns_finish", (vec,), walkers, COLUMNS_THREADS),
        ),
        chunk=chunk,
        chunks=chunks,
    )


def plan_rows(rows: int, cols: int, itemsize: int, vec: int, limits: Limits, method=None) -> Plan:
    """Plan for ``rows`` contiguous rows of ``cols`` elements, rows ``vec``-aligned."""
    if method in (None, "warp") and cols <= WARP_MAX_COLS:
        return _warp(rows, cols, itemsize, vec, limits)
    if method == "warp":
        raise ValueError(f"method='warp' holds rows of at most {WARP_MAX_COLS} elements, got {cols}")
    if method in (None, "block") and fits_block(cols, itemsize, vec, limits):
        return _block(rows, cols, itemsize, vec)
    if method == "block":
        raise ValueError(
            f"method='block' needs the row in shared memory: {cols} elements of {itemsize} bytes "
            f"exceed the device's {limits.smem_per_block} bytes per block"
        )
    return _online(rows, cols, vec)


def plan(layout, itemsize: int, addresses, limits: Limits, method=None) -> Plan | None:
    """The whole policy for one call. ``layout`` comes from ``_layout.collapse`` (None when the
    strides allow no [outer][n][inner] view); ``addresses`` are the input's and output's data
    addresses. None means: make a contiguous copy with the reduced axes last, then plan again."""
    if method not in (None, *METHODS):
        raise ValueError(f"method must be None or one of {METHODS}, got {method!r}")
    if layout is None:
        return None
    if method == "columns" or (not layout.rows and method is None):
        if method is None and layout.inner < COLUMNS_MIN_INNER:
            return None
        vec = min(vector_width(itemsize, addresses, layout.xs + layout.ys), COLUMNS_MAX_VEC)
        return _columns(layout.outer, layout.n, layout.inner, vec)
    if not layout.rows:
        return None
    vec = vector_width(itemsize, addresses, (layout.xs[0], layout.ys[0]))
    return plan_rows(layout.outer, layout.n, itemsize, vec, limits, method)
