"""Every tuning value of the policy, as data: one small frozen slice a kernel family (``Registers``
to ``Topk``), gathered in ``Tuning``. A value's flat name is its slice and field,
``reduce_lane_stages`` for ``TUNING.reduce.lane_stages``; a variant is
``TUNING.vary(reduce_lane_stages=1)``.

Beside each field: the reason in one line and the record that chose it (``docs/tuning/<family>.md``,
``## <id>``). Values marked (CUDA) reach the kernels as ``-DCSM_...`` options (``cuda_defines``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace


class BySize(dict):
    """A table by element size (bytes); hashable, so a Tuning keys the plan and kernel caches."""

    def __hash__(self):
        return hash(tuple(sorted(self.items())))


@dataclass(frozen=True)
class Registers:
    """Short rows (a warp's, shuffles only) and wide rows (a block's)."""

    max_per_lane: int = 32  # 32 values + ~30 of state keep 16 warps an SM [registers-1]
    max_lanes: int = 1024  # a wide row is one block [registers-1]
    max_cols: int = 512  # short rows in registers up to here, by elements [registers-2]
    max_bytes: int = 2048  # ... or by bytes: 1024 half-type elements won [registers-2]
    wide_values: int = 16  # 32 registers a thread, no spill, 2048 threads an SM [registers-3]
    wide_max_bytes: int = 4096  # 16-byte packs: wide rows beat tiles, block [registers-3]
    wide_min_resident_bytes: int = 52 * 1024  # fewer an SM: tiles win [registers-4]
    wide_narrow_vec: int = 2  # packs of up to 2 elements take wide rows too [registers-5]
    wide_narrow_max_cols: int = 320 * 16  # 320 lanes: three blocks an SM [registers-5]
    # rows in their spans' packs: wide rows up to these bytes, then block and cluster [registers-6]
    wide_span_max_bytes: BySize = BySize({2: 8192, 4: 320 * 16 * 4})
    short_span_min_bytes: int = 1024  # shorter rows lose in spans [registers-7]
    short_span_max_pack: int = 4  # spans from packs of one 4-byte element [registers-7]
    short_span_max_short_pack: int = 8  # ... 8 where the span stays short [registers-7]
    short_threads: int = 128  # (CUDA) short rows' __launch_bounds__ [registers-8]
    float32_waves: int = 16  # float32 16-byte packs: more waves, faster [registers-12]

    @property
    def short_cols(self) -> int:
        """The longest row one warp holds: 32 lanes of max_per_lane values."""
        return 32 * self.max_per_lane


@dataclass(frozen=True)
class Warp:
    """The lane groups of short rows in registers (registers.py)."""

    block: int = 64  # short rows' block: the faster of 64 and 128 [registers-8]
    lane_values: int = 16  # rows per lane group for about 16 values a lane [registers-9]
    max_rows: int = 4  # rows per lane group at most [registers-9]
    lane_values_float64_one_pack: int = 4  # float64, a pack a lane: 4 won [registers-10]
    waves: int = 8  # full residencies of the looped grids [registers-11]


@dataclass(frozen=True)
class Masked:
    """The Masked load's rows in registers (registers.py; Tuning.for_load)."""

    # a masking load's short rows: fewer values a lane, their keep words held too [registers-13]
    lane_values: int = 8
    # its wide rows: 32 values a thread, to 32768 elements a block [registers-13]
    wide_values: int = 32
    # longer masked rows to block and cluster (one wide block an SM loses) [registers-14]
    registers_max_cols: int = 16384


@dataclass(frozen=True)
class Tiles:
    """Rows staged in shared memory a warp."""

    max_bytes: int = 4095  # rows shorter than 4 KiB; 4 KiB went to block [tiles-1]
    block: int = 128  # threads a block [tiles-2]
    warp_bytes: int = 4096  # bytes a warp stages before reducing [tiles-2]
    rows: tuple = (1, 2, 4, 8)  # rows per lane group it may stage [tiles-2]


@dataclass(frozen=True)
class Flat:
    """Short rows a warp, their packs flat across lanes."""

    block: int = 128  # (CUDA) threads a block and its __launch_bounds__ [flat-1]
    warp_bytes: int = 4096  # bytes of rows a warp stages [flat-1]
    max_cols: int = 32 * 32  # 32 lanes of 32 values [flat-1]
    lane_values: int = 8  # the fewest lanes holding a row in at most 8 values each [flat-1]
    max_bytes: BySize = BySize({2: 1536, 4: 280})  # the default's longest flat rows [flat-1]


