"""THE dispatch policy: (layout, dtype, addresses, device limits) -> a plan: one kernel launch.

Read top-down, the choice is::

    rows off 16-byte boundaries that lie back to
    back in x and y (alike about them), of at most
    FLAT_MAX_BYTES                                 -> "flat"      runs of rows staged per warp in
                                                                  shared memory by 16-byte
                                                                  copies, 1 read + 1 write
    rows of at most REGISTERS_MAX_COLS elements or
    REGISTERS_MAX_BYTES                            -> "registers" row in a warp's registers, 1 read
                                                                  + 1 write
    longer rows of 16-byte packs of at most
    REGISTERS_WIDE_MAX_BYTES (an SM's blocks holding
    REGISTERS_WIDE_MIN_RESIDENT_BYTES of rows), or
    of up to REGISTERS_WIDE_NARROW_VEC elements a
    pack and REGISTERS_WIDE_NARROW_MAX_COLS, or off
    16-byte boundaries with x's and y's rows alike
    (their spans' 16-byte packs) and at most
    REGISTERS_WIDE_SPAN_MAX_BYTES                  -> "registers" row in a block's registers
    rows of at most TILES_MAX_BYTES                -> "tiles"     short rows staged per warp in
                                                                  shared memory, 1 read + 1 write
    rows of at most CLUSTER_MIN_BYTES that fit one
    block's shared memory                          -> "block"     row in shared memory, 1 + 1
    rows that fit a cluster's shared memory (sm_90+,
    CLUSTER_SIZES blocks) with CLUSTER_BLOCKS_PER_SM
    of its blocks on an SM                         -> "cluster"   row cut over a thread-block
                                                                  cluster, 1 read + 1 write
    rows up to (1 + CLUSTER_SPILL_MAX) times that  -> "cluster"   each block holds what it can,
                                                                  reads the rest of its slice
                                                                  twice
    longer float32 rows of at most GRID_MAX_ROW_BYTES
    (GPUs with clusters)                           -> "grid"      chunks held in blocks all over
                                                                  the GPU, 1 read + 1 write
    rows that fit one block (GPUs without clusters)-> "block"
    any other rows                                 -> "online"    (m, d) per chunk, 2 reads + 1
                                                                  write (the second may hit L2)
    a strided reduced axis, inner run >= COLUMNS_MIN_INNER, the axis times a strip of
    the inner run fits a cluster's shared memory   -> "slab"      strips held on chip over a
                                                                  cluster, 1 read + 1 write
    a longer strided reduced axis, inner run >= COLUMNS_MIN_INNER
                                                   -> "columns"   (m, d) per chunk of the axis,
                                                                  2 reads + 1 write, no transpose
    a strided reduced axis, short inner run        -> contiguous copy, then the row policy

Rows off 16-byte boundaries whose x and y lie alike about them (contiguous rows of odd length)
take 16-byte packs of each row's aligned span in the registers kernel's wide rows, its short rows
past REGISTERS_SHORT_SPAN_MIN_BYTES (from packs of at most REGISTERS_SHORT_SPAN_MAX_PACK bytes, or
of REGISTERS_SHORT_SPAN_MAX_SHORT_PACK where the span stays short), and the block and cluster
kernels (the tiles, grid and online kernels keep the packs the rows' alignment allows).

A forced ``method`` skips the choice (a forced "grid" takes any row whose chunks the resident
blocks hold); a method that cannot run on the input (a row too long for
registers or shared memory, clusters on a GPU without them) raises ``ValueError`` naming the
limit. Beside every number: the measurement that chose it (BENCHMARKS.md has the runs), or
"none yet" where it is a first value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

METHODS = ("registers", "flat", "tiles", "block", "cluster", "grid", "online", "columns", "slab")

# Register-resident rows: at most REGISTERS_MAX_PER_LANE values of the compute type per lane and
# at most REGISTERS_MAX_LANES lanes (one block) per row. Evidence: register budget (32 values +
# ~30 of state keeps 16 warps per SM resident); not tuned.
REGISTERS_MAX_PER_LANE = 32
REGISTERS_MAX_LANES = 1024
SHORT_COLS = 32 * REGISTERS_MAX_PER_LANE  # rows up to this many elements fit one warp
# The default takes rows of up to REGISTERS_MAX_COLS elements in registers, then rows of up to
# TILES_MAX_BYTES to the tiles kernel. Evidence: H200, 2026-11-30, `tools/gpu_check.sh tune`
# (second session, run 3), fraction of copy, registers / tiles / block: float32 512 0.96 / 0.95
# / 0.75, 1024 0.93 / 0.96 / 0.98, 2048 0.91 / 0.98 / 0.99; bfloat16 512 0.85 / 0.82 / 0.48,
# 1024 0.75 / 0.92 / 0.69, 2048 0.73 / 0.95 / 0.91, 4096 0.64 / 0.91 / 0.98; rows of 32 to 256
# within 0.02 of each other in both kernels (float32 from 128 up). Rows of several warps in
# registers never won then (bfloat16 4096: 0.64, float32 16384: 0.73; a block looping over rows
# at 64 registers a thread); a row a block at 32 registers does (REGISTERS_WIDE_MAX_BYTES).
# Fifth session, run 5, registers / tiles: rows of 1024, bfloat16 0.98 / 0.94, float16 0.98 /
# 0.95, float32 0.96 / 0.96; rows of 512, bfloat16 0.96 / 0.90, float16 0.97 / 0.90, float32
# 0.93 / 0.90. Hence rows of up to REGISTERS_MAX_BYTES (1024 half-type elements) in registers too.
# Rows of exactly 4 KiB went to the block kernel (so TILES_MAX_BYTES is 4095: rows shorter than
# 4 KiB; now the wide registers rows take those of 16-byte packs). Evidence: H200, 2026-11-30,
# run s11-5, three rounds each, fraction of copy / Triton's time over ours, tiles against block:
# float32 1024 0.97, 0.97, 0.99 / 0.97, 0.98, 0.97 against 1.00, 1.01, 0.99 / 1.00, 1.00, 0.99;
# bfloat16 2048 0.97, 0.96, 0.96 / 0.97, 0.96, 0.97 against
# 0.97, 0.97, 0.97 / 0.98, 0.98, 0.98; float16 2048 0.95, 0.96, 0.96 / 0.97, 0.96, 0.97 against
# 0.97, 0.98, 0.97 / 0.98, 0.98, 0.98. Shorter rows: tiles ahead (runs s5-8, s5-9: float32 768
# 0.92 / 0.94, 544 0.97 / 0.71; bfloat16 1792 1.00 / 0.96, 1088 0.98 / 0.74).
REGISTERS_MAX_COLS = 512
REGISTERS_MAX_BYTES = 2048
TILES_MAX_BYTES = 4095
# Wide rows (longer than the short rows above, so more than a warp's): REGISTERS_WIDE_VALUES
# values per lane, a row a block of whole warps, up to REGISTERS_MAX_LANES lanes. Evidence:
# ptxas (sm_90): at 16 values and 16-byte packs the kernel fits its bounds' 32 registers a thread
# (float32, bfloat16) without spills, so 2048 threads an SM; 32 values spilled under 64 (up to 1
# KiB of stack). The default takes rows of 16-byte packs of up to REGISTERS_WIDE_MAX_BYTES there
# (before: the tiles kernel, then the block kernel at 4 KiB). Evidence: H200, 2026-12-01. Run
# s22-5, a probe kernel (a row a block of 128 threads, 16-byte packs, one barrier a reduction)
# reached Triton's time (Triton's over its: bfloat16 2048 1.005, 1.006, 1.002; float16 2048
# 1.000, 1.000, 0.997) where the policy's block kernel did not (0.997, 0.993, 0.991; 0.992,
# 0.990, 0.989); 64 threads: float32 1024 1.004, 1.000, 1.009 against 0.995, 0.992, 0.997.
# Run s22-6 (two rounds; us, this kernel by the policy against the kernel the policy took
# before, forced): float32 576 130.5, 130.3 against tiles 132.6, 133.5; 768 130.1, 130.3
# against 131.8, 133.3; 1024 129.9, 130.5 against block 131.1, 133.2 (s22-1, the policy's block:
# 130.7, 130.9, 130.6, 130.9); bfloat16 1536 68.2, 68.9 against tiles 69.5 each; 2048 68.1 each
# against block 68.7, 68.5 (s22-1: 68.5, 68.4, 68.6, 68.6; Triton's time over ours now 1.000,
# 0.999, before 0.988 to 0.994); float16 1536 68.4, 68.7 against 69.6 each; 2048 68.3, 68.2
# against 68.7, 68.8. Longer rows, forced against the policy's block kernel: bfloat16 3072 68.1
# each against 68.9 each, 4096 68.8, 69.1 against 69.1 each, 8192 71.8, 71.6 against 69.6 each;
# float16 3072 68.3, 69.0 against 68.9, 68.8; float32 1536 130.1, 133.8 against 130.4, 130.5,
# 2048 131.3, 136.3 against 130.8, 130.9; so the block kernel keeps them. Run s22-9 (two rounds,
# us, this kernel by the policy against forced tiles) past the short rows: float32 520 131.2,
# 131.1 against 135.2 each; 600 132.1, 131.8 against 135.4 each; 700 132.5, 131.7 against 144.5,
# 138.0; 1000 131.6, 131.5 against 135.1, 135.0; bfloat16 2000 68.8, 68.4 against 71.0 each;
# float16 2000 68.9, 68.8 against 71.1, 71.0.
# Of those, a row whose lanes' blocks, as many as an SM holds (MAX_BLOCKS_PER_SM, THREADS_PER_SM),
# hold fewer than REGISTERS_WIDE_MIN_RESIDENT_BYTES of rows stays with the tiles kernel. Evidence:
# H200, 2026-12-01, run s22-11 (two rounds, us, forced registers against forced tiles; bfloat16
# then float16; 96 lanes, so 21 blocks an SM): rows of 1032 (43 KiB on an SM) 76.7, 76.8 against
# 73.2, 73.5; 77.9, 78.1 against 73.4, 73.5; 1088 (45 KiB) 73.9, 74.1 against 71.0, 71.3; 75.2,
# 75.4 against 70.6 each; 1216 (50 KiB) 70.3, 70.1 against 69.9, 70.0; 71.0, 70.9 against 70.0,
# 70.2; 1344 (55 KiB) 68.3, 68.2 against 70.0, 70.1; 68.2, 68.3 against 70.0, 70.2; 1408 to 1536
# (58 to 63 KiB) 67.4 to 68.3 against 69.0 to 69.9. Float32 rows past 512 elements have 64 lanes,
# 32 blocks an SM, at least 64 KiB.
# Rows of narrower packs (REGISTERS_WIDE_NARROW_VEC elements or fewer, types of up to 4 bytes: rows
# not 16-byte aligned) take the wide rows from the short rows' end up to
# REGISTERS_WIDE_NARROW_MAX_COLS elements (at most 320 lanes: at 64 registers a thread, three
# blocks an SM). Evidence: H200, 2026-12-01, run s22-11 (one round, us, forced registers against
# the policy's kernel then; torch's time over the registers kernel's): float32 one element
# (4 bytes) a pack: 517 177.1 against tiles 189.6 (torch 0.82), 777 145.9 against 183.2, 1001
# 135.6 against 180.2, 2001 134.7 against block 171.8, 3001 145.9 against 163.8, 5001 157.3
# against 171.4 (torch 1.34), 8001 (512 lanes, two blocks an SM) 163.5 against 165.9, 12001 226.8
# against 161.5, 16001 215.8 against 158.5; two elements a pack: 1002 132.9 against 146.8, 3002
# 132.9 against 145.5; bfloat16 one element a pack: 1025 156.6 against 222.7, 1537 140.9 against
# 230.1 (torch's time over the tiles kernel's 0.69), 2001 125.4 against 246.7, 3001 139.8 against
# 205.1, 5001 148.3 against 196.0, 9001 (576 lanes, one block an SM) 242.0 against block 204.1,
# 16001 198.1 against 243.6; two a pack: 1030 111.1 against 121.6; four a pack (8 bytes, the tiles
# and block kernels' copies are whole packs): 1100 87.4 against 82.7, 4100 93.1 against 75.8.
REGISTERS_WIDE_VALUES = 16
REGISTERS_WIDE_MAX_BYTES = 4096
REGISTERS_WIDE_MIN_RESIDENT_BYTES = 52 * 1024
REGISTERS_WIDE_NARROW_VEC = 2
REGISTERS_WIDE_NARROW_MAX_COLS = 320 * REGISTERS_WIDE_VALUES
# Rows off 16-byte boundaries whose x and y lie alike take their spans' 16-byte packs (plan_rows):
# past the short rows, the wide rows up to these bytes a row (by element size), the block and
# cluster kernels after them (the tiles kernel takes no spans). Evidence: H200, 2026-12-01, runs
# s23-3 and s23-5 (us, forced registers against block, contiguous rows): float32 1001 131.9, 133.7
# against 137.3, 139.3; 1537 132.3 against 137.8; 2001 131.8, 133.4 against 137.0, 138.5; 3001
# 134.0 against 137.3; 4001 132.9, 134.3 against 137.7, 139.0; 5001 132.9, 135.1 against 137.8,
# 139.7; bfloat16 1025 86.7 against 136.7; 1537 79.5 against 107.8; 2001 78.8 against 77.9; 2041
# 76.3 against 76.4; 2049 83.4 against 94.3; 3001 84.4, 84.3 against 75.9, 75.4; 5001 87.9, 87.1
# against 74.4, 74.5; 8001 85.2 against 73.8. Half types, with the spans' first and last packs read
# whole (kernels/common.cuh, load_span_word), runs s25-8 and s25-9 (us, bfloat16, then float16;
# 8192 bytes against 4096, then against 6144, three and two rounds): 2049 81.0, 80.6, 81.0
# against 92.8, 93.1, 92.8 (float16 79.9, 80.5, 80.1 against 91.8, 91.8, 91.6); 2100 78.1, 78.5,
# 78.6 against 88.3, 88.7, 88.4; 2500 71.5, 71.1, 71.6 against 74.1, 74.3, 74.1; 2800 70.0, 69.8,
# 70.0 against 69.7, 70.0, 70.0; 3001 72.2, 72.3, 72.4 against 74.4, 74.2, 74.3 (float16 72.0,
# 72.0, 71.9 against 74.3, 74.4, 74.3); 3071 78.4, 78.3, 78.3 against 81.8, 82.0, 82.0; 3073
# 78.4, 78.0 against 81.6, 82.0; 3300 74.2, 74.0 against 75.4, 75.5; 3600 70.5, 70.3 against
# 70.7, 70.3; 4001 71.9 each against 73.7, 73.8 (float16 72.4, 72.1 against 73.6 each); but 4095
# 76.7, 76.4 against 75.1, 75.3 (float16 76.3 each against 75.4, 75.5).
REGISTERS_WIDE_SPAN_MAX_BYTES = {2: 8192, 4: REGISTERS_WIDE_NARROW_MAX_COLS * 4}
# Short rows take their spans (softmax_short_spans; or the wide rows where a span passes the short
# rows) only past REGISTERS_SHORT_SPAN_MIN_BYTES a row and from packs of at most
# REGISTERS_SHORT_SPAN_MAX_PACK bytes, or of at most REGISTERS_SHORT_SPAN_MAX_SHORT_PACK bytes
# where the span stays a short row (types of at most 4 bytes; float64 rows in spans are not
# measured). Evidence: H200, 2026-12-01, run s25-3 (us, two rounds, with the spans' first and last
# packs read whole, kernels/common.cuh, load_span_word), spans against the rows' own packs: packs
# of 8 bytes, bfloat16 900 76.1, 76.0 against 80.9, 80.9; 1012 74.5, 74.1 against 80.0, 80.9;
# 1020 (its span in the wide rows) 87.9, 87.8 against 80.7, 80.5; float32 302 135.7, 134.7
# against 136.5, 136.4; 402 136.0, 135.1 against 135.8, 135.6; 498 133.1, 133.0 against 133.0
# each. Rows of at most 1 KiB still lose in spans: bfloat16 129 201.3, 201.8 against 126.8,
# 127.2; 255 140.8, 140.9 against 86.4, 86.5; 257 140.6, 140.5 against 121.1, 121.4; float32 33
# 250.6 each against 192.8, 192.7; 65 216.8, 217.6 against 147.1, 146.8; 255 137.1, 137.6 against
# 135.3, 135.4 (but bfloat16 501 84.3, 84.0 against 86.5, 86.8, and 33 197.4 each against 199.2,
# 200.7). Before, with element loads there, runs s24-1 and s24-3 (us, two
# rounds, every short row in spans against main's packs): float32 one element a pack, 259 137.7,
# 137.8 against 144.8, 144.5; 301 136.4, 137.2 against 142.2, 141.0; 401 134.4, 135.7 against
# 141.8, 140.7; 505 134.1, 134.4 against 139.0, 138.6; shorter rows lost: 33 223.6, 223.7 against
# 192.8, 192.5; 65 196.1, 196.3 against 146.8, 147.0; 129 148.0, 147.8 against 144.1, 144.3; 255
# 137.6, 137.9 against 137.0, 137.3. Two a pack (8 bytes), within 2%: 302 135.5, 135.3 against
# 138.4, 138.3; 402 136.0, 135.8 against 136.9, 135.9; 498 134.1, 133.9 against 134.1, 133.6; 510
# (wide rows) 134.2, 133.0 against 134.7 each. bfloat16 one element a pack: 515 116.0, 115.9
# against 137.0 each; 777 84.6 each against 114.9, 114.7; 1001 83.8 each against 108.5, 108.2;
# 1023 (wide rows) 90.2 each against 106.6, 106.8; shorter rows lost: 129 187.5, 187.4 against
# 127.0, 127.2; 255 135.4, 135.3 against 86.6, 86.4; 257 134.0, 133.8 against 121.0, 121.2; 501
# 88.8 each against 86.7, 86.8 (but 33 won: 172.0, 172.1 against 199.7 each). Two a pack: 602
# 103.4, 103.3 against 138.8, 138.9; 1002 84.1, 83.9 against 107.1, 106.6. Four a pack (8
# bytes): 900 78.9, 79.1 against 81.6, 81.7; 1012 79.7, 79.2 against 81.5, 81.3; but 1020 (wide
# rows) 91.2, 91.6 against 81.4, 80.3.
REGISTERS_SHORT_SPAN_MIN_BYTES = 1024
REGISTERS_SHORT_SPAN_MAX_PACK = 4
REGISTERS_SHORT_SPAN_MAX_SHORT_PACK = 8
MAX_BLOCKS_PER_SM = 32  # resident blocks an SM, sm_80 to sm_90
THREADS_PER_SM = 2048  # resident threads an SM, sm_80 to sm_90
# Threads per block of the registers kernel's short rows (at most 128, its __launch_bounds__; a
# wide row's block is its lanes). Evidence: H200, 2026-11-30, run s18-10 (two rounds, fraction of
# copy, then torch's time over ours), 64 against 128: float32 64 / 128 / 256 / 512 0.987, 0.981 /
# 1.001 (0.988), 0.982 (1.010) / 1.004 (0.997), 1.002 (1.006) / 0.987, 1.002 against 0.972, 0.965
# / 0.965 (0.983), 0.990 (0.988) / 0.975 (0.990), 0.970 (0.988) / 0.970, 0.966; bfloat16 1024
# 0.985, 0.992 against 0.960, 0.969; float32 32 and half types 32 to 512 within 0.01 either way;
# run s18-9: float32 128 / 256 torch 1.000, 1.001 / 0.999, 1.000 against 0.989, 0.993 / 0.987,
# 0.984 (WARP_WAVES 4 or 16 no better; 256 threads fail the kernel's bounds).
WARP_BLOCK = 64
REGISTERS_SHORT_THREADS = 128  # the most threads a block of short rows may have (kernels/softmax_fused.cu)
# Short rows: each lane group takes R rows per iteration, about WARP_LANE_VALUES elements per
# lane, and loads the next iteration's while it works on this one's. Evidence: H200, 2026-11-30,
# 2**26 elements, fraction of copy. Without the early loads: float32 with one 16-byte pack per
# lane, widths 64 and 128 ran at 0.69 and 0.64 against 0.96 at 256 (2 packs); with 64 bytes per
# lane, 0.95 and 0.94; bfloat16 32 / 64 / 128 / 256 / 512 at 0.75 / 0.73 / 0.70 / 0.67 / 0.86
# (third session, run 5). With them (fourth session, runs 2 and 3), by bytes per lane: bfloat16
# 64 bytes 0.64 / 0.63 / 0.62 / 0.61 / 0.63 (94 registers a thread at 32 columns), 32 bytes
# 0.78 / 0.77 / 0.76 / 0.74 / 0.82, 16 bytes 0.83 / 0.82 / 0.80 / 0.78 / 0.82; float32 32 to
# 512: 64 bytes 0.95 to 0.98, 32 bytes 0.95 to 0.97, 16 bytes 0.93 to 0.96. So 8 elements: 32
# bytes of float32, 16 of bfloat16. The tiles kernel on the same rows (run 3): float32 0.77 to
# 0.96, bfloat16 0.63 to 0.83. Fifth session, with about 15 instructions per element in place
# of 22 (lanes per row at compile time, bfloat16 pairs unpacked per word, exp by one FFMA), rows
# of 32 / 64 / 128 / 256 / 512: 8 elements (run 1) bfloat16 0.95 / 0.95 / 0.95 / 0.95 / 0.96
# (0.94 to 0.95 with __launch_bounds__ for 32 registers, 100% occupancy), float32 0.96 / 0.95 /
# 0.96 / 0.96 / 0.98; 16 elements (run 3, 54 to 80 registers) bfloat16 0.96 / 0.96 / 0.97 /
# 0.97 / 0.97, float32 0.97 / 0.97 / 0.96 / 0.96 / 0.97. So 16 elements.
WARP_LANE_VALUES = 16
WARP_MAX_ROWS = 4
# Float64 rows of one pack a lane take about WARP_LANE_VALUES_FLOAT64_ONE_PACK values a lane (two
# rows a lane group at 16-byte packs, where WARP_LANE_VALUES gives four). Evidence: H200,
# 2026-12-01, run s21-12 (two rounds, fraction of copy, then torch's time over ours), 4 values
# against 16: rows of 4 / 8 / 16 / 32 / 64 0.981, 0.980 / 0.972, 0.976 / 0.973, 0.972 / 0.949,
# 0.939 / 0.916, 0.922 (torch 1.056, 1.053 / 1.078 each / 1.145, 1.141 / 1.161 each / 0.957,
# 0.959) against 0.787, 0.785 / 0.786, 0.788 / 0.784 each / 0.782 each / 0.909, 0.917 (torch
# 0.846, 0.847 / 0.869, 0.872 / 0.921, 0.922 / 0.971, 0.970 / 0.947, 0.946). Rows of more packs a
# lane lost with fewer values (128: 8 values 0.695, 0.692 against 0.973, 0.979; 256: 4 or 8
# values 0.47 each against 0.938, 0.928), so they keep WARP_LANE_VALUES. ptxas (sm_90): at four
# rows a lane group, the one-pack float64 rows of up to 16 lanes take 72 registers and spill 48
# bytes. Run s21-11 (2**25 elements, two rounds): eight rows a lane group against four lost at
# 2, 8, 10, 16, 24 and 32 (0.45 to 0.87 against 0.52 to 0.95) and gained 0.02 at 4 (0.80 each
# against 0.78, 0.79).
WARP_LANE_VALUES_FLOAT64_ONE_PACK = 4
# Grid: at most WARP_WAVES full residencies of the block size (2048 threads an SM, whatever the
# registers allow); units loop over rows. Evidence: H200, 2026-11-30 (eighth session, runs s8-1
# and s8-2, 2**26 elements), fraction of copy at widths 32 / 64 / 128 / 256 / 512 / 1024 / 2048
# (1024 float32 and 2048 are the tiles kernel's): WARP_WAVES 4: float32 0.97 / 0.96 / 0.97 /
# 0.96 / 0.97 / 0.97 / 0.98, bfloat16 0.95 / 0.97 / 0.95 / 0.98 / 0.96 / 0.97 / 0.96; 8: float32
# 0.98 / 0.96 / 0.98 / 0.96 / 0.96 / 0.98 / 0.98, bfloat16 0.98 / 0.98 / 0.96 / 0.98 / 0.99 /
# 0.97 / 0.96; 16: bfloat16 32 to 256 0.88 to 0.93; 1 and 2 (s8-1): 0.85 to 0.98.
WARP_WAVES = 8
# Float32 short rows of 16-byte packs in registers (aligned rows: not the spans' kernel) take
# REGISTERS_FLOAT32_WAVES full residencies. Evidence: H200, 2026-12-01 (ours GB/s, 2**26
# elements, with torch's time over ours): run s29-7 (three rounds, 100 calls a case), 16 against
# WARP_WAVES 8, rows of 32 / 64 / 128 / 256 / 512: 4146, 4144, 4141 / 4145, 4131, 4141 / 4126
# (1.00), 4113 (1.00), 4130 (1.01) / 4119, 4123, 4116 / 4124, 4120, 4127 against 4069, 4121,
# 4116 / 4090, 4098, 4103 / 4087 (0.99), 4095 (1.00), 4048 (1.00) / 4079, 4067, 4109 / 4099,
# 4100, 4098; 1,024 to 4,096 (not these plans) within 1%. Run s29-6 (three rounds, 30 calls):
# 12 gained about as much on float32, and both lost on the half types' rows of 32 to 256
# (bfloat16 16: 0.89 to 0.95 of copy, 12: 0.92 to 0.97, against 0.96 to 0.98), hence float32
# only; float64 and the spans' short rows were not measured. (Run s18-9, on the kernel of then,
# found 16 no better at 128 and 256.)
REGISTERS_FLOAT32_WAVES = 16

# Short rows staged in shared memory ("tiles"): blocks of TILES_BLOCK threads, each warp stages
# about TILES_WARP_BYTES of rows before reducing any (R rows per lane group, R in TILES_ROWS).
# Evidence: H200, 2026-11-30 (second session, run 3): 8 KiB per warp against 4 KiB, fraction of
# copy: bfloat16 512 0.72 / 0.82, 1024 0.85 / 0.92, 2048 0.89 / 0.95; float32 within 0.02 from
# 256 up, worse below (32: 0.79 / 0.83).
TILES_BLOCK = 128
TILES_WARP_BYTES = 4096
TILES_ROWS = (1, 2, 4, 8)

# Short rows that lie back to back off 16-byte boundaries ("flat"): x's and y's rows alike about
# them, each warp stages a run of about FLAT_WARP_BYTES of consecutive rows in shared memory by
# 16-byte copies and stores it by 16-byte stores (kernels/softmax_fused.cu, softmax_flat), rows of
# at most FLAT_MAX_COLS elements (32 lanes of 32 values) in blocks of FLAT_BLOCK threads; W lanes
# a row, the fewest (a power of two) that hold it in at most FLAT_LANE_VALUES values a lane (else
# 32), and E = ceil(cols / W) values a lane. FLAT_BLOCK and FLAT_WARP_BYTES: first values (the
# tiles kernel's). The default takes rows of at most FLAT_MAX_BYTES[itemsize]. Evidence: H200,
# 2026-12-01, runs s26-4 to s26-7 and s26-13 (fraction of copy, 2**26 elements, contiguous rows,
# the flat kernel against main's plans in the same run; s26-4 and s26-13 two rounds, the others
# one):
# - E rounded up to a power of two, W up to 32 lanes (s26-4): bfloat16 129 / 257 / 301 / 33 0.65
#   / 0.63 / 0.71 / 0.40, against exact E (s26-7) 0.79 / 0.86 / 0.87 / 0.86: a slot of E costs
#   its instructions whether it holds an element or not. Skipping the empty slots by a run-time
#   bound (s26-5, s26-6) lost more than it saved (bfloat16 501 0.80, against 0.93 in s26-4).
# - FLAT_LANE_VALUES 8 against one lane a row up to 32 elements, then 32 lanes (s26-7): bfloat16
#   33 / 47 / 65 / 97 0.86 / 0.91 / 0.79 / 0.92 against 0.40 / 0.52 / 0.62 / 0.76; float32 33 0.94
#   against 0.72; rows of up to 31 and from 129 within 0.02. FLAT_LANE_VALUES 4 (s26-7) lost at
#   bfloat16 17 / 33 / 65 (0.73 / 0.64 / 0.62). 16 (s26-6, with the run-time bound) lost bfloat16
#   129 to 301 (0.51 to 0.68) to 8's 0.64 to 0.94: lanes of 16 read two rows of shared memory at
#   once, whose banks overlap.
# - FLAT_MAX_BYTES (s26-7, main's plans in brackets): bfloat16 3 / 17 / 33 / 129 / 257 / 501 0.96
#   / 0.93 / 0.86 / 0.79 / 0.86 / 0.93 (0.34 / 0.22 / 0.35 / 0.55 / 0.58 / 0.82), 777 0.85 (0.86),
#   1001 0.85 (0.93, its span a short row of its own kernel); float32 3 / 17 / 33 / 65 0.98 / 0.95
#   / 0.94 / 0.93 (0.67 / 0.43 / 0.68 / 0.89), 97 / 197 / 301 / 501 0.93 / 0.92 / 0.93 / 0.93
#   (0.96 / 0.96 / 0.97 / 1.00). Run s26-13 (two rounds), half-type rows past 1 KiB, bfloat16 /
#   float16: 513 / 577 / 641 / 700 0.84 / 0.87 / 0.85 / 0.91, 0.84 / 0.86 / 0.85 / 0.91 against
#   0.64 / 0.68 / 0.72 / 0.81, 0.65 / 0.69 / 0.74 / 0.83; 777 0.85 against 0.86 / 0.87; 850 0.88 /
#   0.87 against 0.86; 1001 / 1012 0.85 / 0.88 against 0.93 / 0.94 (their spans' short rows).
#   Run s26-9 (two rounds): float32 77 0.93 each against 0.95 / 0.94. Hence 1,536 bytes of half
#   types (767 elements), and float32 rows of up to 70 elements, between 65 (a gain) and 77 (a
#   loss).
FLAT_BLOCK = 128
FLAT_WARP_BYTES = 4096
FLAT_MAX_COLS = 32 * 32
FLAT_LANE_VALUES = 8
FLAT_MAX_BYTES = {2: 1536, 4: 280}

# Shared-memory rows: threads per block by the bytes a block holds, first row that fits wins.
# Evidence: a first version (about 8 to 16 packs of 16 bytes per thread), then H200, 2026-11-30,
# run s16-2 (two rounds, fraction of copy; rows 1024 to 524288 float32 and bfloat16, the block
# and cluster kernels): 256 threads up to 16 KiB lost the rows of 4 KiB (float32 1024 0.64, 0.65,
# bfloat16 2048 0.65 each, against 0.99 to 1.00 and 0.97 each); 512 up to 32 KiB lost cluster
# slices of 32 KiB (float32 131072 0.88, 0.89 against 0.96 each, bfloat16 262144 0.79 each against
# 0.93, 0.94); 256 up to 64 KiB lost bfloat16 524288 (0.79 each against 0.84, 0.85) and 32768
# (0.89 each against 0.94, 0.93); 1024 up to 64 KiB lost float32 262144 (0.68, 0.69 against 0.90
# each) and bfloat16 524288 (0.63, 0.62). No shape gained more than 0.02. Run s17-9 (two rounds,
# fraction of copy, then Triton's time over ours): 64 threads up to 8 KiB (twice as many blocks
# an SM, so twice the bytes in flight) against 128: bfloat16 2048 0.99 / 0.99, 0.99 / 0.99
# against 0.98 / 0.98, 0.97 / 0.97; float16 2048 0.99 / 1.00, 0.99 / 0.99 against 0.98 / 0.98,
# 0.97 / 0.97; float32 2048 0.99 / 1.02 each against 0.97 / 1.01, 0.97 / 1.00; float32 1024 and
# bfloat16 4096 within 0.01 either way. 64 threads up to 4 KiB alone: bfloat16 2048 0.98 / 0.99,
# 0.99 / 0.99; float32 2048 0.98 / 1.00, 0.98 / 1.01. Run s18-1 (two rounds, the same pairs,
# the slab kept at 128): bfloat16 2048 0.991 / 0.996, 0.987 / 0.996 against 0.972 / 0.981, 0.976
# / 0.978; float16 2048 0.990 / 0.992, 0.990 / 0.991 against 0.978 / 0.980, 0.981 / 0.980;
# float32 2048 0.985 / 1.019, 0.989 / 1.020 against 0.983 / 1.003, 0.975 / 1.010; float32 1024
# 1.007 / 0.999, 1.000 / 0.998 against 1.004 / 1.004, 0.987 / 0.991; half types 4096 within
# 0.01 (and float32 4096, 128 threads both times: 0.983, 0.981 against 0.976, 0.974, the noise).
# The slab keeps at least SLAB_MIN_THREADS.
BLOCK_THREADS = ((8 * 1024, 64), (16 * 1024, 128), (32 * 1024, 256), (64 * 1024, 512), (math.inf, 1024))
# Float64 (8-byte) rows and slices take their own table: half the threads from 16 KiB to 64 KiB.
# Evidence: H200, 2026-12-01 (two rounds each, fraction of copy, float64 rows, the block kernel to
# 4096 and clusters past it). Run s21-8, this table against BLOCK_THREADS: 1024 / 2048 / 4096 /
# 8192 / 16384 / 32768 / 65536 / 131072 1.006, 0.999 / 0.991, 0.993 / 0.967, 0.965 / 0.971,
# 0.967 / 0.917, 0.928 / 0.910, 0.905 / 0.847 each / 0.799, 0.795 against 1.001, 1.004 / 0.991,
# 0.995 / 0.929, 0.931 / 0.903, 0.902 / 0.846, 0.847 / 0.843, 0.840 / 0.769 each / 0.644, 0.641;
# twice BLOCK_THREADS' threads up to 32 KiB lost everywhere (0.35 to 0.87). Run s21-9: 64 threads
# up to 16 KiB lost the rows of 2048 (0.977, 0.968 against 0.989, 0.987), 64 up to 32 KiB and
# 128 up to 64 KiB lost from 4096 on (0.61 to 0.79). A likely reason, not measured: these
# kernels keep 56 registers a thread for float64 (ptxas, sm_90), so at BLOCK_THREADS' 256 and 512
# threads the registers, not the shared memory, cap the blocks an SM (4 of 32 KiB where 6 fit,
# 2 of 64 KiB where 3 fit), and with them the bytes in flight.
BLOCK_THREADS_FLOAT64 = ((8 * 1024, 64), (16 * 1024, 128), (32 * 1024, 128), (64 * 1024, 256), (math.inf, 1024))
BLOCK_SCRATCH = 100 * 8  # bytes ahead of the row: scratch, cluster exchange (FUSED_SCRATCH in kernels/)

# Cluster rows (sm_90 and newer): cluster sizes tried in order, up to the device's maximum (8
# is portable; sm_90 allows 16 with the non-portable attribute, which _kernels sets). For each
# limit of CLUSTER_SLICE_BYTES in turn, the smallest size whose slice per block is at most that
# wins (past them: below). Rows of more than CLUSTER_MIN_BYTES go to a
# cluster even when they fit one block. Evidence: H200, 2026-11-30 (second session, `tools/
# gpu_check.sh tune`), fraction of copy, block / cluster: float32 16384 (64 KiB) 0.98 / 0.90,
# 32768 (128 KiB) 0.84 / 0.86 (run 1: 0.77 / 0.85); bfloat16 32768 (64 KiB) 0.94 / 0.83, 65536
# 0.70 / 0.79. Sixth session, with the blocks' pairs sent by st.async (runs s6-3, s6-4; before,
# two cluster barriers a row, each a MEMBAR.ALL.GPU): block / cluster float32 16384 0.96 / 0.97,
# 32768 0.83 / 0.95; bfloat16 32768 (64 KiB) 0.93 / 0.95, 16384 0.96 / 0.95 (so the boundary
# stays). Slices of at most 32 KiB where 16 blocks hold the row, else 64 KiB, against 64 KiB
# alone (run s6-5, the same run): float32 32768 / 65536 / 131072 / 262144 0.97 / 0.96 / 0.96 /
# 0.89 against 0.96 / 0.94 / 0.93 / 0.89; bfloat16 65536 / 131072 / 262144 / 524288 0.95 / 0.94
# / 0.92 / 0.85 against 0.93 / 0.90 / 0.88 / 0.83 (run s6-4, 32 KiB: 0.94 / 0.94 / 0.93). 32 KiB
# alone sends float32 262144 and bfloat16 524288 to 128 KiB slices (0.69, 0.59); 128 KiB first
# (s6-4): 0.60 to 0.76. CLUSTER_MIN_BYTES was 64 KiB until run s20-6 (H200, 2026-12-01, forced
# block against forced cluster, the two rounds of three without outliers, us; clusters of 2):
# float32 12288 (48 KiB) 133.97, 133.95 against 133.47, 133.34; float32 16384 (64 KiB) 134.66,
# 134.27 against 133.41, 133.62; bfloat16 24576 / 32768 (48 / 64 KiB) 70.91, 71.06 / 71.49,
# 71.60 against 70.19, 70.50 / 70.45, 70.40; float16 the same 70.67, 70.82 / 71.33, 71.36 against
# 70.21, 70.34 / 70.66, 70.53. Rows of 32 KiB and less stay in blocks: bfloat16 / float16 16384
# 70.06, 70.26 / 75.14 (a noisy round), 70.06 against 70.61, 70.58 / 70.80, 70.45; bfloat16 12288
# (24 KiB) 70.05, 69.89 against 72.02, 71.76.
#
# Past those limits, the smallest size whose slices let CLUSTER_BLOCKS_PER_SM blocks share an SM
# (slices of up to 112 KiB on the H200); rows that no size allows that go online (a forced
# cluster still holds up to a whole block's shared memory per slice). Evidence: H200,
# 2026-11-30, run s7-4 (two calls each), fraction of copy. Before, the smallest size that held
# the row, one block an SM: float32 393216 / 458752 (8 blocks of 192 / 224 KiB) 0.74 / 0.74 to
# 0.76, 524288 (16 of 128 KiB) 0.58; bfloat16 786432 / 917504 (8 blocks) 0.60 / 0.60, 1048576
# (16 of 128 KiB) 0.51 to 0.52. Now: float32 393216 / 458752 (16 blocks of 96 / 112 KiB) 0.81 to
# 0.82 / 0.81 to 0.82, 524288 online 0.61 to 0.62; bfloat16 0.71 / 0.73, 1048576 online 0.55
# (chunks of 128 KiB, ONLINE_MIN_CHUNK_BYTES).
CLUSTER_SIZES = (2, 4, 8, 16)
PORTABLE_CLUSTER = 8
CLUSTER_SLICE_BYTES = (32 * 1024, 64 * 1024)
CLUSTER_MIN_BYTES = 32 * 1024
CLUSTER_BLOCKS_PER_SM = 2
# Longer rows: the largest cluster, each block holding what two blocks an SM allow and reading the
# rest of its slice (its spill) twice, in blocks of SPILL_THREADS; the policy takes it while the
# spill is at most CLUSTER_SPILL_MAX times the held part, else online. Evidence: H200,
# 2026-11-30, runs s9-2 and s9-3 (two rounds each), fraction of copy, forced cluster / online by
# spill ratio: float32 524288 (0.14) 0.77 to 0.78 / 0.51 to 0.63, 655360 (0.43) 0.65 to 0.69 /
# 0.57 to 0.62, 786432 (0.71) 0.63 to 0.65 / 0.59 to 0.64, 917504 (1.0) 0.60 to 0.63 / 0.56 to
# 0.62, 2**20 (1.28) 0.60 / 0.61 to 0.63; bfloat16 2**20 (0.14) 0.66 / 0.58 to 0.60, 1310720
# (0.43) 0.58 to 0.59 / 0.55 to 0.56, 1572864 (0.71) 0.58 / 0.60 to 0.61, 1835008 (1.0) 0.51 to
# 0.54 / 0.56 to 0.57, 2**21 (1.28) 0.53 to 0.54 / 0.56 to 0.57. Float32 would gain up to 1.0
# (by 0.01 to 0.04); bfloat16 loses past 0.5, so one limit for both.
CLUSTER_SPILL_MAX = 0.5
# SPILL_THREADS: two blocks an SM leave 64 registers a thread (ptxas, sm_90: 42 to 63 for the
# float32 and bfloat16 spill kernels, nothing spilled to local memory); other sizes not measured.
SPILL_THREADS = 512  # SPILL_THREADS in kernels/softmax_fused.cu (the softmax_spill kernel)
BLOCK_RESERVED = 1024  # shared memory the driver keeps per block

# Rows spread over the GPU ("grid"): chunks of GRID_CHUNK_BYTES, each block holding GRID_AHEAD
# chunks in flight and GRID_LAG chunks waiting for their rows, GRID_THREADS threads a block (so
# 3 blocks an SM on the H200). Evidence: H200, 2026-11-30, runs s11-1 to s11-3, forced grid,
# fraction of copy, float32 rows of 262144 / 524288 / 2**20 / 2**21 / 2**22, then bfloat16:
# 128 threads, 32 KiB, 1 ahead, 1 behind: 0.68 / 0.68 / 0.67 / 0.62 / 0.52, 0.59 / 0.56 / 0.56
# / 0.56 / 0.53; 24 KiB (two calls): 0.70 to 0.71 / 0.68 to 0.69 / 0.64 to 0.66 / 0.61 / 0.43
# to 0.48, 0.56 to 0.64 / 0.55 to 0.59 / 0.58 to 0.59 / 0.56 / 0.54; 16 KiB 0.73 / 0.70 / 0.67
# / 0.58 / 0.45; 12 KiB 0.71 / 0.65 / 0.59 / 0.49 / 0.35; 64 threads, 16 KiB 0.68 / 0.63 / 0.59
# / 0.50 / 0.34; 256 threads, 24 KiB 0.69 / 0.65 / 0.62 / 0.56 / 0.44; 512 threads, 32 KiB, 2
# ahead (s11-1, before warp 1 polled) 0.56 / 0.55 / 0.55 / 0.54 / 0.50, 1024 threads 0.27 to
# 0.28. More in flight or more behind (each at 128 threads, 16 KiB): 2 ahead 0.57 / 0.59 / 0.53 / 0.47 / 0.35, 2 behind 0.62 / 0.61
# / 0.56 / 0.50 / 0.39. In the same calls the policy gave float32 0.88 to 0.91 (cluster) / 0.76
# to 0.78 (cluster, spilling) / 0.62 to 0.64 / 0.61 to 0.62 / 0.62 to 0.64 (online), bfloat16
# 0.92 to 1.03 / 0.83 to 0.86 / 0.64 to 0.67 / 0.56 to 0.58 / 0.59 to 0.61.
# Float32 rows around the band (run s11-6, two rounds, grid / online / cluster): 720896 0.59,
# 0.64 / 0.60, 0.61 / 0.62, 0.67; 786432 0.66, 0.66 / 0.56, 0.63 / 0.62, 0.64; 917504 0.57,
# 0.66 / 0.59, 0.63 / 0.62, 0.64; 2**20 0.68, 0.68 / 0.63, 0.63 / 0.60, 0.61; 1310720 0.63,
# 0.63 / 0.62, 0.61 / 0.57, 0.57; 1572864 0.63, 0.63 / 0.64, 0.64 / 0.56, 0.56.
# Hence the policy takes the grid for float32 rows past the cluster's reach up to
# GRID_MAX_ROW_BYTES (4 MiB: it leads by 0.03 to 0.05 at 2**20, by 0.01 to 0.02 at 5 MiB and
# not at 6 MiB), on GPUs with clusters (the only ones measured); other types stay online.
# Before (third session), groups of `chunks` blocks holding two chunks each: float32 2**20 0.52
# (online 0.57).
GRID_CHUNK_BYTES = 32 * 1024
GRID_AHEAD = 1
GRID_LAG = 1
GRID_THREADS = 128  # at least 64: warp 1 polls the row counts
GRID_ITEMSIZE = 4
GRID_MAX_ROW_BYTES = 4 * 1024 * 1024
GRID_STATIC_BYTES = 1024  # softmax_grid's static shared memory, at most (ncu, run s11-8: none)

# The two-pass kernels (online rows, columns) run in one launch, one resident wave of blocks
# taking (line, chunk) items from a ticket counter (kernels/common.cuh), lines grouped so that a
# group has at least ONLINE_GROUP_WAVES (COLUMNS_GROUP_WAVES) waves of items: the more, the more
# rarely a write item waits for its line's reads; the fewer, the likelier its second read hits
# L2. Evidence: H200, 2026-11-30 (third session, run 1, a fence in every thread): groups of one
# 4 MiB row (64 items against 264 resident blocks) ran rows of 2**20 float32 at 0.22 of copy,
# groups of 3 rows at 0.42; hence 2 waves. Online rows in the fourth session: see below.
# Groups are up to twice that where this makes the last group, which takes what is left, less
# short (_group_size): a short one leaves blocks waiting. Evidence: H200, 2026-11-30, run
# s16-1 (two rounds, fraction of copy), 32 rows of 2**21, groups of 8 where 7, 7, 7, 7, 4 before:
# bfloat16 0.63 each against 0.59 each, float16 0.63, 0.64 against 0.58, 0.59; float32 (groups
# of 4 where 3, ..., 3, 2) 0.67 each against 0.67 each; rows of 2**22 (no short group either
# way) 0.63 to 0.67 both. Columns (run s16-2, forced, along axis 0 of 4096 x 16384 / 16384 x
# 4096, one group of 64 / 16 lines where 50 and 14 / 13 and 3 before): float32 0.52, 0.47 / 0.44,
# 0.42 against 0.52, 0.51 / 0.45, 0.44; bfloat16 0.38, 0.33 / 0.29, 0.26 against 0.36 each / 0.28,
# 0.29 (the policy takes the slab there on this GPU).
COLUMNS_GROUP_WAVES = 2.0

# Online rows: chunk length from the row length and element size alone (never from the batch),
# at least ONLINE_MIN_CHUNK_BYTES and at most ONLINE_MAX_CHUNKS chunks per row. Evidence: H200,
# 2026-11-30, fraction of copy. Third session (a merging block per row), one row of 2**24 /
# 2**27 float32: chunks of 64 Ki elements 0.51 / 0.56, 128 Ki 0.47 / 0.58. Fourth session (each
# write item merges its row's chunks), runs 1 and 2, chunk : group waves, rows of 2**20 / 2**22
# float32, 2**22 bfloat16, one row of 2**24 / 2**27 float32 (repeats of a variant spread by up
# to 0.14 in single cases): 64 Ki : 2, 0.55 / 0.53 / 0.44 / 0.46 / 0.58; 64 Ki : 0.5, 0.57 to
# 0.62 / 0.56 to 0.60 / 0.46 / 0.56 / 0.59; 64 Ki : 0.25, 0.47 / 0.62 / 0.46 / 0.56 / 0.59;
# 16 Ki : 2, 0.53 / 0.50 / 0.35 / 0.54 / 0.48; 16 Ki : 0.5, 0.55 / 0.48 / 0.37 / 0.47 / 0.43;
# 32 Ki : 1, 0.53 / 0.58 / 0.44 / 0.61 / 0.48; 32 Ki : 0.5, 0.50 to 0.62 / 0.61 / 0.45 / 0.60 /
# 0.48; 128 Ki : 0.5, 0.58 / 0.57 / 0.44 / 0.52 / 0.61; 128 Ki : 0.25, 0.55 / 0.54 / 0.41 /
# 0.50 / 0.61. Hence groups of half a wave, and chunks of 32 Ki float32 elements (128 KiB) up to
# rows of 2**25, longer from there (2**27: 128 Ki elements). Seventh session (run s7-3),
# bfloat16 rows of 2**20 / 2**21 / 2**22 with chunks of 64 Ki elements (128 KiB): 0.55 / 0.54 /
# 0.54, against 0.47 to 0.50 / 0.46 to 0.50 / 0.48 to 0.52 with 32 Ki (64 KiB) in the same
# call; hence a length in bytes. Float64 (16 Ki elements) is not measured.
# Fourteenth session (runs s14-2, s14-3, with the L2 priorities of kernels/softmax_online.cu, before
# its merges changed in s14-6),
# float32 rows of 2**21 / 2**22, one row of 2**24 / 2**27; bfloat16 rows of 2**21 / 2**22;
# float16 the same, chunk : group waves: 128 KiB : 0.5 0.61 / 0.62 / 0.58 / 0.62; 0.59 / 0.62;
# 0.60 / 0.63; 128 KiB : 0.75 0.63 / 0.62 / 0.58 / 0.62; 0.59 / 0.59; 0.60 / 0.59; 128 KiB : 0.35
# 0.65 / 0.58; 0.60 / 0.61; 0.61 / 0.60; 128 KiB : 0.25 0.65 / 0.56; 0.53 / 0.52; 0.55 / 0.53;
# 128 KiB : 1.0 0.62 / 0.59; 0.59 / 0.59; 0.60 / 0.59; 256 KiB : 0.5 0.60 / 0.60 / 0.56 / 0.62;
# 0.56 / 0.56; 0.57 / 0.57; 256 KiB : 0.75 0.61 / 0.61 / 0.54 / 0.62; 0.58 / 0.57; 0.59 / 0.58;
# 512 KiB : 0.5 0.58 / 0.57 / 0.51 / 0.62; 0.54 / 0.50; 0.55 / 0.52. On the merges of s14-6 (run
# s14-10, 6fd7d7a): 128 KiB : 0.5 (twice) 0.63, 0.63 / 0.63, 0.64 / 0.58 each / 0.62 each; 0.59
# each / 0.63 each; 0.59 each / 0.63, 0.64; 128 KiB : 0.35 0.62 / 0.55 / 0.58 / 0.62; 0.60 /
# 0.58; 0.61 / 0.57; 128 KiB : 0.75 0.63 / 0.63 / 0.56 / 0.62; 0.61 / 0.61; 0.61 / 0.60; 64 KiB :
# 0.5 0.61 / 0.62 / 0.54 / 0.62; 0.59 / 0.57; 0.60 / 0.57; 64 KiB : 1.0 0.58 / 0.58 / 0.52 /
# 0.62; 0.59 / 0.61; 0.60 / 0.61; 96 KiB : 0.5 0.63 / 0.61 / 0.52 / 0.62; 0.58 / 0.57; 0.58 /
# 0.58. So both stay. Fifteenth session, with float32 holding (run s15-6, 2672d1c; float32 rows
# of 2**21 / 2**22 / one row of 2**24 / 2**27; bfloat16 rows of 2**21 / 2**22): as they are
# (twice) 0.67, 0.67 / 0.66, 0.67 / 0.59, 0.61 / 0.62 each; 0.59 / 0.63 each; 96 KiB 0.64 / 0.61
# / 0.58 / 0.62; 0.58 / 0.58; 192 KiB (twice) 0.66 each / 0.66, 0.65 / 0.53, 0.55 / 0.62 each;
# 0.57 / 0.57 each; waves 0.75 (twice) 0.68, 0.67 / 0.67 each / 0.59, 0.61 / 0.63 each; 0.60 /
# 0.60, 0.61; 1.0 0.66 / 0.64 / 0.61 / 0.62; 0.59 / 0.60; 0.35 0.63 / 0.60 / 0.62 / 0.62; 0.60
# / 0.58 (float16 within 0.01 of bfloat16). Both stay again.
ONLINE_GROUP_WAVES = 0.5
ONLINE_MIN_CHUNK_BYTES = 128 * 1024
ONLINE_MAX_CHUNKS = 1024
ONLINE_THREADS = 512
# Online blocks resident an SM, by element size (ONLINE_BLOCKS, the __launch_bounds__ of
# softmax_online): half types 3 (40 registers a thread; ptxas, sm_90: 8 bytes on the stack,
# loaded once an item, outside its loops), the others 2 (64 registers; at 40, float32's packs of
# 4 spill 44 bytes).
# Evidence: H200, 2026-11-30, run s10-5 (two rounds, fraction of copy), rows of 2**21 / 2**22
# by the policy (online), 3 blocks against 2: bfloat16 0.58, 0.58 / 0.60, 0.60 against 0.56,
# 0.56 / 0.56, 0.55; float16 0.58, 0.57 / 0.60, 0.60 against 0.56, 0.56 / 0.55, 0.56; forced
# online at 2**20 bfloat16 0.59, 0.57 against 0.57, 0.57. Float32 with 3 (run s10-7, two
# rounds, the same rows, then one row of 2**24 / 2**27): 0.60 to 0.61 / 0.61 to 0.62 / 0.61 /
# 0.56 / 0.60 against 0.63 / 0.61 / 0.62 to 0.63 / 0.61 to 0.62 / 0.62, so it keeps 2.
ONLINE_BLOCKS_PER_SM = {2: 3, 4: 2, 8: 2}
# A read item whose block holds no chunk keeps the chunk's first elements in the block's shared
# memory (at most ONLINE_HOLD_BYTES and what ONLINE_BLOCKS_PER_SM blocks an SM leave it, in whole
# steps of the kernel's walk) and the block writes them from there: they are read once. Element
# sizes in ONLINE_HOLDS only. Evidence: H200, 2026-11-30, runs s15-1 and s15-2, fraction of copy,
# float32 rows of 2**21 / 2**22, one row of 2**24 / 2**27: without (main before) 0.62, 0.62, 0.63
# / 0.63, 0.64, 0.63 / 0.58 each / 0.62 each; held up to 32 KiB 0.63 / 0.65 / 0.62 / 0.62; 64 KiB
# 0.65, 0.66, 0.66 / 0.65, 0.66, 0.65 / 0.60, 0.60, 0.58 / 0.62 each; 80 KiB 0.65 each / 0.67,
# 0.65 / 0.63, 0.60 / 0.62 each; 96 KiB 0.66, 0.67 / 0.66, 0.67 / 0.61 each / 0.62 each; all that
# two blocks an SM leave (112 KiB) 0.61, 0.62 / 0.64 each / 0.59, 0.58 / 0.61 each. Half types
# (s15-1, 72 KiB, three blocks an SM) lost: bfloat16 rows of 2**21 / 2**22 0.51 each / 0.55 each
# against 0.59 each / 0.63 each (float16 alike), and 0.56 / 0.60 with the hold compiled in but
# nothing held; so they are compiled without it (the same SASS as before). Run s15-5 (two rounds,
# bfloat16 rows of 2**21 / 2**22, float16 alike within 0.01): holding at two blocks an SM (96 KiB)
# 0.58 each / 0.58 each, at three (72 KiB) 0.51 each / 0.54, 0.55, against 0.59 each / 0.63 each.
ONLINE_HOLD_BYTES = 96 * 1024
ONLINE_HOLDS = (4,)  # ONLINE_HOLDS<T> in kernels/softmax_online.cu
ONLINE_STATIC_BYTES = 1024  # softmax_online's static shared memory, at most

# Strided reduced axis: the columns kernel needs enough contiguous inner elements to coalesce;
# below this a transposing copy plus a row kernel is cheaper. Evidence: none yet (32 float32 keep
# whole 32-byte sectors per access). A block reads strips of COLUMNS_STRIP_COLS columns of the
# inner axis (fewer when the inner axis is narrower) at COLUMNS_THREADS / (packs per strip) steps
# at once. The reduced axis is cut into chunks of at least COLUMNS_MIN_CHUNK steps, at most
# COLUMNS_MAX_CHUNKS of them, from n alone; the partials cost 16 bytes per chunk per column.
# Evidence: H200, 2026-11-30 (third session, runs 2 to 4), axis 0 of 4096 x 16384 and
# 16384 x 4096, fraction of copy, strips of 512 / 1024 / 2048 bytes: float32 0.46 / 0.54 / 0.49
# and 0.41 / 0.46 / 0.41, bfloat16 0.25 / 0.22 / 0.19 and 0.23 / 0.16-0.18 / 0.15; so 256
# columns (1024 bytes of float32, 512 of bfloat16). COLUMNS_MIN_CHUNK: a first value for the
# one-launch kernel (at most 1/16 byte of partials per element), not compared.
COLUMNS_MIN_INNER = 32
COLUMNS_STRIP_COLS = 256
COLUMNS_MIN_CHUNK = 256
COLUMNS_MAX_CHUNKS = 64
COLUMNS_THREADS = 256  # COLUMNS_MAX_THREADS in kernels/softmax_columns.cu
COLUMNS_BLOCKS_PER_SM = 3  # __launch_bounds__ of softmax_columns
# At most 4 elements per thread per step (16 bytes of float32, 8 of half types). Evidence: ptxas
# (sm_90, 3 blocks of 256 threads per SM: 80 registers): 8 bfloat16 columns per thread spill
# 68 bytes, 4 spill 8.
COLUMNS_MAX_VEC = 4

# Strided reduced axis held on chip ("slab", sm_90 and newer): the inner axis in strips, each
# strip over the whole reduced axis cut over a cluster as a row is (CLUSTER_SIZES). Strips of the
# first width of SLAB_STRIP_BYTES whose slices stay within SLAB_SLICE_BYTES on some cluster size,
# else of its last width (slices within SLAB_SLICE_BYTES where a cluster allows, else the smallest
# cluster that holds them); a strip is at most SLAB_MAX_COLS columns, a power-of-two number of
# packs up to a warp. Blocks of up to SLAB_MAX_THREADS threads. Float types of at most 4 bytes.
# Evidence: H200, 2026-11-30, axis 0 of 4096 x 16384 and 16384 x 4096, fraction of copy,
# float32 pair; bfloat16 pair. Fourth session (runs 1 and 2; the two-pass columns kernel in the
# same runs: 0.46 to 0.54 / 0.40 to 0.47; 0.24 to 0.25 / 0.23 to 0.24): blocks of 512 threads,
# strips of 32 / 64 / 128 / 256 / 512 bytes: 0.49 / 0.53 / 0.49 / 0.38 / 0.40 and 0.37 / 0.43 /
# 0.33 / - / -; 0.39 / 0.39 / 0.32 / 0.33 / 0.32 and 0.33 / 0.32 / 0.27 / 0.27 / 0.27. Blocks
# of 256 threads: 64 bytes 0.58 / 0.52; 0.55 / 0.42; 32 bytes 0.58 / 0.50; 0.49 / 0.42. Seventh
# session (run s7-1, the st.async exchange), strips of 64 / 128 bytes alone: 0.66 / 0.74 and
# 0.56 / 0.40; 0.55 / 0.54 and 0.45 / 0.30. The wide strips lose where their slices pass 64 KiB
# (16384 steps: 128 KiB on 16 blocks), hence the ladder. SLAB_SLICE_BYTES 32 KiB against 64 KiB
# (run s10-8, two rounds): 0.55, 0.54 / 0.43, 0.43; 0.37, 0.36 / 0.33, 0.33 against 0.73, 0.74 /
# 0.56, 0.57; 0.54, 0.54 / 0.45, 0.45 (4096 x 16384 then on clusters of 16 blocks of 32 KiB in
# place of 8 of 64 KiB; 16384 x 4096 on the ladder's fallback, clusters of 8 of 128 KiB).
# Twelfth session, with each column's merge on a lane per block: strips of 256 bytes first
# (float32 4096 x 16384 on clusters of 16, two blocks an SM; run s12-1, two rounds) 0.50 / 0.57,
# 0.49 / 0.56 against 0.74 / 0.58, 0.75 / 0.57; 32 KiB slices (run s12-7, two rounds) 0.55 / 0.46;
# 0.33 / 0.35 each against 0.77 / 0.60, 0.76 / 0.61; 0.55 / 0.47, 0.55 / 0.46. A cluster per line
# stays (run s12-3: clusters looping over lines, 0.53 to 0.69 / 0.40 to 0.52; 0.41 to 0.54 /
# 0.35 to 0.45). Thirteenth session, with the warp walks: SLAB_SLICE_BYTES 48 KiB with clusters of
# 12 allowed (run s13-5 on 7d88972, its merge's lanes rounded up to a power of two; 4096 x 16384
# on 12 blocks of 43 KiB, four an SM; three rounds) 0.76 to 0.78 / 0.51 to 0.52; 0.57 / 0.44 to
# 0.45 against 0.79 to 0.80 / 0.62; 0.68 / 0.57 to 0.58. SLAB_MAX_THREADS 128 (run s13-7 on
# eb3cf87, three rounds) 0.71 to 0.72 / 0.58; 0.54 to 0.55 / 0.48 against 0.79 / 0.62 to 0.63;
# 0.65 / 0.55 to 0.56; 384 (run s13-9 on eb3cf87 with the kernel's bounds (384, 3) and a round's
# pair rows from its warps, two rounds) 0.76 / 0.60 to 0.61; 0.49 / 0.43 (two blocks an SM)
# against 0.80 to 0.81 / 0.62; 0.65 / 0.56. Twenty-eighth session (run s28-8, one round, 15 calls
# a case): SLAB_SLICE_BYTES 128 KiB (one block an SM; float32 4096 x 16384 on clusters of 4,
# 16384 x 4096 in strips of 128 bytes on 16) 0.59 / 0.48; 0.44 / 0.38, and with SLAB_STRIP_BYTES
# (256, 128, 64) (float32 4096 x 16384 in strips of 256 bytes on 8) 0.57 / 0.48; 0.44 / 0.37,
# against 0.78 / 0.62; 0.65 / 0.56.
SLAB_STRIP_BYTES = (128, 64)
SLAB_SLICE_BYTES = 64 * 1024
SLAB_MAX_COLS = 64  # SLAB_MAX_COLS in kernels/softmax_columns.cu
SLAB_MAX_THREADS = 256  # SLAB_MAX_THREADS there
# The slab's blocks have at least SLAB_MIN_THREADS threads whatever BLOCK_THREADS gives its
# slices: its slices of 8 KiB or less were measured at 128 (run s16-2), and with 64 (run s17-10)
# compute-sanitizer synccheck stopped on one of them (4096 x 300 float32 along axis 0: "overflow
# of tracked cuda::barrier structures", then a launch failure).
SLAB_MIN_THREADS = 128
SLAB_MAX_WARPS = SLAB_MAX_THREADS // 32  # SLAB_MAX_WARPS there
SLAB_SCRATCH = 16 + SLAB_MAX_COLS * 8  # SLAB_SCRATCH there

MAX_GRID = 2**31 - 1


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
class Launch:
    kernel: str  # name in kernels/, e.g. "softmax_registers"
    template: tuple[int, ...]  # template arguments after the element type
    grid: int
    block: int
    smem: int = 0


@dataclass(frozen=True)
class Plan:
    method: str
    vec: int  # elements per vector access
    launch: Launch
    chunk: int = 0  # online, columns: elements of the reduced axis per chunk
    chunks: int = 0  # online, columns: chunks per line
    width: int = 0  # registers, tiles: lanes per row; columns, slab: packs per strip
    per_group: int = 0  # online, columns: lines per group; flat: rows a warp stages
    lines: int = 0  # grid, online, columns: rows or strips (the workspace's size); slab: strips
    held: int = 0  # cluster with a spill: packs of its slice a block holds; online: elements
    ahead: int = 0  # grid: chunks a block has in flight
    lag: int = 0  # grid: steps between a chunk's (m, d) and its write


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def vector_width(itemsize: int, addresses, strides) -> int:
    """The widest power-of-two pack, at most 16 bytes, that every address and stride allows."""
    v = 16 // itemsize
    while v > 1 and (any(a % (v * itemsize) for a in addresses) or any(s % v for s in strides)):
        v //= 2
    return v


def templates(itemsize: int, clusters: bool = True):
    """Every (kernel, template arguments) this policy can emit for one element size
    (``clusters``: include the cluster kernels, which need sm_90)."""
    for vec in (1 << k for k in range((16 // itemsize).bit_length())):
        for width in (1 << k for k in range(6)):  # short rows: a pack per lane below 32 lanes
            per_lane = 1
            while per_lane * vec <= (_short_cols(itemsize) // 32 if width == 32 else vec):
                template = (vec, per_lane, _short_batch(per_lane, vec, itemsize), width)
                yield "softmax_registers", template
                if vec * itemsize == 16:  # and in their spans
                    yield "softmax_short_spans", template
                per_lane *= 2
        yield "softmax_registers", (vec, REGISTERS_WIDE_VALUES // vec, 0, 0)  # several warps
        if vec * itemsize == 16:  # rows back to back: (E, W) of every row length they take
            for width, per_lane in sorted({_flat_shape(c) for c in range(1, FLAT_MAX_COLS + 1)}):
                yield "softmax_flat", (per_lane, width)
        for rows in TILES_ROWS:
            yield "softmax_tiles", (vec, rows)
        yield "softmax_block", (vec,)
        yield "softmax_grid", (vec,)
        yield "softmax_online", (vec,)
        if vec <= COLUMNS_MAX_VEC:
            yield "softmax_columns", (vec,)
        if clusters:
            for size in CLUSTER_SIZES:
                yield "softmax_cluster", (vec, size)
                if itemsize <= 4:
                    yield "softmax_slab", (vec, size)
            for size in sorted({PORTABLE_CLUSTER, CLUSTER_SIZES[-1]}):  # the largest, spilling
                yield "softmax_spill", (vec, size)


def _padded_bytes(cols, itemsize, vec):
    return math.ceil(cols / vec) * vec * itemsize


def fits_block(cols: int, itemsize: int, vec: int, limits: Limits) -> bool:
    return BLOCK_SCRATCH + _padded_bytes(cols, itemsize, vec) <= limits.smem_per_block


def _short_width(packs):
    """Lanes per short row (at most a warp): a power of two, about one pack each."""
    return min(32, _pow2_at_least(packs))


def _looped_grid(rows, rows_per_block, block, limits, waves):
    """Blocks for kernels whose units loop over rows: at most `waves` full residencies."""
    resident = limits.sm_count * (THREADS_PER_SM // block) * waves
    return min(MAX_GRID, resident, math.ceil(rows / rows_per_block))


def _slice_bytes(cols, itemsize, vec, size):
    """Bytes of one block's slice when a row is cut over `size` blocks (whole packs)."""
    return math.ceil(math.ceil(cols / vec) / size) * vec * itemsize


