"""What every family's planner shares: device limits and facts, the plan base, the case (one
call's layout as the planners read it), and the arithmetic of packs, slices and grids."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import ClassVar

from .tuning import Tuning

MAX_BLOCKS_PER_SM = 32  # resident blocks an SM, sm_80 to sm_90
THREADS_PER_SM = 2048  # resident threads an SM, sm_80 to sm_90
BLOCK_RESERVED = 1024  # shared memory the driver keeps per block
MAX_GRID = 2**31 - 1  # blocks of a one-dimensional grid
PORTABLE_CLUSTER = 8  # the largest cluster any GPU with clusters launches
OPS = ("Plain", "Softmax")  # (load functor, epilogue op) of the softmax forward
# The epilogue op (kernels/ops.cuh) of each operation the plans compute, and the element types
# it is fused for: float64 log_softmax is not (its largest entry is -log1p of the other terms'
# sum, which no kernel keeps apart from the max's own term; cusoftmax/_family.py computes it).
EPILOGUES = {"softmax": "Softmax", "log_softmax": "LogSoftmax", "logsumexp": "LogSumExp",
             "slice_state": "SliceState", "softmax_vjp": "SoftmaxVjp",
             "log_softmax_vjp": "LogSoftmaxVjp"}
FUSED_TYPES = {"softmax": ("float16", "bfloat16", "float32", "float64"),
               "log_softmax": ("float16", "bfloat16", "float32"),
               "logsumexp": ("float16", "bfloat16", "float32", "float64"),
               "slice_state": ("float16", "bfloat16", "float32", "float64"),
               "softmax_vjp": ("float16", "bfloat16", "float32", "float64"),
               "log_softmax_vjp": ("float16", "bfloat16", "float32", "float64")}
# One output a slice, the reduce family (reduce.py): logsumexp, and slice_state, each slice's
# (m, c, s) as three float64 (a partial that cusoftmax/_dask.py merges over chunks).
REDUCTIONS = ("logsumexp", "slice_state")
# The load functors (kernels/ops.cuh) and the operations each is fused for: "Scaled", s * x for a
# finite s > 0 (its bits the kernels' last argument), where the op applies to scale * x;
# "Masked", x where a bool mask (where=) is true, by the kernels of LOAD_KERNELS only.
LOADS = {"Plain": tuple(EPILOGUES), "Scaled": ("softmax", "log_softmax", "logsumexp", "slice_state"),
         "Masked": ("softmax", "log_softmax")}
# Loads that need each element's place, and the kernels that take them.
LOAD_KERNELS = {"Masked": ("registers", "short_spans", "block", "cluster")}
STAGED_SIDE = {"Masked": 1}  # bytes a load stages beside each element (block, cluster): a keep byte
LOAD_SLOTS = 4  # 8-byte launch slots of the largest load functor (Masked: a pointer, 3 strides)
VJPS = ("softmax_vjp", "log_softmax_vjp")  # dx from y and dy: the vjp family (vjp.py)


def ops_of(op: str, load: str = "Plain") -> tuple[str, str]:
    """(load functor, epilogue op) of an operation."""
    if op not in LOADS[load]:
        raise ValueError(f"{op} takes no {load} load")
    return (load, EPILOGUES[op])


@dataclass(frozen=True)
class Limits:
    """What the policy reads off a device."""

    sm_count: int
    smem_per_block: int  # opt-in dynamic shared memory per block, bytes
    capability: tuple[int, int]
    smem_per_sm: int  # shared memory per SM, bytes

    @property
    def clusters(self) -> bool:
        """Thread-block clusters with distributed shared memory (compute capability 9.0+)."""
        return self.capability >= (9, 0)

    @property
    def max_cluster(self) -> int:
        """The largest cluster the policy uses: 16 blocks on sm_90 (non-portable, allowed
        there), the portable 8 on later GPUs until measured, none before sm_90."""
        if not self.clusters:
            return 0
        return 16 if self.capability == (9, 0) else PORTABLE_CLUSTER


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
        smem_per_sm=attrs["MaxSharedMemoryPerMultiprocessor"],
    )


@dataclass(frozen=True)
class Plan:
    """One kernel launch. Each family's plan adds its own fields and says which kernel it runs
    (``kernel``), its template arguments after the element type (``template``) and its integer
    arguments after the array addresses for a layout (``args``)."""

    method: ClassVar[str]  # the family, as ``method=`` names it
    cooperative: ClassVar[bool] = False  # every block resident at once (see GridPlan.resident)
    inputs: ClassVar[int] = 1  # arrays the kernel reads, before those it writes
    outputs: ClassVar[int] = 1  # arrays the kernel writes
    vec: int  # elements per vector access
    grid: int
    block: int
    smem: int  # dynamic shared memory, bytes
    ops: tuple[str, str] = field(default=OPS, kw_only=True)  # (load functor, epilogue op)

    @property
    def kernel(self) -> str:
        return self.method

    @property
    def template(self) -> tuple[int, ...]:
        return (self.vec,)

    @property
    def cluster(self) -> int:
        """Blocks per thread-block cluster (1: no cluster)."""
        return 1

    def args(self, layout) -> tuple[int, ...]:
        return (layout.outer, layout.n, layout.xs[0], layout.ys[0])

    def workspace(self) -> tuple[int, int] | None:
        """(bytes of the kernel's global workspace, bytes at its start to zero), or None."""
        return None


@dataclass(frozen=True)
class ClusterLaunch(Plan):
    """A plan of a kernel launched in thread-block clusters: its template is (pack, size)."""

    size: int  # blocks a cluster

    @property
    def template(self):
        return (self.vec, self.size)

    @property
    def cluster(self):
        return self.size


def strided_args(layout) -> tuple[int, ...]:
    """The leading arguments of the kernels of a strided reduced axis: the view and its strides."""
    (xso, xsn), (yso, ysn) = layout.xs, layout.ys
    return (layout.outer, layout.n, layout.inner, xso, xsn, yso, ysn)


class Case:
    """One call as the planners see it; each quantity is worked out once, when first read."""

    def __init__(self, layout, itemsize: int, addresses, limits: Limits, tuning: Tuning,
                 load: str = "Plain"):
        self.layout, self.itemsize, self.addresses = layout, itemsize, addresses
        self.limits, self.tuning, self.load = limits, tuning, load
        self.rows, self.cols = layout.outer, layout.n
        self._memo = {}

    @cached_property
    def vec(self) -> int:
        """Pack of contiguous rows: what the addresses and row strides allow."""
        return vector_width(self.itemsize, self.addresses, (self.layout.xs[0], self.layout.ys[0]))

    @cached_property
    def strided_vec(self) -> int:
        """Pack of a strided axis: what the addresses and every stride allow."""
        return vector_width(self.itemsize, self.addresses, self.layout.xs + self.layout.ys)

    @cached_property
    def alike(self) -> bool:
        """x's and y's rows lie alike about 16-byte boundaries."""
        (xs, _), (ys, _) = self.layout.xs, self.layout.ys
        x, y = self.addresses
        return (x - y) % 16 == 0 and (xs - ys) * self.itemsize % 16 == 0

    @cached_property
    def back_to_back(self) -> bool:
        """The rows lie back to back in x and in y."""
        return self.layout.outer == 1 or self.layout.xs[0] == self.layout.ys[0] == self.layout.n

    @cached_property
    def span(self) -> bool:
        """Rows off 16-byte boundaries, alike in x and y: kernels may take their spans' packs."""
        return self.alike and self.vec * self.itemsize < 16

    @cached_property
    def on_chip(self) -> tuple[int, int]:
        """(pack, elements) of a row as the block and cluster kernels hold it: its span's
        16-byte packs and longest span where ``span``, else its own."""
        return span_shape(self.cols, self.itemsize) if self.span else (self.vec, self.cols)

    def once(self, name, work):
        """``work()``, worked out at the first call under ``name`` for this case."""
        if name not in self._memo:
            self._memo[name] = work()
        return self._memo[name]

    @property
    def row_bytes(self) -> int:
        return self.cols * self.itemsize

    @property
    def staged_itemsize(self) -> int:
        """Shared-memory bytes an element takes where the block and cluster kernels stage it:
        its own and what the load stages beside it (STAGED_SIDE)."""
        return self.itemsize + STAGED_SIDE.get(self.load, 0)


def vecs(itemsize):
    """Every pack a kernel may take: powers of two up to 16 bytes."""
    return [1 << k for k in range((16 // itemsize).bit_length())]


def pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def vector_width(itemsize: int, addresses, strides) -> int:
    """The widest power-of-two pack, at most 16 bytes, that every address and stride allows."""
    v = 16 // itemsize
    while v > 1 and (any(a % (v * itemsize) for a in addresses) or any(s % v for s in strides)):
        v //= 2
    return v


def span_shape(cols, itemsize):
    """(pack, elements) of rows of ``cols`` elements walked in their aligned spans: 16-byte packs,
    and the longest span (a row that starts one element short of a 16-byte boundary), as the
    kernels cut it (kernels/common.cuh, head_of)."""
    wide = 16 // itemsize
    return wide, cols + wide - 1


def padded_bytes(cols, itemsize, vec):
    return math.ceil(cols / vec) * vec * itemsize


def slice_bytes(cols, itemsize, vec, size):
    """Bytes of one block's slice when a row is cut over `size` blocks (whole packs)."""
    return math.ceil(math.ceil(cols / vec) / size) * vec * itemsize


def short_width(packs):
    """Lanes per short row (at most a warp): a power of two, about one pack each."""
    return min(32, pow2_at_least(packs))


def looped_grid(rows, rows_per_block, block, limits, waves):
    """Blocks for kernels whose units loop over rows: at most `waves` full residencies."""
    resident = limits.sm_count * (THREADS_PER_SM // block) * waves
    return min(MAX_GRID, resident, math.ceil(rows / rows_per_block))


def block_share(limits, per_sm) -> int:
    """Shared memory each of `per_sm` blocks resident on an SM can have (the driver keeps
    BLOCK_RESERVED of each block's)."""
    return limits.smem_per_sm // per_sm - BLOCK_RESERVED


def threads_for(slice_bytes, itemsize, tuning):
    """Threads of a block holding ``slice_bytes``: the first entry of the table that holds them."""
    table = tuning.block.threads_float64 if itemsize == 8 else tuning.block.threads
    return next(t for limit, t in table if slice_bytes <= limit)


def cluster_size(slice_bytes, limits, tuning, scratch, smalls):
    """The cluster size for a line whose slice over `size` blocks has ``slice_bytes(size)``
    bytes (behind ``scratch(size)`` bytes of shared memory): for each limit of `smalls` in turn,
    the smallest size whose slices are at most that; else the smallest that holds the line;
    else None."""
    if not limits.clusters:
        return None
    slices = {size: slice_bytes(size) for size in tuning.cluster.sizes if size <= limits.max_cluster}
    for small in smalls:
        for size, nbytes in slices.items():
            if nbytes <= small:
                return size
    for size, nbytes in slices.items():
        if scratch(size) + nbytes <= limits.smem_per_block:
            return size
    return None


def group_size(lines, fewest):
    """Lines per group of a two-pass schedule: of `fewest` to twice that (at most `lines`), the
    number that leaves the last group (the lines left over) the fewest lines short of a whole
    group; the smallest of those."""
    return min(range(fewest, min(lines, 2 * fewest) + 1), key=lambda n: -lines % n)


def two_pass_grid(lines, chunks, per_sm, waves, limits) -> tuple[int, int]:
    """(grid, lines per group) of a two-pass kernel: one resident wave of `per_sm` blocks an SM
    taking (line, chunk) items, groups of lines of at least `waves` waves of items."""
    resident = limits.sm_count * per_sm
    per_group = group_size(lines, min(lines, math.ceil(waves * resident / chunks)))
    return min(MAX_GRID, resident, 2 * lines * chunks), per_group


def two_pass_workspace(lines, chunks, values) -> tuple[int, int]:
    """(bytes, head bytes) of a two-pass kernel's workspace (``Workspace`` in kernels/common.cuh):
    the ticket counter and per-line counts (the head, zeroed), then (m, d) statistics of
    `values` columns per line and partials per chunk."""
    head = 8 + (4 * lines + 7) // 8 * 8
    return head + 16 * lines * values * (1 + chunks), head