@dataclass(frozen=True)
class Block:
    """A row a block; threads by bytes held (the first entry that holds them)."""

    # the other tables measured gained nothing [block-1]
    threads: tuple = ((8 * 1024, 64), (16 * 1024, 128), (32 * 1024, 256), (64 * 1024, 512),
                      (math.inf, 1024))
    # float64: half threads' threads from 16 KiB to 64 KiB [block-2]
    threads_float64: tuple = ((8 * 1024, 64), (16 * 1024, 128), (32 * 1024, 128),
                              (64 * 1024, 256), (math.inf, 1024))
    scratch: int = 100 * 8  # (CUDA) bytes ahead of a row: scratch and cluster exchange


@dataclass(frozen=True)
class Cluster:
    """A row across a thread-block cluster."""

    sizes: tuple = (2, 4, 8, 16)  # tried in order up to the device's largest [cluster-1]
    slice_bytes: tuple = (32 * 1024, 64 * 1024)  # slice limits tried in turn [cluster-1]
    min_bytes: int = 32 * 1024  # longer rows: a cluster, though a block holds them [cluster-1]
    blocks_per_sm: int = 2  # slices that let two blocks share an SM [cluster-2]
    spill_max: float = 0.5  # spill per held byte; bfloat16 loses past it [cluster-3]


@dataclass(frozen=True)
class Spill:
    """A cluster's rows past its shared memory."""

    threads: int = 512  # (CUDA) 64 registers a thread at two blocks an SM [cluster-4]


@dataclass(frozen=True)
class Grid:
    """A row across the whole grid."""

    chunk_bytes: int = 32 * 1024  # bytes a chunk [grid-1]
    ahead: int = 1  # chunks a block has in flight [grid-1]
    lag: int = 1  # chunks a block holds waiting for their rows [grid-1]
    threads: int = 128  # at least 64: warp 1 polls the row counts [grid-1]
    itemsize: int = 4  # only float32 rows gained [grid-2]
    max_row_bytes: int = 4 * 1024 * 1024  # leads online at 4 MiB, not at 6 MiB [grid-2]


@dataclass(frozen=True)
class Online:
    """Two passes over rows."""

    group_waves: float = 0.5  # waves of items a group of rows [online-2]
    min_chunk_bytes: int = 128 * 1024  # bytes a chunk at least [online-2]
    max_chunks: int = 1024  # chunks a row at most [online-2]
    threads: int = 512  # (CUDA) threads a block [online-2]
    blocks_per_sm: BySize = BySize({2: 3, 4: 2, 8: 2})  # (CUDA) launch bounds [online-3]
    hold_bytes: int = 96 * 1024  # a chunk's first bytes held in shared memory [online-4]
    holds: tuple = (4,)  # (CUDA) element sizes that hold; half types lost [online-4]


@dataclass(frozen=True)
class Columns:
    """Two passes over a strided axis."""

    group_waves: float = 2.0  # waves of items a group of strips [online-1]
    min_inner: int = 32  # a shorter inner run is copied to rows [columns-1]
    strip_cols: int = 256  # columns a strip: 1 KiB of float32 won [columns-1]
    min_chunk: int = 256  # steps a chunk: <= 1/16 byte of partials an element [columns-1]
    max_chunks: int = 64  # chunks of the axis at most [columns-1]
    threads: int = 256  # (CUDA) threads a block
    blocks_per_sm: int = 3  # (CUDA) its launch bounds: 80 registers a thread [columns-2]
    max_vec: int = 4  # 8 bfloat16 a thread spill 68 bytes [columns-2]


@dataclass(frozen=True)
class Slab:
    """A strided axis held across a cluster."""

    strip_bytes: tuple = (128, 64)  # strip widths tried in order [slab-1]
    slice_bytes: int = 64 * 1024  # a block's slice at most, where a size allows [slab-1]
    max_cols: int = 64  # (CUDA) columns a strip at most [slab-1]
    max_threads: int = 256  # (CUDA) threads a block at most [slab-1]
    min_threads: int = 128  # 64 overflowed the tracked barriers [slab-2]

    @property
    def max_warps(self) -> int:
        return self.max_threads // 32

    @property
    def scratch(self) -> int:
        """Bytes ahead of a slab block's (m, d) rounds: 16, then 8 a column of a strip."""
        return 16 + self.max_cols * 8


