"""Every tuning value of the policy, as data: a variant is ``dataclasses.replace(TUNING, ...)``.

Beside each field: the reason in one line and the record that chose it (``docs/tuning/<family>.md``,
``## <id>``). Values marked (CUDA) reach the kernels as ``-DCSM_...`` options (``cuda_defines``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


class BySize(dict):
    """A table by element size (bytes); hashable, so a Tuning keys the plan and kernel caches."""

    def __hash__(self):
        return hash(tuple(sorted(self.items())))


@dataclass(frozen=True)
class Tuning:
    # registers: short rows (a warp's, shuffles only) and wide rows (a block's)
    registers_max_per_lane: int = 32  # 32 values + ~30 of state keep 16 warps an SM [registers-1]
    registers_max_lanes: int = 1024  # a wide row is one block [registers-1]
    registers_max_cols: int = 512  # short rows in registers up to here, by elements [registers-2]
    registers_max_bytes: int = 2048  # ... or by bytes: 1024 half-type elements won [registers-2]
    registers_wide_values: int = 16  # 32 registers a thread, no spill, 2048 threads an SM [registers-3]
    registers_wide_max_bytes: int = 4096  # 16-byte packs: wide rows beat tiles, block [registers-3]
    registers_wide_min_resident_bytes: int = 52 * 1024  # fewer an SM: tiles win [registers-4]
    registers_wide_narrow_vec: int = 2  # packs of up to 2 elements take wide rows too [registers-5]
    registers_wide_narrow_max_cols: int = 320 * 16  # 320 lanes: three blocks an SM [registers-5]
    # rows in their spans' packs: wide rows up to these bytes, then block and cluster [registers-6]
    registers_wide_span_max_bytes: BySize = BySize({2: 8192, 4: 320 * 16 * 4})
    registers_short_span_min_bytes: int = 1024  # shorter rows lose in spans [registers-7]
    registers_short_span_max_pack: int = 4  # spans from packs of one 4-byte element [registers-7]
    registers_short_span_max_short_pack: int = 8  # ... 8 where the span stays short [registers-7]
    warp_block: int = 64  # short rows' block: the faster of 64 and 128 [registers-8]
    registers_short_threads: int = 128  # (CUDA) short rows' __launch_bounds__ [registers-8]
    warp_lane_values: int = 16  # rows per lane group for about 16 values a lane [registers-9]
    warp_max_rows: int = 4  # rows per lane group at most [registers-9]
    # a masking load's short rows: fewer values a lane, their keep words held too [registers-13]
    masked_lane_values: int = 8
    # its wide rows: 32 values a thread, to 32768 elements a block [registers-13]
    masked_wide_values: int = 32
    # longer masked rows to block and cluster (one wide block an SM loses) [registers-14]
    masked_registers_max_cols: int = 16384
    warp_lane_values_float64_one_pack: int = 4  # float64, a pack a lane: 4 won [registers-10]
    warp_waves: int = 8  # full residencies of the looped grids [registers-11]
    registers_float32_waves: int = 16  # float32 16-byte packs: more waves, faster [registers-12]
    # tiles
    tiles_max_bytes: int = 4095  # rows shorter than 4 KiB; 4 KiB went to block [tiles-1]
    tiles_block: int = 128  # threads a block [tiles-2]
    tiles_warp_bytes: int = 4096  # bytes a warp stages before reducing [tiles-2]
    tiles_rows: tuple = (1, 2, 4, 8)  # rows per lane group it may stage [tiles-2]
    # flat
    flat_block: int = 128  # (CUDA) threads a block and its __launch_bounds__ [flat-1]
    flat_warp_bytes: int = 4096  # bytes of rows a warp stages [flat-1]
    flat_max_cols: int = 32 * 32  # 32 lanes of 32 values [flat-1]
    flat_lane_values: int = 8  # the fewest lanes holding a row in at most 8 values each [flat-1]
    flat_max_bytes: BySize = BySize({2: 1536, 4: 280})  # the default's longest flat rows [flat-1]
    # block: threads by bytes a block holds (first entry that holds them)
    # the other tables measured gained nothing [block-1]
    block_threads: tuple = ((8 * 1024, 64), (16 * 1024, 128), (32 * 1024, 256), (64 * 1024, 512),
                            (math.inf, 1024))
    # float64: half block_threads' threads from 16 KiB to 64 KiB [block-2]
    block_threads_float64: tuple = ((8 * 1024, 64), (16 * 1024, 128), (32 * 1024, 128),
                                    (64 * 1024, 256), (math.inf, 1024))
    block_scratch: int = 100 * 8  # (CUDA) bytes ahead of a row: scratch and cluster exchange
    # cluster and spill
    cluster_sizes: tuple = (2, 4, 8, 16)  # tried in order up to the device's largest [cluster-1]
    cluster_slice_bytes: tuple = (32 * 1024, 64 * 1024)  # slice limits tried in turn [cluster-1]
    cluster_min_bytes: int = 32 * 1024  # longer rows: a cluster, though a block holds them [cluster-1]
    cluster_blocks_per_sm: int = 2  # slices that let two blocks share an SM [cluster-2]
    cluster_spill_max: float = 0.5  # spill per held byte; bfloat16 loses past it [cluster-3]
    spill_threads: int = 512  # (CUDA) 64 registers a thread at two blocks an SM [cluster-4]
    # grid
    grid_chunk_bytes: int = 32 * 1024  # bytes a chunk [grid-1]
    grid_ahead: int = 1  # chunks a block has in flight [grid-1]
    grid_lag: int = 1  # chunks a block holds waiting for their rows [grid-1]
    grid_threads: int = 128  # at least 64: warp 1 polls the row counts [grid-1]
    grid_itemsize: int = 4  # only float32 rows gained [grid-2]
    grid_max_row_bytes: int = 4 * 1024 * 1024  # leads online at 4 MiB, not at 6 MiB [grid-2]
    # online (two passes over rows)
    online_group_waves: float = 0.5  # waves of items a group of rows [online-2]
    online_min_chunk_bytes: int = 128 * 1024  # bytes a chunk at least [online-2]
    online_max_chunks: int = 1024  # chunks a row at most [online-2]
    online_threads: int = 512  # (CUDA) threads a block [online-2]
    online_blocks_per_sm: BySize = BySize({2: 3, 4: 2, 8: 2})  # (CUDA) launch bounds [online-3]
    online_hold_bytes: int = 96 * 1024  # a chunk's first bytes held in shared memory [online-4]
    online_holds: tuple = (4,)  # (CUDA) element sizes that hold; half types lost [online-4]
    # columns (two passes over a strided axis)
    columns_group_waves: float = 2.0  # waves of items a group of strips [online-1]
    columns_min_inner: int = 32  # a shorter inner run is copied to rows [columns-1]
    columns_strip_cols: int = 256  # columns a strip: 1 KiB of float32 won [columns-1]
    columns_min_chunk: int = 256  # steps a chunk: <= 1/16 byte of partials an element [columns-1]
    columns_max_chunks: int = 64  # chunks of the axis at most [columns-1]
    columns_threads: int = 256  # (CUDA) threads a block
    columns_blocks_per_sm: int = 3  # (CUDA) its launch bounds: 80 registers a thread [columns-2]
    columns_max_vec: int = 4  # 8 bfloat16 a thread spill 68 bytes [columns-2]
    # slab (a strided axis held across a cluster)
    slab_strip_bytes: tuple = (128, 64)  # strip widths tried in order [slab-1]
    slab_slice_bytes: int = 64 * 1024  # a block's slice at most, where a size allows [slab-1]
    slab_max_cols: int = 64  # (CUDA) columns a strip at most [slab-1]
    slab_max_threads: int = 256  # (CUDA) threads a block at most [slab-1]
    slab_min_threads: int = 128  # 64 overflowed the tracked barriers [slab-2]
    # reduce (each slice to one value: logsumexp)
    reduce_threads: int = 256  # (CUDA) threads a block of every reduce kernel [reduce-1]
    reduce_waves: int = 4  # full residencies at most; blocks loop over items [reduce-1]
    reduce_lane_loads: int = 2  # packs a lane loads at a time (and as many ahead) [reduce-1]
    reduce_lane_max_packs: int = 4  # packs a lane a round, streamed rows' too [reduce-4]
    reduce_lane_stages: int = 2  # steps in flight, shared memory: 48 KiB at 4 packs [reduce-4]
    reduce_lane_staged_lanes: int = 32  # fewer lanes a row: next step in registers [reduce-4]
    reduce_lane_warp_lanes: tuple = (2, 8)  # rows in 2 to 7 lanes: copied by the warp [reduce-7]
    reduce_shifted: int = 7  # (CUDA) exp_shifted terms: bits 1 lanes, 2 chunks, 4 columns [reduce-5]
    # packs a lane at least: more bytes in flight on short rows [reduce-5] [reduce-6]
    reduce_lane_min_packs: BySize = BySize({2: 4, 4: 4, 8: 2})
    reduce_warp_rows_waves: int = 1  # rows a warp each, 1 residency at least [reduce-4]
    reduce_warp_max_bytes: int = 32 * 1024  # longer rows to blocks [reduce-2]
    reduce_item_waves: float = 2.0  # items to cut rows and axes into, in residencies [reduce-5]
    reduce_min_chunk_steps: int = 4  # a chunk is at least 4 batch rounds of its block [reduce-1]
    reduce_max_chunk_bytes: int = 256 * 1024  # bytes a chunk of a row at most [reduce-1]
    reduce_columns_max_vec: int = 2  # a thread's columns: V states; 4 spill [reduce-1] [reduce-8]
    reduce_column_steps: int = 8  # steps of its columns a thread loads before it uses any [reduce-5]
    reduce_columns_strip_cols: int = 64  # columns a block's strip [reduce-5]
    # vjp (backward passes; short rows take reduce_lane_* and reduce_waves)
    vjp_threads: int = 256  # (CUDA) threads a block [vjp-1]
    vjp_min_rows_per_sm: int = 2  # fewer long rows leave SMs idle: vjp_chunks [vjp-1]
    vjp_chunk_bytes: int = 64 * 1024  # bytes of each array a chunk [vjp-3]
    vjp_group_waves: float = 0.5  # waves of items a group of rows, as online's [vjp-3]
    # packs of y and of dy a lane: 4 spilled bfloat16 [vjp-1]; float32 4 (no spill) [vjp-6]
    vjp_lane_max_packs: BySize = BySize({2: 2, 4: 4, 8: 2})
    vjp_block_packs: int = 4  # a row's block: packs a thread, so short rows keep few threads [vjp-2]
    vjp_block_l2_bytes: int = 24 * 2**20  # a wave's rows of y and dy, to stay in L2 [vjp-4]
    vjp_columns_chunk_bytes: int = 256 * 1024  # bytes of each array an item [vjp-4]
    vjp_columns_blocks_per_sm: int = 2  # (CUDA) launch bounds: 72-124 registers, spills at 64 (ptxas) [vjp-4]
    vjp_hold_threads: int = 1024  # (CUDA) a held row's block at most (the launch bounds) [vjp-5]
    vjp_hold_packs: int = 8  # packs of y (registers) and dy (shared memory) a thread of a held row [vjp-5]
    vjp_hold_min_bytes: int = 32 * 1024  # rows of each array from here held on chip [vjp-5]
    walk_batch: int = 4  # (CUDA) walk_run's packs in flight a thread: spill, online [kernels-1]
    # normalize (rows from given statistics)
    normalize_threads: int = 256  # (CUDA) threads a block, as reduce_threads [normalize-1]
    normalize_piece_bytes: int = 64 * 1024  # an item's bytes: 4 walk batches of 16 KiB [normalize-1]
    normalize_waves: int = 4  # full residencies at most; blocks loop over items [normalize-1]
    # segment (softmax over segments of rows)
    segment_threads: int = 256  # (CUDA) threads a tile: 8 KiB of x a tile at 32 bytes a thread [segment-3]
    segment_blocks_per_sm: int = 0  # (CUDA) launch bound of segment_tiles (0: none) [segment-3]
    segment_thread_bytes: int = 32  # x a thread at the full width: two 16-byte loads [segment-3]
    # topk (softmax and top-k in one read)
    topk_threads: int = 256  # (CUDA) threads a block; 8 warps' lists in 40 KiB at K = 256 [topk-1]
    topk_blocks_per_sm: int = 3  # (CUDA) launch bound: 80 registers a thread [topk-1]
    topk_batch: int = 16  # (CUDA) elements a thread of topk_block loads before using any [topk-2]
    topk_lane_elements: int = 16  # a lane's in topk_lanes: 65536x256 k=8 86 us (8: 100) [topk-1]
    topk_lane_max_k: int = 32  # k of topk_lanes at most: k rounds of shuffles each [topk-1]
    topk_max_k: int = 256  # k of topk_block at most: K a thread in its final merge [topk-1]
    topk_max_cols: int = 2**30  # positions and offsets in int, with steps past the row's end [topk-1]
    topk_waves: int = 4  # full residencies at most; blocks loop over items [topk-1]
    topk_items_per_sm: int = 4  # (row, chunk) items wanted an SM, where rows are few [topk-1]
    topk_min_chunk: int = 4096  # elements a chunk at least: 4 steps of 256 threads' packs [topk-1]
    topk_max_chunks: int = 32  # chunks a row at most: the last block merges 7 lists a round [topk-1]

    def __hash__(self):
        # Worked out once: _api's fast path and the plan and kernel caches hash it at each call.
        if "_hash" not in self.__dict__:
            values = tuple(getattr(self, name) for name in self.__dataclass_fields__)
            object.__setattr__(self, "_hash", hash(values))
        return self.__dict__["_hash"]

    def for_load(self, load: str) -> Tuning:
        """The tuning a load functor's kernels are planned with: the Masked load's rows take
        masked_lane_values values a lane (short rows) and masked_wide_values (wide rows)."""
        if load != "Masked":
            return self
        memo = self.__dict__.setdefault("_for_load", {})
        if load not in memo:
            memo[load] = replace(self, warp_lane_values=self.masked_lane_values,
                                 registers_wide_values=self.masked_wide_values)
        return memo[load]

    @property
    def short_cols(self) -> int:
        """The longest row one warp holds: 32 lanes of registers_max_per_lane values."""
        return 32 * self.registers_max_per_lane

    @property
    def slab_max_warps(self) -> int:
        return self.slab_max_threads // 32

    @property
    def slab_scratch(self) -> int:
        """Bytes ahead of a slab block's (m, d) rounds: 16, then 8 a column of a strip."""
        return 16 + self.slab_max_cols * 8