def _short_cols(itemsize):
    """The longest short row (one warp's, shuffles only): the rows the policy takes to the
    registers kernel by REGISTERS_MAX_COLS and REGISTERS_MAX_BYTES, at most SHORT_COLS."""
    return min(SHORT_COLS, max(REGISTERS_MAX_COLS, REGISTERS_MAX_BYTES // itemsize))


def _wide_default(cols, itemsize, vec, span=False):
    """Whether the policy takes a row past the short rows to the registers kernel's wide rows
    (span: rows off 16-byte boundaries that take their spans' 16-byte packs, see plan_rows)."""
    if itemsize > 4 or cols <= _short_cols(itemsize):
        return False
    if span:
        return cols * itemsize <= REGISTERS_WIDE_SPAN_MAX_BYTES[itemsize]
    if vec * itemsize < 16:
        return vec <= REGISTERS_WIDE_NARROW_VEC and cols <= REGISTERS_WIDE_NARROW_MAX_COLS
    if cols * itemsize > REGISTERS_WIDE_MAX_BYTES:
        return False
    lanes = _registers_shape(cols, vec, itemsize)[0]
    resident = min(MAX_BLOCKS_PER_SM, THREADS_PER_SM // lanes)
    return resident * cols * itemsize >= REGISTERS_WIDE_MIN_RESIDENT_BYTES


def _registers_shape(cols, vec, itemsize):
    """(lanes per row, packs per lane, rows per lane group: 0 for rows of several warps), or
    None when the row does not fit REGISTERS_MAX_LANES lanes of REGISTERS_WIDE_VALUES values."""
    packs = math.ceil(cols / vec)
    if cols <= _short_cols(itemsize):
        width = _short_width(packs)
        per_lane = _pow2_at_least(math.ceil(packs / width))
        return width, per_lane, _short_batch(per_lane, vec, itemsize)
    per_lane = REGISTERS_WIDE_VALUES // vec
    width = 32 * math.ceil(packs / (32 * per_lane))  # whole warps
    return (width, per_lane, 0) if width <= REGISTERS_MAX_LANES else None


def _short_batch(per_lane, vec, itemsize):
    """Rows per lane group per iteration for short rows: about WARP_LANE_VALUES elements per
    lane (WARP_LANE_VALUES_FLOAT64_ONE_PACK for float64 rows of one pack a lane), at most
    WARP_MAX_ROWS."""
    values = WARP_LANE_VALUES_FLOAT64_ONE_PACK if itemsize == 8 and per_lane == 1 else WARP_LANE_VALUES
    batch = 1
    while batch < WARP_MAX_ROWS and 2 * batch * per_lane * vec <= values:
        batch *= 2
    return batch


def _span_shape(cols, itemsize):
    """(pack, elements) of rows of ``cols`` elements walked in their aligned spans: 16-byte packs,
    and the longest span (a row that starts one element short of a 16-byte boundary), as the
    kernels cut it (kernels/common.cuh, head_of)."""
    wide = 16 // itemsize
    return wide, cols + wide - 1


def _registers(rows, cols, itemsize, vec, limits, span=False) -> Plan:
    width, per_lane, batch = _registers_shape(cols, vec, itemsize)
    wide, span_cols = _span_shape(cols, itemsize)
    spanned = span and _registers_shape(span_cols, wide, itemsize)
    if spanned and batch:  # a short row: its span's rule (REGISTERS_SHORT_SPAN_MIN_BYTES)
        pack, stays_short = vec * itemsize, spanned[2] > 0
        if cols * itemsize <= REGISTERS_SHORT_SPAN_MIN_BYTES or not (
                pack <= REGISTERS_SHORT_SPAN_MAX_PACK or
                (pack <= REGISTERS_SHORT_SPAN_MAX_SHORT_PACK and itemsize <= 4 and stays_short)):
            spanned = None
    if spanned:  # rows in their spans' 16-byte packs (kernels/softmax_fused.cu, SPAN)
        vec, (width, per_lane, batch) = wide, spanned
    # Template (vec, packs per lane, rows per lane group, lanes per row): short rows name their
    # lanes at compile time (their shuffles unroll), and their units loop over rows; wide rows
    # (batch 0) take them at run time, a row a block, a block a row (as the block kernel).
    # Short rows in spans have a kernel of their own (wide rows choose in the kernel).
    if batch:
        template, block = (vec, per_lane, batch, width), WARP_BLOCK
        waves = REGISTERS_FLOAT32_WAVES if itemsize == 4 and vec == 4 and not spanned else WARP_WAVES
        grid = _looped_grid(rows, block // width * batch, block, limits, waves)
    else:
        template, block, grid = (vec, per_lane, 0, 0), width, min(MAX_GRID, rows)
    kernel = "softmax_short_spans" if spanned and batch else "softmax_registers"
    launch = Launch(kernel, template, grid, block)
    return Plan("registers", vec, launch, width=width)


def _tiles(rows, cols, itemsize, vec, limits) -> Plan | None:
    """Plan for the tiles kernel, or None when one row per lane group does not fit."""
    packs = math.ceil(cols / vec)
    width = _short_width(packs)
    group_bytes = 32 // width * packs * vec * itemsize  # one row per lane group of a warp
    warps = TILES_BLOCK // 32
    batch = max([r for r in TILES_ROWS if r * group_bytes <= TILES_WARP_BYTES], default=1)
    smem = warps * batch * group_bytes
    if smem > limits.smem_per_block:
        return None
    grid = _looped_grid(rows, warps * 32 // width * batch, TILES_BLOCK, limits, WARP_WAVES)
    launch = Launch("softmax_tiles", (vec, batch), grid, TILES_BLOCK, smem)
    return Plan("tiles", vec, launch, width=width)


def _flat_shape(cols):
    """(W, E) of flat rows of ``cols`` elements: lanes a row, values a lane."""
    width = next(w for w in (1, 2, 4, 8, 16, 32) if math.ceil(cols / w) <= FLAT_LANE_VALUES or w == 32)
    return width, math.ceil(cols / width)


def _flat(rows, cols, itemsize, limits) -> Plan:
    """Plan for the flat kernel (rows back to back, of at most FLAT_MAX_COLS elements): the
    lanes and values of _flat_shape, and a warp's run of rows."""
    width, per_lane = _flat_shape(cols)
    groups = 32 // width
    tile = max(1, FLAT_WARP_BYTES // (cols * itemsize) // groups) * groups
    wide = 16 // itemsize
    smem = FLAT_BLOCK // 32 * ((tile * cols + 2 * wide - 2) // wide) * 16  # as softmax_flat's cap
    grid = _looped_grid(rows, FLAT_BLOCK // 32 * tile, FLAT_BLOCK, limits, WARP_WAVES)
    launch = Launch("softmax_flat", (per_lane, width), grid, FLAT_BLOCK, smem)
    return Plan("flat", wide, launch, width=width, per_group=tile)


def _threads_for(slice_bytes, itemsize):
    table = BLOCK_THREADS_FLOAT64 if itemsize == 8 else BLOCK_THREADS
    return next(t for limit, t in table if slice_bytes <= limit)


def _block(rows, cols, itemsize, vec) -> Plan:
    row_bytes = _padded_bytes(cols, itemsize, vec)
    launch = Launch("softmax_block", (vec,), min(MAX_GRID, rows), _threads_for(row_bytes, itemsize),
                    BLOCK_SCRATCH + row_bytes)
    return Plan("block", vec, launch)


def _cluster_size(slice_bytes, limits, scratch=lambda size: BLOCK_SCRATCH, smalls=None):
    """The cluster size for a line whose slice over `size` blocks has ``slice_bytes(size)``
    bytes (behind ``scratch(size)`` bytes of shared memory): for each limit of `smalls` in turn
    (default CLUSTER_SLICE_BYTES), the smallest size whose slices are at most that; else the
    smallest that holds the line; else None."""
    if not limits.clusters:
        return None
    slices = {size: slice_bytes(size) for size in CLUSTER_SIZES if size <= limits.max_cluster}
    for small in CLUSTER_SLICE_BYTES if smalls is None else smalls:
        for size, nbytes in slices.items():
            if nbytes <= small:
                return size
    for size, nbytes in slices.items():
        if scratch(size) + nbytes <= limits.smem_per_block:
            return size
    return None


def _block_share(limits, per_sm) -> int:
    """Shared memory each of `per_sm` blocks resident on an SM can have (the driver keeps
    BLOCK_RESERVED of each block's)."""
    return limits.smem_per_sm // per_sm - BLOCK_RESERVED


def _shared_slice_bytes(limits) -> int:
    """The largest slice of a row's cluster block with CLUSTER_BLOCKS_PER_SM blocks an SM."""
    return _block_share(limits, CLUSTER_BLOCKS_PER_SM) - BLOCK_SCRATCH


def _cluster(rows, cols, itemsize, vec, size) -> Plan:
    slice_bytes = _slice_bytes(cols, itemsize, vec, size)
    grid = min(MAX_GRID // size, rows) * size
    launch = Launch("softmax_cluster", (vec, size), grid, _threads_for(slice_bytes, itemsize),
                    BLOCK_SCRATCH + slice_bytes)
    return Plan("cluster", vec, launch)


def _spilled_cluster(rows, cols, itemsize, vec, limits):
    """(plan, spill per held byte) for a row longer than the largest cluster holds with
    CLUSTER_BLOCKS_PER_SM blocks an SM: each block holds as much of its slice as that allows and
    reads the rest twice (fewer than 2**31 elements: the kernel's offsets in a spill); None
    without clusters, where no spill is needed, or past that."""
    if not limits.clusters:
        return None
    size = limits.max_cluster
    held = _shared_slice_bytes(limits) // (vec * itemsize)
    per = _slice_bytes(cols, itemsize, vec, size) // (vec * itemsize)  # packs of its slice
    if per <= held or (per - held) * vec >= 2**31:
        return None
    grid = min(MAX_GRID // size, rows) * size
    launch = Launch("softmax_spill", (vec, size), grid, SPILL_THREADS,
                    BLOCK_SCRATCH + held * vec * itemsize)
    return Plan("cluster", vec, launch, held=held), (per - held) / held


def _group_size(lines, fewest):
    """Lines per group of a two-pass schedule: of `fewest` to twice that (at most `lines`), the
    number that leaves the last group (the lines left over) the fewest lines short of a whole
    group; the smallest of those."""
    return min(range(fewest, min(lines, 2 * fewest) + 1), key=lambda n: -lines % n)


def _two_pass(kernel, method, vec, lines, chunk, chunks, threads, per_sm, waves, limits,
              width=0, smem=0) -> Plan:
    """One launch of a two-pass kernel over `lines` lines of `chunks` chunks, `per_sm` blocks
    of `threads` resident per SM, groups of lines of at least `waves` waves of items."""
    resident = limits.sm_count * per_sm
    per_group = _group_size(lines, min(lines, math.ceil(waves * resident / chunks)))
    grid = min(MAX_GRID, resident, 2 * lines * chunks)
    launch = Launch(kernel, (vec,), grid, threads, smem)
    return Plan(method, vec, launch, chunk=chunk, chunks=chunks, width=width,
                per_group=per_group, lines=lines)


def workspace_bytes(plan: Plan) -> tuple[int, int]:
    """(bytes of a two-pass kernel's workspace, bytes at its start to zero before the launch):
    the ticket counter and per-line counts, then (m, d) statistics per line and partials per
    chunk (the layout of `Workspace` in kernels/common.cuh); online: then the elements held of
    each chunk, and the statistics are zeroed too (each row's publish_norm word, in
    kernels/softmax_online.cu)."""
    online = plan.method == "online"
    values = plan.width * plan.vec if plan.method == "columns" else 1
    head = 8 + (4 * plan.lines + 7) // 8 * 8
    kept = 4 * plan.lines * plan.chunks if online else 0  # held, per chunk
    zeroed = head + 16 * plan.lines if online else head
    return head + 16 * plan.lines * values * (1 + plan.chunks) + kept, zeroed


def grid_shape(itemsize, vec, limits) -> tuple[int, int, int]:
    """(packs per chunk, shared memory per block, the most chunks a row may have) of the grid
    kernel: GRID_LAG + 1 chunks per resident block (see softmax_grid; _kernels checks it again
    against the driver's count of resident blocks at launch)."""
    per = max(1, GRID_CHUNK_BYTES // (vec * itemsize))
    smem = BLOCK_SCRATCH + (GRID_AHEAD + GRID_LAG) * per * vec * itemsize
    per_sm = min(THREADS_PER_SM // GRID_THREADS, limits.smem_per_sm // (smem + GRID_STATIC_BYTES + BLOCK_RESERVED))
    return per, smem, (GRID_LAG + 1) * limits.sm_count * per_sm


def _grid_rows(rows, cols, itemsize, vec, limits) -> Plan | None:
    """Plan for the grid kernel, or None when a row has more chunks than the blocks resident
    on the device can hold."""
    per, smem, most = grid_shape(itemsize, vec, limits)
    chunks = math.ceil(math.ceil(cols / vec) / per)
    resident = most // (GRID_LAG + 1)
    if chunks > most:
        return None
    launch = Launch("softmax_grid", (vec,), min(resident, rows * chunks), GRID_THREADS, smem)
    return Plan("grid", vec, launch, chunk=per * vec, chunks=chunks, lines=rows,
                ahead=GRID_AHEAD, lag=GRID_LAG)


def _online(rows, cols, itemsize, vec, limits) -> Plan:
    # Below 2**31 elements for any row that fits a GPU (the kernel's offsets within a chunk).
    chunk = max(ONLINE_MIN_CHUNK_BYTES // itemsize, math.ceil(cols / ONLINE_MAX_CHUNKS))
    chunk = math.ceil(chunk / vec) * vec
    chunks = math.ceil(cols / chunk)
    per_sm = ONLINE_BLOCKS_PER_SM[itemsize]
    step = ONLINE_THREADS * vec  # held elements: whole steps of the walk
    room = min(ONLINE_HOLD_BYTES, _block_share(limits, per_sm) - ONLINE_STATIC_BYTES,
               limits.smem_per_block)
    held = min(chunk, room // itemsize) // step * step if itemsize in ONLINE_HOLDS else 0
    plan = _two_pass("softmax_online", "online", vec, rows, chunk, chunks, ONLINE_THREADS, per_sm,
                     ONLINE_GROUP_WAVES, limits, smem=held * itemsize)
    return replace(plan, held=held)


def _columns(outer, n, inner, vec, limits) -> Plan:
    width = min(max(1, COLUMNS_STRIP_COLS // vec), COLUMNS_THREADS,
                _pow2_at_least(math.ceil(inner / vec)))
    strips = math.ceil(inner / (width * vec))
    chunk = max(COLUMNS_MIN_CHUNK, math.ceil(n / COLUMNS_MAX_CHUNKS))
    chunks = math.ceil(n / chunk)
    return _two_pass("softmax_columns", "columns", vec, outer * strips, chunk, chunks,
                     COLUMNS_THREADS, COLUMNS_BLOCKS_PER_SM, COLUMNS_GROUP_WAVES, limits,
                     width=width)


def _slab_slice_bytes(n, width, vec, itemsize, size):
    """Bytes of one slab block's slice: its steps of the reduced axis (n cut over `size`
    blocks, as the kernel's `per`) times a strip of `width` packs."""
    return math.ceil(n / size) * width * vec * itemsize


def _slab_scratch(size, cols):
    """Shared memory of a slab block ahead of its slice: SLAB_SCRATCH, then two rounds of (m, d)
    float pairs of `cols` columns from `size` blocks or SLAB_MAX_WARPS warps, the more."""
    return SLAB_SCRATCH + 16 * max(size, SLAB_MAX_WARPS) * cols


def _slab_shape(n, inner, itemsize, vec, limits):
    """(packs per strip, cluster size) of the slab kernel, or None when it cannot hold the axis."""
    if itemsize > 4:
        return None
    for strip in SLAB_STRIP_BYTES:
        width = min(32, SLAB_MAX_COLS // vec, max(1, strip // (vec * itemsize)),
                    _pow2_at_least(math.ceil(inner / vec)))
        size = _cluster_size(lambda s: _slab_slice_bytes(n, width, vec, itemsize, s), limits,
                             lambda s: _slab_scratch(s, width * vec), (SLAB_SLICE_BYTES,))
        if size is not None and _slab_slice_bytes(n, width, vec, itemsize, size) <= SLAB_SLICE_BYTES:
            return width, size
    return None if size is None else (width, size)  # the last width, larger slices


def _slab(outer, n, inner, itemsize, vec, width, size) -> Plan:
    strips = math.ceil(inner / (width * vec))
    slice_bytes = _slab_slice_bytes(n, width, vec, itemsize, size)
    threads = min(SLAB_MAX_THREADS, max(SLAB_MIN_THREADS, _threads_for(slice_bytes, itemsize)))
    grid = min(outer * strips, MAX_GRID // size) * size
    smem = _slab_scratch(size, width * vec) + slice_bytes
    launch = Launch("softmax_slab", (vec, size), grid, threads, smem)
    return Plan("slab", vec, launch, width=width, lines=outer * strips)


def plan_rows(rows: int, cols: int, itemsize: int, vec: int, limits: Limits, method=None,
              span=False, flat=False) -> Plan | None:
    """Plan for ``rows`` contiguous rows of ``cols`` elements, rows ``vec``-aligned. ``span``:
    the rows are not all 16-byte aligned, but x's and y's lie alike about 16-byte boundaries;
    then the registers kernel's wide rows (and its short rows past REGISTERS_SHORT_SPAN_MIN_BYTES)
    and the block and cluster kernels take the 16-byte packs of each row's aligned span, sized as
    rows of ``cols + 16 // itemsize - 1`` elements (_span_shape). ``flat``: besides, the rows lie
    back to back in x and in y; short ones take the flat kernel. None: a forced "flat" on rows
    that are not (the caller makes contiguous copies)."""
    if method == "flat":
        if cols > FLAT_MAX_COLS:
            raise ValueError(
                f"method='flat' holds rows of at most {FLAT_MAX_COLS} elements (32 lanes of 32 "
                f"values); {cols} do not fit"
            )
        return _flat(rows, cols, itemsize, limits) if flat and span else None
    span = span and vec * itemsize < 16
    if method is None and flat and span and cols * itemsize <= FLAT_MAX_BYTES.get(itemsize, 0):
        return _flat(rows, cols, itemsize, limits)
    if method == "registers" or (method is None and (
            cols <= _short_cols(itemsize) or _wide_default(cols, itemsize, vec, span))):
        if _registers_shape(cols, vec, itemsize) is None:
            raise ValueError(
                f"method='registers' holds rows of at most {REGISTERS_MAX_LANES} lanes x "
                f"{REGISTERS_WIDE_VALUES} values; {cols} elements in packs of {vec} do not fit"
            )
        return _registers(rows, cols, itemsize, vec, limits, span)
    if method == "tiles" or (method is None and cols * itemsize <= TILES_MAX_BYTES):
        plan = _tiles(rows, cols, itemsize, vec, limits)
        if plan is None:
            raise ValueError(
                f"method='tiles' stages {TILES_BLOCK // 32} warps' rows in shared memory: rows of "
                f"{cols} elements of {itemsize} bytes exceed the device's {limits.smem_per_block} "
                "bytes per block"
            )
        return plan
    # span: the block and cluster kernels' packs and rows; the grid and online kernels keep vec
    svec, scols = _span_shape(cols, itemsize) if span else (vec, cols)
    return _on_chip(rows, cols, itemsize, vec, limits, method, svec, scols)


def _on_chip(rows, cols, itemsize, vec, limits, method, svec, scols):
    """plan_rows past the registers and tiles kernels: the block and cluster kernels plan rows
    of ``scols`` elements in packs of ``svec``; the grid and online kernels, of ``cols`` in packs of
    ``vec``."""
    shared = _shared_slice_bytes(limits)
    size = _cluster_size(lambda s: _slice_bytes(scols, itemsize, svec, s), limits,
                         smalls=(*CLUSTER_SLICE_BYTES, shared))
    shares_sm = size is not None and _slice_bytes(scols, itemsize, svec, size) <= shared
    one_block = fits_block(scols, itemsize, svec, limits)
    if method == "block" or (method is None and one_block and (
            size is None or _padded_bytes(scols, itemsize, svec) <= CLUSTER_MIN_BYTES)):
        if not one_block:
            raise ValueError(
                f"method='block' needs the row in shared memory: {cols} elements of {itemsize} "
                f"bytes exceed the device's {limits.smem_per_block} bytes per block"
            )
        return _block(rows, scols, itemsize, svec)
    if method == "grid":
        spread = _grid_rows(rows, cols, itemsize, vec, limits)
        if spread is None:
            per, _, most = grid_shape(itemsize, vec, limits)
            raise ValueError(
                f"method='grid' holds a row in at most {most} chunks of {per * vec} elements "
                f"({GRID_LAG + 1} in each block resident on {limits.sm_count} SMs): {cols} "
                f"elements do not fit"
            )
        return spread
    spilled = None if shares_sm else _spilled_cluster(rows, scols, itemsize, svec, limits)
    if method == "cluster" or (method is None and (
            shares_sm or (spilled is not None and spilled[1] <= CLUSTER_SPILL_MAX))):
        if spilled is not None:
            return spilled[0]
        if size is None:
            raise ValueError(
                "method='cluster' needs thread-block clusters (compute capability 9.0+, this "
                f"device: {limits.capability}) and rows that leave each of its blocks fewer "
                "than 2**31 elements to read twice"
            )
        return _cluster(rows, scols, itemsize, svec, size)
    row_bytes = _padded_bytes(cols, itemsize, vec)
    if method is None and itemsize == GRID_ITEMSIZE and limits.clusters and row_bytes <= GRID_MAX_ROW_BYTES:
        spread = _grid_rows(rows, cols, itemsize, vec, limits)
        if spread is not None:
            return spread
    return _online(rows, cols, itemsize, vec, limits)


def plan(layout, itemsize: int, addresses, limits: Limits, method=None) -> Plan | None:
    """The whole policy for one call. ``layout`` comes from ``_layout.collapse`` (None when the
    strides allow no [outer][n][inner] view); ``addresses`` are the input's and output's data
    addresses. None means: make a contiguous copy with the reduced axes last, then plan again."""
    if method not in (None, *METHODS):
        raise ValueError(f"method must be None or one of {METHODS}, got {method!r}")
    if layout is None:
        return None
    if method == "slab" or (not layout.rows and method is None and layout.inner >= COLUMNS_MIN_INNER):
        vec = vector_width(itemsize, addresses, layout.xs + layout.ys)
        shape = _slab_shape(layout.n, layout.inner, itemsize, vec, limits)
        if shape is not None:
            return _slab(layout.outer, layout.n, layout.inner, itemsize, vec, *shape)
        if method == "slab":
            raise ValueError(
                "method='slab' needs thread-block clusters (compute capability 9.0+, this device: "
                f"{limits.capability}), a float type of at most 4 bytes and the reduced axis "
                f"({layout.n} steps) times a strip of the inner axis in {limits.max_cluster} "
                f"blocks' shared memory ({limits.smem_per_block} bytes each)"
            )
    if method == "columns" or (not layout.rows and method is None):
        if method is None and layout.inner < COLUMNS_MIN_INNER:
            return None
        vec = min(vector_width(itemsize, addresses, layout.xs + layout.ys), COLUMNS_MAX_VEC)
        return _columns(layout.outer, layout.n, layout.inner, vec, limits)
    if not layout.rows:
        return None
    vec = vector_width(itemsize, addresses, (layout.xs[0], layout.ys[0]))
    alike = (addresses[0] - addresses[1]) % 16 == 0 and (layout.xs[0] - layout.ys[0]) * itemsize % 16 == 0
    flat = layout.outer == 1 or layout.xs[0] == layout.ys[0] == layout.n
    return plan_rows(layout.outer, layout.n, itemsize, vec, limits, method, alike, flat)