@dataclass(frozen=True)
class Reduce:
    """Each slice to one value (logsumexp)."""

    threads: int = 256  # (CUDA) threads a block of every reduce kernel [reduce-1]
    waves: int = 4  # full residencies at most; blocks loop over items [reduce-1]
    lane_loads: int = 2  # packs a lane loads at a time (and as many ahead) [reduce-1]
    lane_max_packs: int = 4  # packs a lane a round, streamed rows' too [reduce-4]
    lane_stages: int = 2  # steps in flight, shared memory: 48 KiB at 4 packs [reduce-4]
    lane_staged_lanes: int = 32  # fewer lanes a row: next step in registers [reduce-4]
    lane_warp_lanes: tuple = (2, 8)  # rows in 2 to 7 lanes: copied by the warp [reduce-7]
    shifted: int = 7  # (CUDA) exp_shifted terms: bits 1 lanes, 2 chunks, 4 columns [reduce-5]
    # packs a lane at least: more bytes in flight on short rows [reduce-5] [reduce-6]
    lane_min_packs: BySize = BySize({2: 4, 4: 4, 8: 2})
    warp_rows_waves: int = 1  # rows a warp each, 1 residency at least [reduce-4]
    warp_max_bytes: int = 32 * 1024  # longer rows to blocks [reduce-2]
    item_waves: float = 2.0  # items to cut rows and axes into, in residencies [reduce-5]
    min_chunk_steps: int = 4  # a chunk is at least 4 batch rounds of its block [reduce-1]
    max_chunk_bytes: int = 256 * 1024  # bytes a chunk of a row at most [reduce-1]
    columns_max_vec: int = 2  # a thread's columns: V states; 4 spill [reduce-1] [reduce-8]
    column_steps: int = 8  # steps of its columns a thread loads before it uses any [reduce-5]
    columns_strip_cols: int = 64  # columns a block's strip [reduce-5]


@dataclass(frozen=True)
class Vjp:
    """Backward passes; short rows take reduce's lane values and waves."""

    threads: int = 256  # (CUDA) threads a block [vjp-1]
    min_rows_per_sm: int = 2  # fewer long rows leave SMs idle: vjp_chunks [vjp-1]
    chunk_bytes: int = 64 * 1024  # bytes of each array a chunk [vjp-3]
    group_waves: float = 0.5  # waves of items a group of rows, as online's [vjp-3]
    # packs of y and of dy a lane: 4 spilled bfloat16 [vjp-1]; float32 4 (no spill) [vjp-6]
    lane_max_packs: BySize = BySize({2: 2, 4: 4, 8: 2})
    block_packs: int = 4  # a row's block: packs a thread, so short rows keep few threads [vjp-2]
    block_l2_bytes: int = 24 * 2**20  # a wave's rows of y and dy, to stay in L2 [vjp-4]
    columns_chunk_bytes: int = 256 * 1024  # bytes of each array an item [vjp-4]
    columns_blocks_per_sm: int = 2  # (CUDA) launch bounds: fewer spill [vjp-4]
    hold_threads: int = 1024  # (CUDA) a held row's block at most (the launch bounds) [vjp-5]
    hold_packs: int = 8  # packs of y (registers) and dy (shared memory) a held row's thread [vjp-5]
    hold_min_bytes: int = 32 * 1024  # rows of each array from here held on chip [vjp-5]


@dataclass(frozen=True)
class Walk:
    """Walk_run, the streamed loop of spill and online."""

    batch: int = 4  # (CUDA) walk_run's packs in flight a thread: spill, online [kernels-1]


@dataclass(frozen=True)
class Normalize:
    """Rows from given statistics."""

    threads: int = 256  # (CUDA) threads a block, as reduce's [normalize-1]
    piece_bytes: int = 64 * 1024  # an item's bytes: 4 walk batches of 16 KiB [normalize-1]
    waves: int = 4  # full residencies at most; blocks loop over items [normalize-1]


@dataclass(frozen=True)
class Segment:
    """Softmax over segments of rows."""

    threads: int = 256  # (CUDA) threads a tile: 8 KiB of x a tile at 32 bytes a thread [segment-3]
    blocks_per_sm: int = 0  # (CUDA) launch bound of segment_tiles (0: none) [segment-3]
    thread_bytes: int = 32  # x a thread at the full width: two 16-byte loads [segment-3]


@dataclass(frozen=True)
class Topk:
    """Softmax and top-k in one read."""

    threads: int = 256  # (CUDA) threads a block; 8 warps' lists in 40 KiB at K = 256 [topk-1]
    blocks_per_sm: int = 3  # (CUDA) launch bound: 80 registers a thread [topk-1]
    batch: int = 16  # (CUDA) elements a thread of topk_block loads before using any [topk-2]
    lane_elements: int = 16  # a lane's in topk_lanes: 16 beat 8 [topk-1]
    lane_max_k: int = 32  # k of topk_lanes at most: k rounds of shuffles each [topk-1]
    max_k: int = 256  # k of topk_block at most: K a thread in its final merge [topk-1]
    max_cols: int = 2**30  # positions and offsets in int, with steps past the row's end [topk-1]
    waves: int = 4  # full residencies at most; blocks loop over items [topk-1]
    items_per_sm: int = 4  # (row, chunk) items wanted an SM, where rows are few [topk-1]
    min_chunk: int = 4096  # elements a chunk at least: 4 steps of 256 threads' packs [topk-1]
    max_chunks: int = 32  # chunks a row at most: the last block merges 7 lists a round [topk-1]