TUNING = Tuning()


def cuda_defines(tuning: Tuning = TUNING) -> tuple[str, ...]:
    """The values kernels/ shares with the policy, as NVRTC options ``-DCSM_NAME=value``."""
    values = {
        "FUSED_SCRATCH": tuning.block_scratch,
        "SPILL_THREADS": tuning.spill_threads,
        "SHORT_ROWS_THREADS": tuning.registers_short_threads,
        "FLAT_THREADS": tuning.flat_block,
        "ONLINE_THREADS": tuning.online_threads,
        **{f"ONLINE_BLOCKS_{s}": n for s, n in sorted(tuning.online_blocks_per_sm.items())},
        **{f"ONLINE_HOLDS_{s}": int(s in tuning.online_holds) for s in (2, 4, 8)},
        "COLUMNS_THREADS": tuning.columns_threads,
        "COLUMNS_BLOCKS_PER_SM": tuning.columns_blocks_per_sm,
        "SLAB_MAX_COLS": tuning.slab_max_cols,
        "SLAB_MAX_THREADS": tuning.slab_max_threads,
        "SLAB_SCRATCH": tuning.slab_scratch,
        "REDUCE_THREADS": tuning.reduce_threads,
        "REDUCE_SHIFTED": tuning.reduce_shifted,
        "VJP_THREADS": tuning.vjp_threads,
        "VJP_COLUMNS_BLOCKS_PER_SM": tuning.vjp_columns_blocks_per_sm,
        "VJP_HOLD_THREADS": tuning.vjp_hold_threads,
        "NORMALIZE_THREADS": tuning.normalize_threads,
        "SEGMENT_THREADS": tuning.segment_threads,
        "SEGMENT_BLOCKS": tuning.segment_blocks_per_sm,
        "WALK_BATCH": tuning.walk_batch,
        "TOPK_THREADS": tuning.topk_threads,
        "TOPK_BLOCKS": tuning.topk_blocks_per_sm,
        "TOPK_BATCH": tuning.topk_batch,
    }
    return tuple(f"-DCSM_{name}={value}" for name, value in values.items())
