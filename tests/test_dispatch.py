"""The dispatch policy against stated device limits (no GPU needed)."""

import dataclasses
import math

import pytest

from cusoftmax import planning as d
from cusoftmax._layout import Layout
from cusoftmax.planning import TUNING as t
from cusoftmax.planning import cluster, grid, slab
from cusoftmax.planning.common import (BLOCK_RESERVED, MAX_BLOCKS_PER_SM, MAX_GRID, group_size, threads_for,
                                      two_pass_workspace)
from cusoftmax.planning.online import ONLINE_STATIC_BYTES
from _support import block_max_cols, cluster_held_cols, cluster_policy_cols

H200 = d.Limits(sm_count=132, smem_per_block=232448, capability=(9, 0), smem_per_sm=233472)
A100 = d.Limits(sm_count=108, smem_per_block=166912, capability=(8, 0), smem_per_sm=167936)


def rows_plan(cols, itemsize=4, vec=None, limits=H200, rows=1000, method=None, tuning=None):
    """Rows in packs of `vec` (x starts `vec` elements off 16 bytes, y on them: unlike, so no
    spans), apart by a multiple of 16 elements (not back to back)."""
    vec = vec or 16 // itemsize
    ld = (cols // 16 + 1) * 16
    layout = Layout(rows, cols, 1, (ld, 1), (ld, 1))
    return d.plan(layout, itemsize, (vec * itemsize % 16, 0), limits, method, tuning)


@pytest.mark.parametrize("limits", [H200, A100])
@pytest.mark.parametrize("itemsize", [2, 4, 8])
def test_thresholds_come_from_the_device(limits, itemsize):
    vec = 16 // itemsize
    top = block_max_cols(limits, itemsize, vec)
    assert top * itemsize <= limits.smem_per_block
    between = t.cluster.min_bytes // itemsize  # the longest row a block takes on sm_90
    past_block = "cluster" if limits.clusters else "online"
    reg_top = max(t.registers.max_cols, t.registers.max_bytes // itemsize)
    tiles_top = t.tiles.max_bytes // itemsize
    wide_top = t.registers.wide_max_bytes // itemsize  # wide rows of 16-byte packs
    cases = [
        (1, "registers"), (2, "registers"), (3, "registers"), (reg_top - 1, "registers"),
        (reg_top, "registers"), (max(reg_top, tiles_top, wide_top) + 1, "block"),
        (top + 1, past_block), (2**31 + 7, "online"),
    ]
    if wide_top > reg_top:
        cases += [(wide_top, "registers")]
        # Past the short rows, wide rows when an SM's blocks hold enough bytes of rows: float32
        # from the first (64 lanes, 32 blocks an SM); half types from 1268 elements (96 lanes,
        # 21 blocks an SM) to 1536, then from 1664 (128 lanes, 16 blocks).
        assert t.registers.wide_min_resident_bytes == 52 * 1024 and MAX_BLOCKS_PER_SM == 32
        wide = {4: [(513, True)], 2: [(1025, False), (1267, False), (1268, True), (1536, True),
                                      (1537, False), (1663, False), (1664, True)]}[itemsize]
        cases += [(cols, "registers" if w else "tiles") for cols, w in wide]
        # Rows of narrower packs: up to REGISTERS_WIDE_NARROW_VEC elements a pack, wide rows to
        # REGISTERS_WIDE_NARROW_MAX_COLS; wider packs as before (tiles, then block at 4 KiB).
        top_n = t.registers.wide_narrow_max_cols
        for narrow in range(1, vec):
            if narrow & (narrow - 1):
                continue
            expect = [("registers", "registers", "block"), ("tiles", "block", "block")][
                narrow > t.registers.wide_narrow_vec]
            got = tuple(rows_plan(c, itemsize, narrow, limits).method for c in (reg_top + 1, top_n, top_n + 1))
            assert got == expect, (itemsize, narrow, got)
    else:
        assert tiles_top <= reg_top  # float64: no row between the short rows and the block
        assert rows_plan(reg_top + 1, itemsize, 1, limits).method == "block"
    if limits.clusters:
        htop, ctop = cluster_held_cols(limits, itemsize, vec), cluster_policy_cols(limits, itemsize, vec)
        cases += [(between - 1, "block"), (between, "block"), (between + 1, "cluster"),
                  (htop, "cluster"), (htop + 1, "cluster"), (ctop - 1, "cluster"),
                  (ctop, "cluster")]
        # Past the cluster: float32 rows of up to GRID_MAX_ROW_BYTES spread over the GPU.
        spread = "grid" if itemsize == t.grid.itemsize else "online"
        gtop = t.grid.max_row_bytes // itemsize
        cases += [(ctop + 1, spread), (gtop, spread), (gtop + 1, "online")]
        # Held on chip up to htop; past it each block spills the rest of its slice.
        assert rows_plan(htop, itemsize, vec, limits).kernel == "cluster"
        # Forced, a cluster takes rows up to spills of 2**31 elements a block.
        for cols in (htop + 1, ctop, ctop + 1, 2**31 + 7, 2**34):
            p = rows_plan(cols, itemsize, vec, limits, method="cluster")
            assert p.method == "cluster" and p.kernel == "spill"
            assert p.template == (vec, limits.max_cluster)
            assert p.held * limits.max_cluster * vec < cols and p.block == t.spill.threads
        with pytest.raises(ValueError, match="2\\*\\*31"):
            rows_plan(2**36, itemsize, vec, limits, method="cluster")
    else:
        cases += [(top - 1, "block"), (top, "block")]
    for cols, method in cases:
        p = rows_plan(cols, itemsize, vec, limits)
        assert p.method == method, (cols, p)
        assert (p.kernel, p.template) in set(d.templates(itemsize))
        assert 0 < p.grid <= MAX_GRID and p.block % 32 == 0
        assert p.smem <= limits.smem_per_block
        if method == "cluster":
            size = p.template[1]
            assert size in t.cluster.sizes and p.grid % size == 0


def test_threads_by_bytes_held():
    """Block rows take the first BLOCK_THREADS (float64: BLOCK_THREADS_FLOAT64) entry that holds
    them, cluster blocks the entry of their slice; the slab never goes below
    SLAB_MIN_THREADS, whatever the table gives its slices."""
    for cols, threads in ((2048, 64), (2049, 128), (4096, 128), (8192, 256), (16384, 512), (32768, 1024)):
        p = rows_plan(cols, 4, 4, limits=A100)  # no clusters: the block kernel up to its limit
        assert (p.method, p.block) == ("block", threads), (cols, p)
    for cols, threads in ((1024, 64), (2048, 128), (4096, 128), (8192, 256), (16384, 1024)):
        p = rows_plan(cols, 8, 2, limits=A100)  # float64: BLOCK_THREADS_FLOAT64
        assert (p.method, p.block) == ("block", threads), (cols, p)
    p = rows_plan(65536, 8, 2)  # a float64 cluster row: 16 slices of 32 KiB
    assert (p.method, p.template[1], p.block) == ("cluster", 16, 128), p
    small = d.plan(Layout(1, 100, 64, (0, 64), (0, 64)), 4, (0, 0), H200)  # axis 0 of 100 x 64
    size = small.template[1]
    assert small.method == "slab" and threads_for(slab.slice_bytes(100, small.width, 4, 4, size), 4, t) == 64
    assert small.block == t.slab.min_threads


def test_block_limit_tracks_the_device():
    assert block_max_cols(H200, 4, 4) > block_max_cols(A100, 4, 4)
    cols = block_max_cols(A100, 4, 4) + 1
    assert rows_plan(cols, limits=A100).method == "online"
    assert rows_plan(cols, limits=H200).method == "cluster"
    assert rows_plan(cols, limits=H200, method="block").method == "block"


def test_cluster_size_is_the_smallest_with_small_slices():
    for cols in (16385, 32768, 65536, 131072, 262144, 400000, 600000):
        p = rows_plan(cols, method="cluster")
        size, slice_bytes = p.template[1], p.smem - t.block.scratch
        smaller = [s for s in t.cluster.sizes if s < size]
        ladder = (*t.cluster.slice_bytes, cluster.shared_slice_bytes(H200, t))  # then two blocks an SM
        small = [b for b in ladder if math.ceil(cols / H200.max_cluster) * 4 <= b]
        if not small:  # none holds it with two blocks an SM: the largest size, spilling
            assert p.kernel == "spill" and slice_bytes == p.held * 16
            assert p.template == (4, H200.max_cluster)
            assert slice_bytes * size < cols * 4
        else:  # the smallest size under the first limit that some size meets
            assert slice_bytes * size >= cols * 4 and p.kernel == "cluster"
            assert slice_bytes <= small[0]
            assert all(math.ceil(cols / s) * 4 > small[0] for s in smaller)
    with pytest.raises(ValueError, match="cluster"):
        rows_plan(1000, method="cluster", limits=A100)


def test_tiles_shape():
    p = rows_plan(32, 2, 8, method="tiles")  # 4 packs: 4 lanes, 8 groups per warp, 8 rows each
    assert (p.lanes, p.template) == (4, (8, 8))
    assert p.smem == t.tiles.block // 32 * t.tiles.warp_bytes
    p = rows_plan(1024, 2, 8, method="tiles")  # 2 KiB rows: 2 per warp
    assert (p.method, p.lanes, p.template) == ("tiles", 32, (8, 2))
    p = rows_plan(3000, 4, 1, method="tiles")  # one row per warp beyond TILES_WARP_BYTES
    assert p.template == (1, 1) and p.smem == 4 * 3000 * 4
    with pytest.raises(ValueError, match="tiles"):
        rows_plan(20000, 4, 4, method="tiles")


def test_grid_follows_the_tuning_it_is_given():
    """A Tuning variant, passed in or made active by planning.use, sets the looped grids: the
    half-type and tiles grids by warp_waves, float32's short rows by registers_float32_waves."""
    residency = H200.sm_count * (2048 // t.warp.block)
    variant = t.vary(warp_waves=3, registers_float32_waves=5)
    assert rows_plan(32, 2, 8, rows=2**30, tuning=variant).grid == residency * 3  # registers, half type
    assert rows_plan(32, 4, 4, rows=2**30, tuning=variant).grid == residency * 5  # registers, float32
    tiles = rows_plan(600, 4, 4, rows=2**30, method="tiles", tuning=variant)
    assert tiles.grid == H200.sm_count * (2048 // tiles.block) * 3
    with d.use(variant):
        assert d.active() is variant
        assert rows_plan(32, 2, 8, rows=2**30).grid == residency * 3
    assert d.active() is t and rows_plan(32, 2, 8, rows=2**30).grid == residency * t.warp.waves


def test_registers_shape():
    assert t.warp.lane_values == 16
    p = rows_plan(32, 4, 4)  # 8 packs of 4: 8 lanes per row, 4 row groups per warp, 4 rows each
    assert (p.lanes, p.template) == (8, (4, 1, 4, 8))
    p = rows_plan(32, 2, 8)  # bfloat16: 4 packs of 8, two rows per group hold 16 values a lane
    assert (p.lanes, p.template) == (4, (8, 1, 2, 4))
    p = rows_plan(256, 4, 4)  # 2 packs per lane: 8 values per lane, two rows per group
    assert (p.lanes, p.template) == (32, (4, 2, 2, 32))
    p = rows_plan(32, 4, 1)  # scalar packs: 32 lanes of 1 value, the most rows per group
    assert (p.lanes, p.template) == (32, (1, 1, t.warp.max_rows, 32))
    # float64 rows of one pack a lane: two rows per group (4 values a lane); of more packs, as
    # the other types (rows of 128: 2 packs a lane, four rows per group, 16 values)
    assert t.warp.lane_values_float64_one_pack == 4
    for cols, lanes in ((2, 1), (10, 8), (32, 16), (64, 32)):
        p = rows_plan(cols, 8, 2)
        assert (p.lanes, p.template) == (lanes, (2, 1, 2, lanes)), (cols, p)
    assert rows_plan(32, 8, 1).template == (1, 1, 4, 32)  # scalar packs: 4 values a lane
    assert rows_plan(128, 8, 2).template == (2, 2, 4, 32)
    p = rows_plan(512, 4, 1, method="registers")  # 512 scalars: 32 lanes, 16 per lane
    assert (p.lanes, p.template) == (32, (1, 16, 1, 32))
    p = rows_plan(1024, 2, 8, method="registers")  # 2 KiB of bfloat16: a warp, 32 values a lane
    assert (p.lanes, p.template) == (32, (8, 4, 1, 32))
    # short rows loop over rows on a grid of full residencies: float32 rows of 16-byte packs
    # REGISTERS_FLOAT32_WAVES of them, other rows WARP_WAVES
    residency = H200.sm_count * (2048 // t.warp.block)
    big = rows_plan(32, 4, 4, rows=2**30)
    assert big.grid == residency * t.registers.float32_waves
    for itemsize, vec in ((2, 8), (4, 2), (8, 2)):
        assert rows_plan(32, itemsize, vec, rows=2**30).grid == residency * t.warp.waves
    # short rows: blocks within the kernel's __launch_bounds__ (a larger block fails to launch)
    assert big.block == t.warp.block <= t.registers.short_threads
    # wide rows (past the short rows): 16 values per lane, whole warps, a row a block, a block a
    # row, up to 1024 lanes
    assert t.registers.wide_values == 16
    p = rows_plan(5000, 2, 8, method="registers")  # 625 packs, 2 a lane: 313 lanes, 10 warps
    assert (p.lanes, p.template, p.block) == (320, (8, 2, 0, 0), 320)
    p = rows_plan(1025, 4, 4, method="registers")  # 257 packs, 4 a lane: 65 lanes, 3 warps
    assert (p.lanes, p.template, p.block) == (96, (4, 4, 0, 0), 96)
    p = rows_plan(517, 4, 1, method="registers")  # 517 scalars, 16 a lane: 33 lanes, 2 warps
    assert (p.lanes, p.template, p.block) == (64, (1, 16, 0, 0), 64)
    p = rows_plan(1024, 4, 4, rows=2**30)  # the policy's: 4 KiB of float32 in 16-byte packs
    assert (p.method, p.lanes, p.template) == ("registers", 64, (4, 4, 0, 0))
    assert (p.block, p.grid) == (64, 2**30)
    assert rows_plan(2048, 2, 8).block == 128  # 4 KiB of bfloat16
    assert rows_plan(1024, 4, 4, rows=2**32).grid == MAX_GRID  # blocks loop past it
    top = t.registers.max_lanes * t.registers.wide_values
    assert rows_plan(top, 8, 2, method="registers").lanes == t.registers.max_lanes
    with pytest.raises(ValueError, match="registers"):
        rows_plan(top + 1, 8, 2, method="registers")


def test_online_chunks_do_not_depend_on_the_batch():
    plans = [rows_plan(10**6, rows=r) for r in (1, 7, 100000)]
    assert len({(p.chunk, p.chunks) for p in plans}) == 1
    p = plans[0]
    assert p.chunk % p.vec == 0 and p.chunk * p.chunks >= 10**6 > p.chunk * (p.chunks - 1)
    huge = rows_plan(2**33, rows=3)
    assert huge.chunks == t.online.max_chunks and huge.per_group == 1 and huge.lines == 3
    assert rows_plan(2**24).chunk == t.online.min_chunk_bytes // 4
    assert rows_plan(2**24, 2).chunk == t.online.min_chunk_bytes // 2  # the same bytes
    assert rows_plan(2**27).chunk == 2**17


@pytest.mark.parametrize("lines", [1, 2, 7, 10, 13, 32, 37, 64, 1000, 4099])
def test_two_pass_groups_spare_a_short_last_group(lines):
    def short(n):  # lines the last group lacks
        return math.ceil(lines / n) * n - lines

    for fewest in range(1, lines + 1):
        n = group_size(lines, fewest)
        sizes = range(fewest, min(lines, 2 * fewest) + 1)
        assert n in sizes and short(n) == min(map(short, sizes))
        assert all(short(k) > short(n) for k in range(fewest, n))  # the smallest such
    assert group_size(32, 7) == 8 and group_size(10, 3) == 5 and group_size(32, 3) == 4
    assert group_size(61, 2) == 2 and group_size(13, 7) == 13 and group_size(16, 4) == 4


def test_two_pass_groups_and_launch_size_from_the_device():
    resident = H200.sm_count * t.online.blocks_per_sm[4]
    p = rows_plan(t.online.min_chunk_bytes, rows=1000, method="online")  # 4 chunks per row
    assert p.chunks == 4 and p.grid == resident
    half = rows_plan(t.online.min_chunk_bytes, 2, rows=1000, method="online")  # 3 blocks an SM
    assert half.grid == H200.sm_count * t.online.blocks_per_sm[2] > resident
    assert p.per_group == group_size(1000, math.ceil(t.online.group_waves * resident / 4))
    few = rows_plan(10**6, rows=1, method="online")  # one row: one item per chunk and pass
    assert few.per_group == 1 and few.grid == min(resident, 2 * few.chunks)
    short = rows_plan(2, rows=3, method="online")  # the whole batch is one group
    assert (short.per_group, short.chunks, short.grid) == (3, 1, 6)
    nbytes, zeroed = p.workspace()
    head = 8 + 4 * 1000  # the ticket and the counts; online zeroes the statistics too
    assert zeroed == head + 16 * 1000 and nbytes == head + 16 * 1000 * (1 + p.chunks) + 4 * 1000 * p.chunks


def test_online_blocks_hold_what_their_shared_memory_leaves():
    """Held elements: whole steps of the kernel's walk, at most a chunk, in the launch's shared
    memory, with ONLINE_BLOCKS_PER_SM blocks an SM still resident."""
    for itemsize, cols in ((4, 2**24), (2, 2**21), (4, 10**6 + 1), (8, 2**22), (2, 3000)):
        vec = 16 // itemsize if cols % (16 // itemsize) == 0 else 1
        p = rows_plan(cols, itemsize, vec, rows=2, method="online")
        per_sm = t.online.blocks_per_sm[itemsize]
        assert p.held % (t.online.threads * p.vec) == 0 and 0 <= p.held <= p.chunk
        assert p.smem == p.held * itemsize
        assert per_sm * (p.smem + ONLINE_STATIC_BYTES + BLOCK_RESERVED) <= H200.smem_per_sm
        assert (p.held > 0) == (itemsize in t.online.holds)


@pytest.mark.parametrize("limits", [H200, A100])
@pytest.mark.parametrize("itemsize", [2, 4, 8])
def test_grid_rows_fit_the_resident_blocks(limits, itemsize):
    vec = 16 // itemsize
    per, smem, most = grid.shape(itemsize, vec, limits, t)
    assert per * vec * itemsize == t.grid.chunk_bytes
    assert smem == t.block.scratch + (t.grid.ahead + t.grid.lag) * t.grid.chunk_bytes
    resident = most // (t.grid.lag + 1)
    assert resident % limits.sm_count == 0 and resident * (smem + BLOCK_RESERVED) <= limits.smem_per_sm * limits.sm_count
    gtop = most * per * vec  # the longest row: GRID_LAG + 1 chunks in every resident block
    for cols in (1, 1000, 10**5, gtop - 1, gtop):
        p = rows_plan(cols, itemsize, vec, limits, rows=7, method="grid")
        assert p.chunk == per * vec and p.chunks == math.ceil(cols / p.chunk) <= most
        assert p.smem + grid.GRID_STATIC_BYTES <= limits.smem_per_block
        assert p.grid == min(resident, 7 * p.chunks) and p.lines == 7
        assert (p.ahead, p.lag, p.block) == (t.grid.ahead, t.grid.lag, t.grid.threads)
    with pytest.raises(ValueError, match="grid"):
        rows_plan(gtop + 1, itemsize, vec, limits, method="grid")


def test_grid_rows_in_the_policy():
    p = rows_plan(2**20, rows=64)  # float32 rows of 4 MiB: 128 chunks of 32 KiB
    assert p.method == "grid" and p.chunks == 2**20 * 4 // t.grid.chunk_bytes
    assert p.grid == H200.sm_count * 3  # 3 blocks of 64 KiB and a little an SM
    assert rows_plan(2**20 + 4, rows=64).method == "online"  # past GRID_MAX_ROW_BYTES
    assert rows_plan(2**21, 2).method == "online"  # bfloat16 rows of the same bytes
    assert rows_plan(2**20, limits=A100).method == "online"  # not measured without clusters
    assert rows_plan(2**20, method="online").method == "online"


def test_grid_is_capped_for_huge_batches():
    for cols, method in ((2, "registers"), (5000, "registers"), (5000, "block"), (2, "online"),
                         (70000, "cluster")):
        p = rows_plan(cols, 4, 1, rows=2**40, method=method)
        assert p.grid <= MAX_GRID
    assert rows_plan(8000, 4, 1, rows=2**40).grid == MAX_GRID  # a block a row


@pytest.mark.parametrize(
    "itemsize,addresses,strides,vec",
    [(4, (0, 0), (64, 64), 4), (4, (4, 0), (64, 64), 1), (4, (8, 0), (64, 64), 2),
     (4, (0, 0), (63, 64), 1), (2, (0, 8), (64, 64), 4), (2, (0, 0), (64, 64), 8), (8, (0, 0), (3,), 1)],
)
def test_vector_width(itemsize, addresses, strides, vec):
    assert d.vector_width(itemsize, addresses, strides) == vec


def test_forced_methods():
    assert rows_plan(5000, method="online").method == "online"
    assert rows_plan(5, method="block").method == "block"
    with pytest.raises(ValueError, match="at most 1024 lanes"):
        rows_plan(10**5, method="registers")
    with pytest.raises(ValueError, match="shared memory"):
        rows_plan(10**6, method="block")
    with pytest.raises(ValueError, match="method must be"):
        d.plan(Layout(1, 2, 1, (2, 1), (2, 1)), 4, (0, 0), H200, method="fast")


def test_layout_policy():
    rows = Layout(10, 100, 1, (100, 1), (100, 1))
    assert d.plan(rows, 4, (0, 0), H200).method == "registers"
    assert d.plan(rows, 4, (0, 0), H200, method="columns").method == "columns"
    wide = Layout(1, 4096, 16384, (0, 16384), (0, 16384))
    p = d.plan(wide, 4, (0, 0), A100)  # no clusters: the two-pass kernel
    assert p.method == "columns" and p.vec == 4 and p.width * 4 == t.columns.strip_cols
    assert p.chunk * p.chunks >= 4096 > p.chunk * (p.chunks - 1)
    assert p.lines == 16384 // (4 * p.width) and t.columns.threads % p.width == 0
    resident = A100.sm_count * t.columns.blocks_per_sm
    assert p.per_group == group_size(p.lines, min(p.lines, math.ceil(t.columns.group_waves * resident / p.chunks)))
    few = d.plan(Layout(1, 4096, 20, (0, 20), (0, 20)), 2, (0, 0), H200, method="columns")
    assert (few.vec, few.width, few.lines) == (4, 8, 1)  # 5 packs: a strip of 8, 3 padding
    assert d.plan(wide, 2, (0, 0), A100).vec == t.columns.max_vec
    narrow = Layout(1, 4096, t.columns.min_inner - 1, (0, 31), (0, 31))
    assert d.plan(narrow, 4, (0, 0), H200) is None  # transposing copy, then rows
    assert d.plan(narrow, 4, (0, 0), H200, method="columns").method == "columns"
    assert d.plan(None, 4, (0, 0), H200) is None


def test_slab_policy():
    """A strided axis times a strip of the inner axis that fits a cluster goes to the slab
    kernel (the widest strip and then the smallest cluster with small slices); a longer axis,
    float64 or a GPU without clusters to the two-pass columns kernel; a forced slab that cannot
    run raises."""
    def axis0(n, inner):
        return Layout(1, n, inner, (0, inner), (0, inner))

    p = d.plan(axis0(4096, 16384), 4, (0, 0), H200)
    launch = p
    size, strip = launch.template[1], p.width * 16
    assert p.method == "slab" and p.vec == 4 and strip == t.slab.strip_bytes[0]
    assert p.lines == 16384 * 4 // strip and launch.grid == p.lines * size
    assert launch.block % 32 == 0 and (launch.block // 32) & (launch.block // 32 - 1) == 0  # warps: 2**k
    rows = max(size, t.slab.max_warps)  # pairs' rows of a round: the cluster's blocks or the warps
    assert launch.smem == t.slab.scratch + 16 * rows * (strip // 4) + math.ceil(4096 / size) * strip
    assert math.ceil(4096 / size) * strip <= t.slab.slice_bytes
    assert size == t.cluster.sizes[0] or math.ceil(4096 / (size // 2)) * strip > t.slab.slice_bytes
    # Past small slices on 16 blocks of the first width: the last width.
    long = d.plan(axis0(16384, 4096), 4, (0, 0), H200)
    assert (long.method, long.width * 16) == ("slab", t.slab.strip_bytes[-1])
    assert long.block in (128, 256)
    last = t.slab.strip_bytes[-1]
    room = H200.smem_per_block - t.slab.scratch - 16 * max(H200.max_cluster, t.slab.max_warps) * (last // 4)
    top = H200.max_cluster * (room // last)  # steps held
    assert d.plan(axis0(top, 4096), 4, (0, 0), H200).width * 16 == last
    assert d.plan(axis0(top + 1, 4096), 4, (0, 0), H200).method == "columns"
    narrow = d.plan(axis0(4096, 40), 4, (0, 0), H200)  # 10 packs of 4 in strips of `strip` bytes
    assert (narrow.method, narrow.width) == ("slab", strip // 16)
    assert narrow.lines == math.ceil(40 / (4 * narrow.width))
    odd = d.plan(axis0(100, 33), 4, (0, 0), H200)  # packs of 1
    assert (odd.vec, odd.width, odd.lines) == (1, strip // 4, math.ceil(33 / (strip // 4)))
    assert d.plan(axis0(100, 3), 4, (0, 0), H200, method="slab").width == 4  # 3 columns: 4 lanes
    for layout, itemsize, limits in ((axis0(4096, 16384), 4, A100), (axis0(4096, 16384), 8, H200),
                                     (axis0(top + 1, 4096), 4, H200)):
        assert d.plan(layout, itemsize, (0, 0), limits).method == "columns"
        with pytest.raises(ValueError, match="slab"):
            d.plan(layout, itemsize, (0, 0), limits, method="slab")


def test_columns_chunks_depend_on_the_axis_only():
    plans = [d.plan(Layout(o, 70000, 64, (70000 * 64, 64), (70000 * 64, 64)), 4, (0, 0), H200)
             for o in (1, 9)]  # 70000 steps of a 64-byte strip: more than a cluster holds
    assert {p.method for p in plans} == {"columns"}
    assert {(p.chunk, p.chunks) for p in plans} == {(plans[0].chunk, plans[0].chunks)}
    assert plans[0].chunks <= t.columns.max_chunks and plans[0].chunk >= t.columns.min_chunk


def test_templates_are_finite_and_cover_vector_widths():
    for itemsize in (2, 4, 8):
        t = list(d.templates(itemsize))
        assert len(t) == len(set(t))
        vecs = {tp[0] for k, tp in t if tp and k != "flat"}  # flat: (E, W), 16-byte packs
        assert vecs == {1 << k for k in range(int(math.log2(16 // itemsize)) + 1)}


def test_rows_off_16_byte_boundaries_take_their_spans_where_x_and_y_lie_alike():
    def rows(cols, ldx, ldy, xa=0, ya=0, itemsize=4, method=None):
        return d.plan(Layout(100, cols, 1, (ldx, 1), (ldy, 1)), itemsize, (xa, ya), H200, method)

    # float32 rows of 1001, contiguous (each row its own offset), y alike: wide rows in 16-byte
    # packs of spans of up to 1001 + 3 elements (251 packs, 4 a lane, 64 lanes)
    p = rows(1001, 1001, 1001)
    assert (p.method, p.vec, p.lanes, p.template) == ("registers", 4, 64, (4, 4, 0, 0))
    # bfloat16 1025: 1032 elements of span, 129 packs, 2 a lane, 96 lanes
    p = rows(1025, 1025, 1025, itemsize=2)
    assert (p.vec, p.lanes, p.template, p.block) == (8, 96, (8, 2, 0, 0), 96)
    # short rows of more than REGISTERS_SHORT_SPAN_MIN_BYTES from packs of at most
    # REGISTERS_SHORT_SPAN_MAX_PACK bytes have a kernel of their own: float32 301, spans of up to
    # 304 elements (76 packs, 32 lanes of 4 packs); bfloat16 1001, 1008 (126 packs), also from
    # packs of 2 elements (1002)
    p = rows(301, 301, 301)
    assert (p.method, p.vec, p.lanes) == ("registers", 4, 32)
    assert (p.kernel, p.template) == ("short_spans", (4, 4, 1, 32))
    for cols in (1001, 1002):
        p = rows(cols, cols, cols, itemsize=2)
        assert (p.kernel, p.template) == ("short_spans", (8, 4, 1, 32))
    # rows of 8-byte packs (REGISTERS_SHORT_SPAN_MAX_SHORT_PACK) take their spans where these stay
    # short: float32 302 (305 of span), bfloat16 1012 (1019), not float32 510 or bfloat16 1020
    # (spans of 513 and 1027: wide rows); shorter rows keep their packs; float32 509's span (512)
    # is short
    assert rows(302, 302, 302).kernel == "short_spans"
    assert rows(1012, 1012, 1012, itemsize=2).kernel == "short_spans"
    assert rows(256, 256, 256, 4, 4).template == (1, 8, 2, 32)
    assert rows(510, 510, 510).template == (2, 8, 1, 32)
    assert rows(1020, 1020, 1020, itemsize=2).template == (4, 8, 1, 32)
    assert rows(509, 509, 509).kernel == "short_spans"
    # a short row whose span passes the short rows: wide rows of 96 lanes
    p = rows(1023, 1023, 1023, itemsize=2)
    assert (p.kernel, p.template, p.lanes) == ("registers", (8, 2, 0, 0), 96)
    # not alike: the registers kernel in packs of what the rows allow
    p = rows(301, 302, 301, 4, 0)
    assert (p.kernel, p.template) == ("registers", (1, 16, 1, 32))
    # views at the same offset from 16-byte boundaries, row strides 16 bytes apart: alike
    assert rows(1001, 1009, 1013, 4, 20).vec == 4
    # not alike: x one element in, y fresh; row strides 4 bytes apart: packs of one element
    assert rows(1001, 1002, 1001, 4, 0).template == (1, 16, 0, 0)
    assert rows(1001, 1002, 1001).template == (1, 16, 0, 0)
    # past REGISTERS_WIDE_SPAN_MAX_BYTES, the block kernel in 16-byte packs, its shared memory
    # sized for cols + vec - 1
    top = {isz: b // isz for isz, b in t.registers.wide_span_max_bytes.items()}
    assert rows(top[4] - 1, top[4] - 1, top[4] - 1).template == (4, 4, 0, 0)
    assert rows(top[2] - 1, top[2] - 1, top[2] - 1, itemsize=2).template == (8, 2, 0, 0)
    p = rows(top[2] + 1, top[2] + 1, top[2] + 1, itemsize=2)
    assert (p.method, p.vec, p.smem) == ("block", 8, t.block.scratch + math.ceil((top[2] + 8) / 8) * 16)
    p = rows(top[4] + 1, top[4] + 1, top[4] + 1)
    assert (p.method, p.vec, p.smem) == ("block", 4, t.block.scratch + math.ceil((top[4] + 4) / 4) * 16)
    # clusters alike: slices of 50260 elements' packs; float64 rows in 2-element packs
    p = rows(50257, 50257, 50257)
    assert (p.method, p.vec, p.template) == ("cluster", 4, (4, 8))
    assert p.smem == t.block.scratch + math.ceil(12565 / 8) * 16
    assert rows(9001, 9001, 9001, itemsize=8).vec == 2
    # a spilling cluster
    cols = cluster_held_cols(H200, 2, 8) * 3 // 2 + 1
    p = rows(cols, cols, cols, itemsize=2, method="cluster")
    assert (p.kernel, p.vec) == ("spill", 8)
    # the grid and online kernels keep the rows' packs
    assert rows(2**20 + 1, 2**20 + 1, 2**20 + 1).vec == 1
    # a forced block whose span does not fit the block's shared memory, though the row would
    block_top = block_max_cols(H200, 4, 4)
    assert rows(block_top - 3, block_top - 3, block_top - 3, method="block").vec == 4
    with pytest.raises(ValueError, match="method='block'"):
        rows(block_top - 1, block_top - 1, block_top - 1, method="block")
    # wide rows whose span passes the registers kernel's lanes keep their packs
    assert rows(16383, 16383, 16383, method="registers").template == (1, 16, 0, 0)


def test_flat_rows():
    """Rows off 16-byte boundaries that lie back to back in x and y, alike about them, take the
    flat kernel up to FLAT_MAX_BYTES (types of at most 4 bytes); W lanes of exactly E values."""
    def rows(cols, itemsize=2, ldx=None, ldy=None, xa=0, ya=0, n=1000, method=None):
        ldx, ldy = cols if ldx is None else ldx, cols if ldy is None else ldy
        return d.plan(Layout(n, cols, 1, (ldx, 1), (ldy, 1)), itemsize, (xa, ya), H200, method)

    # (cols, itemsize) -> (E, W): one lane up to 8 values, then the fewest lanes of at most 8,
    # 32 lanes from 129 elements on
    for cols, isz, shape in ((3, 2, (3, 1)), (17, 2, (5, 4)), (33, 2, (5, 8)), (65, 2, (5, 16)),
                             (129, 2, (5, 32)), (501, 2, (16, 32)), (3, 4, (3, 1)), (65, 4, (5, 16))):
        p = rows(cols, isz)
        assert (p.method, p.kernel, p.template, p.vec) == ("flat", "flat", shape, 16 // isz)
        assert p.run % (32 // shape[1]) == 0 and p.run * cols * isz <= t.flat.warp_bytes
        assert p.smem == 4 * ((p.run * cols + 2 * (16 // isz) - 2) // (16 // isz)) * 16
    assert rows(1, 2).template == (1, 1) and rows(1, 2).run % 32 == 0
    # past FLAT_MAX_BYTES, aligned rows, float64, rows apart, x unlike y: other kernels
    assert rows(641, 2).template == (21, 32)
    assert rows(777, 2).method == rows(81, 4).method == "registers"
    assert rows(128, 2).method == rows(64, 4).method == "registers"  # 16-byte rows
    assert rows(3, 8).method == "registers"
    assert rows(129, 2, ldx=130, ldy=130).method == "registers"
    assert rows(129, 2, xa=2).method == "registers"
    # an aligned start with rows apart by a multiple of 16 bytes but x off y: not flat either
    assert rows(129, 2, ldx=136, ldy=129).method == "registers"
    # forced: any length up to FLAT_MAX_COLS and any type where the rows lie back to back (a
    # single row too); elsewhere None (the caller copies); longer rows name the limit
    assert rows(1024, 4, method="flat").template == (32, 32)
    assert rows(3, 8, method="flat").template == (3, 1)
    assert rows(129, 2, n=1, ldx=0, ldy=0, method="flat").method == "flat"
    assert rows(129, 2, ldx=130, ldy=130, method="flat") is None
    assert rows(129, 2, xa=2, method="flat") is None
    with pytest.raises(ValueError, match="1024 elements"):
        rows(1025, 2, method="flat")


def test_the_table_names_every_method():
    assert [e.method for e in d.ORDER] == [
        "slab", "columns", "flat", "registers", "tiles", "block", "cluster", "grid", "online"]
    assert sorted(d.METHODS) == sorted(e.method for e in d.ORDER)
    assert all(e.family.__name__ == f"cusoftmax.planning.{e.method}" for e in d.ORDER)


def test_plans_know_their_launch_arguments():
    """Each plan's kernel arguments after the arrays' addresses (the kernels' signatures), its
    workspace and whether it launches cooperatively."""
    rows = Layout(1000, 100, 1, (104, 1), (108, 1))

    def rows_of(method, cols=100, layout=None, itemsize=4):
        layout = layout or Layout(1000, cols, 1, (cols + 4, 1), (cols + 8, 1))
        return layout, d.plan(layout, itemsize, (0, 0), H200, method)

    head = (1000, 100, 104, 108)
    for method, last in (("registers", "lanes"), ("tiles", "lanes")):
        _, p = rows_of(method)
        assert p.args(rows) == (*head, getattr(p, last)) and p.workspace() is None and not p.cooperative
    flat_rows = Layout(1000, 100, 1, (100, 1), (100, 1))
    p = d.plan(flat_rows, 4, (4, 4), H200, "flat")
    assert p.args(flat_rows) == (1000, 100, 100, 100, p.run) and p.workspace() is None
    for method in ("block", "cluster"):
        assert rows_of(method)[1].args(rows) == head
    layout, p = rows_of("cluster", 2**21)
    assert p.kernel == "spill" and p.args(layout) == (1000, 2**21, 2**21 + 4, 2**21 + 8, p.held)
    layout, p = rows_of("grid", 20000)
    assert p.args(layout) == (1000, 20000, 20004, 20008, p.chunk, p.chunks, p.ahead, p.lag)
    assert p.cooperative and p.workspace() == (8 + 4000 + 16 * 1000 * (1 + p.chunks), 8 + 4000)
    layout, p = rows_of("online", 10**6)
    assert p.args(layout) == (1000, 10**6, 10**6 + 4, 10**6 + 8, p.chunk, p.chunks, p.per_group, p.held)
    assert not p.cooperative and p.workspace() == (
        8 + 4000 + 16 * 1000 * (1 + p.chunks) + 4 * 1000 * p.chunks, 8 + 4000 + 16 * 1000)
    axis0 = Layout(3, 4096, 1000, (4096 * 1000, 1000), (4096 * 1004, 1004))
    p = d.plan(axis0, 4, (0, 0), H200, "columns")
    lines = 3 * math.ceil(1000 / (p.width * p.vec))
    assert p.args(axis0) == (3, 4096, 1000, 4096 * 1000, 1000, 4096 * 1004, 1004, p.chunk, p.chunks,
                             p.per_group, p.width)
    head_bytes = 8 + (4 * lines + 7) // 8 * 8
    assert p.workspace() == (head_bytes + 16 * lines * p.width * p.vec * (1 + p.chunks), head_bytes)
    p = d.plan(axis0, 4, (0, 0), H200, "slab")
    assert p.args(axis0) == (3, 4096, 1000, 4096 * 1000, 1000, 4096 * 1004, 1004, p.width)
    assert p.cluster == p.size == p.template[1] and p.workspace() is None


def test_name_expressions_take_the_load_and_epilogue():
    from cusoftmax import _kernels
    from cusoftmax.planning import segment

    p = rows_plan(32, 4, 4)
    assert _kernels.name_expression(p.kernel, "float32", p.template, p.ops) == \
        "csm::registers<csm::Plain, csm::Softmax, float, 4, 1, 4, 8>"
    assert _kernels.name_expression("online", "bfloat16", (8,)) == \
        "csm::online<csm::Plain, csm::Softmax, __nv_bfloat16, 8>"
    assert set(_kernels.FILES) == {k for isz in (2, 4, 8)
                                   for k, _ in (*d.templates(isz), *d.reduce_templates(isz),
                                                *d.vjp_templates(isz), *d.topk_templates(isz),
                                                *d.normalize_templates(isz))} | {
        k for isz in (2, 4, 8) for k, _, _ in segment.templates(isz, t)}


def test_api_plans_are_keyed_by_the_tuning(monkeypatch):
    """The call-signature cache of _engine plans again under another tuning."""
    from cusoftmax import _engine

    monkeypatch.setattr(d, "device_limits", lambda device_id: H200)
    residency = H200.sm_count * (2048 // t.warp.block)
    args = ((2**30, 32), (32, 1), (32, 1), (1,), 2, (0, 0), 0, None)
    _engine._plan.cache_clear()
    try:
        assert _engine._plan(*args, t, "softmax")[1].grid == residency * t.warp.waves
        assert _engine._plan(*args, t.vary(warp_waves=3), "softmax")[1].grid == residency * 3
        logged = _engine._plan(*args, t, "log_softmax")[1]
        assert logged.ops == ("Plain", "LogSoftmax") and logged.grid == residency * t.warp.waves
    finally:
        _engine._plan.cache_clear()


def test_log_softmax_takes_softmax_plans_with_its_epilogue():
    """log_softmax runs softmax's plan for every layout and method: the same kernel, launch and
    bytes, only the epilogue op differs (kernels/ops.cuh)."""
    seen = set()
    for itemsize in (2, 4):
        for cols in [1, 3, 32, 301, 1000, 4096, 50257, 2**17, 2**20, 2**24]:
            layouts = [Layout(max(1, 2**26 // cols), cols, 1, (cols, 1), (cols, 1)),
                       Layout(1, cols, 4096, (cols * 4096, 4096), (cols * 4096, 4096))]
            for layout in layouts:
                for method in (None, *d.METHODS):
                    try:
                        soft = d.plan(layout, itemsize, (0, 0), H200, method)
                    except ValueError:
                        with pytest.raises(ValueError):
                            d.plan(layout, itemsize, (0, 0), H200, method, op="log_softmax")
                        continue
                    logged = d.plan(layout, itemsize, (0, 0), H200, method, op="log_softmax")
                    if soft is None:
                        assert logged is None
                        continue
                    assert soft.ops == ("Plain", "Softmax")
                    assert logged == dataclasses.replace(soft, ops=("Plain", "LogSoftmax"))
                    seen.add(soft.kernel)
    assert seen >= {"registers", "tiles", "block", "cluster", "online", "columns", "slab"}, seen


def test_masked_plans_by_row_length():
    """A masking load (where=): the table's masked column. Rows in registers up to
    masked_registers_max_cols, longer rows in a cluster (a block where clusters are not, or below
    cluster_min_bytes) with a keep byte staged beside each element; none where a spill would be
    needed, none for a strided axis. Only the kernels of LOAD_KERNELS."""
    def masked(cols, limits=H200, itemsize=4, tuning=None, rows=64):
        layout = Layout(rows, cols, 1, (cols, 1), (cols, 1))
        return d.plan(layout, itemsize, (0, 0), limits, None, tuning, "softmax", "Masked")

    most = t.masked.registers_max_cols
    for itemsize in (2, 4, 8):
        assert masked(32, itemsize=itemsize).kernel == "registers"
        assert masked(most, itemsize=itemsize).kernel == "registers"
        longer = masked(most + 1, itemsize=itemsize)
        assert longer.kernel == "cluster" and longer.ops == ("Masked", "Softmax")
    # a keep byte an element beside each slice: float32 slices of 5 bytes an element
    plain = d.plan(Layout(64, 3 * most, 1, (3 * most, 1), (3 * most, 1)), 4, (0, 0), H200)
    staged = masked(3 * most)
    per = math.ceil(3 * most / 4 / staged.size) * 4
    assert staged.smem == t.block.scratch + 5 * per
    assert staged.size >= plain.size
    assert masked(2**20) is None  # a spill's plan: array operations
    assert masked(2**21, itemsize=8) is None
    # no clusters: the block while it holds the row
    assert masked(most + 1, limits=A100).kernel == "block"
    assert masked(most + 1, limits=A100).smem == t.block.scratch + 5 * (most + 4)
    assert masked(40000, limits=A100) is None
    # without registers' rows: block below cluster_min_bytes, then clusters
    staged_only = t.vary(masked_registers_max_cols=0)
    assert masked(1000, tuning=staged_only).kernel == "block"
    assert masked(t.cluster.min_bytes // 4 + 4, tuning=staged_only).kernel == "cluster"
    strided = Layout(1, 1000, 4096, (1000 * 4096, 4096), (1000 * 4096, 4096))
    assert d.plan(strided, 4, (0, 0), H200, None, None, "softmax", "Masked") is None
    for entry in d.ORDER:
        assert (entry.masked is not None) == (entry.method in d.LOAD_KERNELS["Masked"]), entry.method


def test_reduce_plans_cover_every_row_and_axis():
    """logsumexp's own order (planning/reduce.py): warps' lanes for short rows, chunked blocks
    for long ones, strips of columns for a strided axis; chunks cover the slice exactly once."""
    def rows(r, n, itemsize=4):
        return d.reduce_plan(Layout(r, n, 1, (n, 1), (n, 1)), itemsize, 0, H200, t)

    short = rows(2**20, 32)
    assert short.args(Layout(2**20, 32, 1, (40, 1), (40, 1))) == (2**20, 32, 40)  # the kernel's
    # a row of 8 packs in 2 lanes of float32's reduce_lane_min_packs = 4 packs, one row at a
    # time; lanes in reduce_lane_warp_lanes' range (2 to 7): 2 steps in flight, copied by the
    # warp (WarpRing), in a ring of 3 steps of 4 packs of 256 threads' 16 bytes
    assert short.kernel == "reduce_lanes" and short.template == (4, 2, 4, 1, 2, 1) and short.workspace() is None
    assert short.smem == 3 * 4 * 256 * 16
    assert rows(2**20, 64, 2).template == (8, 2, 4, 1, 2, 1)  # bfloat16's too
    # a lane a row (below reduce_lane_warp_lanes): the next step in registers
    assert rows(2**20, 32, 2).template == (8, 1, 4, 1, 0, 0) and rows(2**20, 32, 2).smem == 0
    assert rows(2**20, 4).template == (4, 1, 1, 2, 0, 0)  # one pack: one lane, two rows at a time
    odd = d.reduce_plan(Layout(2**20, 7, 1, (7, 1), (7, 1)), 2, 2, H200, t)  # 2-byte packs
    assert odd.template == (1, 2, 4, 1, 0, 0) and odd.smem == 0  # one step ahead in registers
    # 8 lanes (past reduce_lane_warp_lanes) to reduce_lane_staged_lanes: the next step in registers
    assert rows(2**20, 128).template == (4, 8, 4, 1, 0, 0) and rows(2**20, 128).smem == 0
    assert rows(2**20, 256).template == (4, 16, 4, 1, 0, 0) and rows(2**20, 256).smem == 0
    own = t.vary(reduce_lane_warp_lanes=(1, 1))
    assert d.reduce_plan(rows_layout(2**20, 32), 4, 0, H200, own).template == (4, 2, 4, 1, 0, 0)
    # a warp's 32 lanes: 2 steps in flight in a ring of 3 steps of 4 packs of 256 threads' 16 bytes
    assert rows(2**20, 512, 2).template == (8, 16, 4, 1, 0, 0) and rows(2**20, 512, 2).smem == 0
    assert rows(2**20, 1024, 2).template == (8, 32, 4, 1, 2, 0) and rows(2**20, 1024, 2).smem == 3 * 4 * 256 * 16
    assert rows(2**20, 65, 2).template == (1, 32, 4, 1, 1, 0) and rows(2**20, 65, 2).smem == 0  # 2-byte packs
    # no more steps in flight than keep the launch bounds' 4 blocks an SM resident
    deep = d.reduce_plan(rows_layout(2**20, 1024), 2, 0, H200, t.vary(reduce_lane_stages=7))
    assert deep.stages == 2 and 4 * (deep.smem + 1024) <= H200.smem_per_sm < 4 * (deep.smem + 16384 + 1024)
    assert short.ops == ("Plain", "LogSumExp")
    states = d.reduce_plan(Layout(2**20, 32, 1, (32, 1), (32, 1)), 4, 0, H200, t, "slice_state")
    assert states == dataclasses.replace(short, ops=("Plain", "SliceState"))
    assert rows(2**16, 512).template == (4, 32, 4, 1, 2, 0)  # up to reduce_lane_max_packs a lane
    assert rows(2**16, 2048).template == (4, 32, 4, 1, 2, 0)  # streamed by a warp: many rows
    assert rows(2**16, 2048).smem == 3 * 4 * 256 * 16
    assert rows(2**12, 2048).kernel == "reduce_chunks"  # too few rows for a warp each
    assert rows(2**16, 8193).kernel == "reduce_chunks"  # past reduce_warp_max_bytes
    for r, n in [(2**12, 8192), (1, 2**27), (3, 10**6 + 3), (64, 2**24)]:
        p = rows(r, n)
        assert p.kernel == "reduce_chunks" and p.chunk % p.vec == 0
        assert (p.chunks - 1) * p.chunk < n <= p.chunks * p.chunk
        nbytes, head = p.workspace()
        if p.chunks == 1:
            assert (nbytes, head) == (8, 0)
        else:
            assert head == (4 * r + 7) // 8 * 8 and nbytes == head + 24 * r * p.chunks
    assert rows(1, 2**27).chunks >= 2 * H200.sm_count  # one row spread over the GPU
    assert rows(2**12, 8192).chunks == 1
    col = d.reduce_plan(Layout(1, 4096, 16384, (0, 16384), (0, 16384)), 4, 0, H200, t)
    assert col.kernel == "reduce_columns" and col.width == 32 and col.vec == 2
    assert (col.chunks - 1) * col.chunk < 4096 <= col.chunks * col.chunk
    narrow = d.reduce_plan(Layout(10, 10**6, 3, (3 * 10**6, 3), (3 * 10**6, 3)), 4, 0, H200, t)
    assert narrow.vec == 1 and narrow.width == 4 and narrow.chunks > 1
    assert d.reduce_plan(None, 4, 0, H200, t) is None


def rows_layout(rows, n):
    return Layout(rows, n, 1, (n, 1), (n, 1))


def test_vjp_plans_by_row_length():
    """The backward passes' own order (planning/vjp.py): a warp's lanes for rows of up to 64
    packs (128 in float32), a block sized to longer rows, chunks of vjp_chunk_bytes in the two-pass schedule for
    fewer rows than 2 an SM."""
    def plan(rows, n, itemsize=4):
        return d.vjp_plan(rows_layout(rows, n), itemsize, (0, 0, 0), H200, t)

    assert plan(4096, 32).kernel == "vjp_lanes" and plan(4096, 32).template == (4, 8, 1, 2)
    assert plan(4096, 32).ops == ("Plain", "SoftmaxVjp")
    log = d.vjp_plan(rows_layout(4096, 32), 4, (0, 0, 0), H200, t, "log_softmax_vjp")
    assert log.ops == ("Plain", "LogSoftmaxVjp")
    assert plan(4096, 256).template == (4, 32, 2, 1)
    assert plan(4096, 512).template == (4, 32, 4, 1)  # float32: up to 4 packs of each a lane
    assert plan(4096, 516).kernel == "vjp_block" and plan(4096, 516).block == 64
    assert plan(4096, 1024, 2).kernel == "vjp_block" and plan(4096, 1024, 2).block == 32  # 2 packs
    assert plan(4096, 2048).block == 128 and plan(4096, 4096).block == 256
    assert plan(4096, 2048, 2).block == 64  # bfloat16: 8 elements a pack
    # a wave's rows within vjp_block_l2_bytes: 2 blocks an SM of 64 KiB rows, 1 of 128 KiB; none
    # where 4 fit, or not even 1
    smem, unheld = H200.smem_per_sm, t.vary(vjp_hold_min_bytes=2**40)

    def block(rows, n, itemsize=4):  # vjp_block's plan where vjp_hold would take the row
        return d.vjp_plan(rows_layout(rows, n), itemsize, (0, 0, 0), H200, unheld)

    assert block(8192, 8192).smem == smem // 3 and block(2048, 32768, 2).smem == smem // 2
    assert plan(8192, 8192, 2).smem == 0 and block(2048, 32768).smem == 0
    assert plan(4096, 2**20).block == 256
    assert plan(2 * H200.sm_count, 2**20).kernel == "vjp_block"
    few = plan(64, 2**20)
    assert few.kernel == "vjp_chunks" and few.chunk * 4 == t.vjp.chunk_bytes and few.chunks == 64
    assert few.grid == H200.sm_count * 4 and 64 % few.per_group == 0  # resident blocks; whole groups
    assert few.per_group * few.chunks >= t.vjp.group_waves * few.grid
    assert few.args(Layout(64, 2**20, 1, (2**20, 1), (2**20, 1))) == (64, 2**20, 16384, 64, few.per_group)
    assert few.workspace() == (8 + 256 + 16 * 64 * 65, 8 + 256)  # (bytes, head zeroed: tickets, counts)
    odd = plan(3, 9001, 2)  # bfloat16, an odd row: packs of 1, the last chunk short
    assert odd.kernel == "vjp_chunks" and odd.vec == 1 and odd.chunk == 32768 and odd.chunks == 1
    assert plan(1, 2**31 + 5).chunks == math.ceil((2**31 + 5) / 16384)
    p = plan(4096, 3000)
    assert p.inputs == 2 and p.args(Layout(4096, 3000, 1, (3000, 1), (3000, 1))) == (4096, 3000)


def test_vjp_hold_plans():
    """vjp_hold: rows of vjp_hold_min_bytes of each array and more, up to vjp_hold_threads
    threads of vjp_hold_packs packs, an SM's residency of them at least (as many blocks an SM as
    registers and shared memory hold); dy's packs in shared memory, whole warps, a block a row."""
    def plan(rows, n, itemsize=4):
        return d.vjp_plan(rows_layout(rows, n), itemsize, (0, 0, 0), H200, t)

    assert t.vjp.hold_min_bytes == 32768 and t.vjp.hold_threads * t.vjp.hold_packs == 8192
    full = plan(2048, 32768)
    assert full.kernel == "vjp_hold" and full.template == (4, 8) and full.block == 1024
    assert full.smem == 1024 * 8 * 16 and full.grid == 2048
    assert full.args(rows_layout(2048, 32768)) == (2048, 32768)
    half = plan(2048, 16384)  # two blocks an SM: registers (1024 threads' worth) and shared memory
    assert half.kernel == "vjp_hold" and half.block == 512 and half.grid == 2048
    assert plan(2048, 8188).kernel == "vjp_block"  # under 32 KiB a row
    quarter = plan(8192, 8192)  # four blocks an SM
    assert quarter.kernel == "vjp_hold" and quarter.block == 256 and quarter.grid == 8192
    assert plan(4 * H200.sm_count - 1, 8192).kernel != "vjp_hold"  # under four blocks an SM
    assert plan(2048, 32772).kernel == "vjp_block"  # 8193 packs
    assert plan(2048, 16383).kernel == "vjp_block"  # packs of 1: 8192 elements at most
    assert plan(2048, 65536, 2).block == 1024 and plan(2048, 32768, 2).block == 512
    odd = plan(1000, 16388)  # 4097 packs: 17 warps, one block an SM
    assert odd.kernel == "vjp_hold" and odd.block == 544 and odd.grid == 1000
    assert plan(131, 32768).kernel == "vjp_chunks"  # fewer rows than SMs
    assert plan(263, 16384).kernel == "vjp_chunks"  # fewer than its two an SM


def test_vjp_plans_of_a_strided_axis():
    """vjp_columns: strips of columns_strip_cols columns (fewer where the inner run is shorter),
    chunks of vjp_columns_chunk_bytes of each array, groups of vjp_group_waves waves of items;
    an inner run shorter than columns_min_inner, or strides no view takes: None (rows copied)."""
    def plan(outer, n, inner, itemsize=4, addresses=(0, 0, 0)):
        layout = Layout(outer, n, inner, (n * inner, inner), (n * inner, inner))
        return d.vjp_plan(layout, itemsize, addresses, H200, t)

    p = plan(1, 4096, 16384)
    assert p.kernel == "vjp_columns" and p.template == (4,) and p.width == 64
    assert p.chunk * 64 * 4 * 4 == t.vjp.columns_chunk_bytes and p.chunks == math.ceil(4096 / p.chunk)
    assert p.lines == 16384 // 256 and p.grid == H200.sm_count * t.vjp.columns_blocks_per_sm
    assert p.per_group * p.chunks >= t.vjp.group_waves * p.grid and p.lines % p.per_group == 0
    layout = Layout(1, 4096, 16384, (4096 * 16384, 16384), (4096 * 16384, 16384))
    assert p.args(layout) == (1, 4096, 16384, 4096 * 16384, 16384, p.chunk, p.chunks, p.per_group, 64)
    assert p.workspace() == two_pass_workspace(64, p.chunks, 256)
    bf = plan(3, 1000, 40, 2)  # bfloat16, 40 columns: 8 a pack, a strip of 8 packs, one short
    assert bf.vec == 8 and bf.width == 8 and bf.lines == 3 and bf.chunk == t.vjp.columns_chunk_bytes // 128
    odd = plan(2, 7, 33, 8, (8, 0, 0))  # float64 off a 16-byte boundary: packs of 1
    assert odd.vec == 1 and odd.width == 64 and odd.chunks == 1
    assert plan(8, 100, 31) is None  # a short inner run: rows copied
    assert plan(1, 10, 64, 4, (0, 0, 0)).ops == ("Plain", "SoftmaxVjp")


def test_normalize_plans_cut_rows_into_pieces():
    """The normalize family (planning/normalize.py): contiguous rows only; pieces whole walk
    steps of about normalize_piece_bytes, never longer than the row's steps; the grid at most
    normalize_waves residencies and no more blocks than items; x, its (m, k) pairs, y."""
    def plan(rows, n, ldx=None, itemsize=4, addresses=(0, 0), op="softmax", load="Plain"):
        layout = Layout(rows, n, 1, (n if ldx is None else ldx, 1), (n, 1))
        return d.normalize_plan(layout, itemsize, addresses, H200, t, op, load)

    step = t.normalize.threads * 4 * t.walk.batch
    p = plan(64, 2**21)
    assert p.kernel == "normalize" and p.template == (4,) and p.block == t.normalize.threads
    assert p.piece == t.normalize.piece_bytes // 4 and p.piece % step == 0
    assert p.grid == H200.sm_count * (2048 // t.normalize.threads) * t.normalize.waves
    assert p.inputs == 2 and p.outputs == 1 and p.workspace() is None
    assert p.args(Layout(64, 2**21, 1, (2**24, 1), (2**21, 1))) == (64, 2**21, 2**24, 2**21, p.piece)
    short = plan(3, 5)  # rows 5 elements apart: one element a pack, one piece a row
    assert short.template == (1,) and short.piece == t.normalize.threads * 4 and short.grid == 3
    assert plan(8, 1000, ldx=1003).template == (1,)  # rows at an odd stride: one element a pack
    assert plan(8, 1000, itemsize=2).template == (8,) and plan(8, 1000, itemsize=2).piece == 8192
    assert plan(4, 100, op="log_softmax", load="Scaled").ops == ("Scaled", "LogSoftmax")
    assert d.normalize_plan(Layout(4, 100, 3, (300, 3), (300, 3)), 4, (0, 0), H200, t) is None
    assert d.normalize_plan(None, 4, (0, 0), H200, t) is None


def test_topk_plans_by_row_length_and_k():
    """softmax_topk's own order (planning/topk.py): a warp's lanes for rows of up to 32 *
    topk_lane_elements and k up to 32; blocks streaming longer rows, cut into chunks where rows are few; array operations
    (None) past k = 256."""
    def plan(rows, n, k, itemsize=4, address=0, ldx=None, op="softmax"):
        return d.topk_plan(rows, n, n if ldx is None else ldx, k, False, itemsize, address, H200, t, op)

    moe = plan(65536, 256, 8)
    per = t.topk.lane_elements
    assert moe.kernel == "topk_lanes" and moe.template == (256 // per, per, 32)
    assert moe.ops == ("Plain", "Softmax") and moe.outputs == 2 and moe.workspace() is None
    assert moe.args() == (65536, 256, 256, 8, 0)
    assert plan(65536, 8, 2).template == (1, per, min(32, per))
    assert plan(100, 64, 4).template == (64 // per, per, 32)
    assert plan(100, 64, 4, op="log_softmax").ops == ("Plain", "LogSoftmax")
    assert plan(100, 256, 33).kernel == "topk_block"
    assert plan(100, 32 * per, 8).kernel == "topk_lanes" and plan(100, 32 * per + 1, 8).kernel == "topk_block"
    vocab = plan(256, 262144, 64)
    assert vocab.kernel == "topk_block" and vocab.template == (4, 64)
    assert vocab.chunks == math.ceil(t.topk.items_per_sm * H200.sm_count / 256) == 3
    assert vocab.chunk * vocab.chunks >= 262144 and vocab.chunk % 4 == 0
    beam = plan(8, 50257, 16, itemsize=2, address=2, ldx=50257)  # off 16-byte boundaries: elements
    assert beam.template == (1, 32) and beam.chunks == 50257 // t.topk.min_chunk == 12
    nbytes, head = beam.workspace()
    assert head == 32 and nbytes == head + 8 * 12 * (8 * 32 + 16)
    assert plan(1, 2**20, 256).chunks == t.topk.max_chunks and plan(1, 2**20, 256).template == (4, 256)
    assert plan(1, 2**20, 65).template == (4, 256) and plan(1, 2**20, 64).template == (4, 64)
    assert plan(10, 1000, 257) is None and plan(10, 300, 256).kernel == "topk_block"
    for p, itemsize in ((moe, 4), (vocab, 4), (beam, 2)):
        assert (p.kernel, p.template) in set(d.topk_templates(itemsize))