@dataclass(frozen=True)
class Tuning:
    """The slices of every family: ``TUNING.topk.max_k``."""

    registers: Registers = field(default_factory=Registers)
    warp: Warp = field(default_factory=Warp)
    masked: Masked = field(default_factory=Masked)
    tiles: Tiles = field(default_factory=Tiles)
    flat: Flat = field(default_factory=Flat)
    block: Block = field(default_factory=Block)
    cluster: Cluster = field(default_factory=Cluster)
    spill: Spill = field(default_factory=Spill)
    grid: Grid = field(default_factory=Grid)
    online: Online = field(default_factory=Online)
    columns: Columns = field(default_factory=Columns)
    slab: Slab = field(default_factory=Slab)
    reduce: Reduce = field(default_factory=Reduce)
    vjp: Vjp = field(default_factory=Vjp)
    walk: Walk = field(default_factory=Walk)
    normalize: Normalize = field(default_factory=Normalize)
    segment: Segment = field(default_factory=Segment)
    topk: Topk = field(default_factory=Topk)

    def __hash__(self):
        # Worked out once: the fast path and the plan and kernel caches hash it at each call.
        if "_hash" not in self.__dict__:
            values = tuple(getattr(self, f.name) for f in fields(self))
            object.__setattr__(self, "_hash", hash(values))
        return self.__dict__["_hash"]

    def values(self) -> dict:
        """Every value by its flat name (``reduce_lane_stages``)."""
        return {f"{s.name}_{f.name}": getattr(part, f.name)
                for s in fields(self) for part in (getattr(self, s.name),) for f in fields(part)}

    def vary(self, **values) -> Tuning:
        """This tuning with the values given by flat name changed (a TypeError names one it
        does not have)."""
        parts, families = {}, {f.name for f in fields(self)}
        for name, value in values.items():
            family, _, key = name.partition("_")
            part = parts.get(family) or (getattr(self, family) if family in families else None)
            if part is None or key not in {f.name for f in fields(part)}:
                raise TypeError(f"Tuning has no value {name!r}")
            parts[family] = replace(part, **{key: value})
        return replace(self, **parts)

    def for_load(self, load: str) -> Tuning:
        """The tuning a load functor's kernels are planned with: the Masked load's rows take
        masked.lane_values values a lane (short rows) and masked.wide_values (wide rows)."""
        if load != "Masked":
            return self
        memo = self.__dict__.setdefault("_for_load", {})
        if load not in memo:
            memo[load] = self.vary(warp_lane_values=self.masked.lane_values,
                                   registers_wide_values=self.masked.wide_values)
        return memo[load]


TUNING = Tuning()


def cuda_defines(tuning: Tuning = TUNING) -> tuple[str, ...]:
    """The values kernels/ shares with the policy, as NVRTC options ``-DCSM_NAME=value``."""
    t = tuning
    values = {
        "FUSED_SCRATCH": t.block.scratch,
        "SPILL_THREADS": t.spill.threads,
        "SHORT_ROWS_THREADS": t.registers.short_threads,
        "FLAT_THREADS": t.flat.block,
        "ONLINE_THREADS": t.online.threads,
        **{f"ONLINE_BLOCKS_{s}": n for s, n in sorted(t.online.blocks_per_sm.items())},
        **{f"ONLINE_HOLDS_{s}": int(s in t.online.holds) for s in (2, 4, 8)},
        "COLUMNS_THREADS": t.columns.threads,
        "COLUMNS_BLOCKS_PER_SM": t.columns.blocks_per_sm,
        "SLAB_MAX_COLS": t.slab.max_cols,
        "SLAB_MAX_THREADS": t.slab.max_threads,
        "SLAB_SCRATCH": t.slab.scratch,
        "REDUCE_THREADS": t.reduce.threads,
        "REDUCE_SHIFTED": t.reduce.shifted,
        "VJP_THREADS": t.vjp.threads,
        "VJP_COLUMNS_BLOCKS_PER_SM": t.vjp.columns_blocks_per_sm,
        "VJP_HOLD_THREADS": t.vjp.hold_threads,
        "NORMALIZE_THREADS": t.normalize.threads,
        "SEGMENT_THREADS": t.segment.threads,
        "SEGMENT_BLOCKS": t.segment.blocks_per_sm,
        "WALK_BATCH": t.walk.batch,
        "TOPK_THREADS": t.topk.threads,
        "TOPK_BLOCKS": t.topk.blocks_per_sm,
        "TOPK_BATCH": t.topk.batch,
    }
    return tuple(f"-DCSM_{name}={value}" for name, value in values.items())
