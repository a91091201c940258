"""Whether softmax along axis 0 of a C-contiguous (n x inner) matrix reaches 0.85 of copy when a
line is held on chip by a team of blocks larger than a cluster, the team's column pairs exchanged
through L2 rather than distributed shared memory, so that each block reads wide runs of its rows
(256 to 2048 bytes, where the slab reads 64 or 128). Runs s28-1 to s28-6
(docs/history/benchmarks-log.md, H200, 2026-12-01): no. The walk copies at 0.90 to 0.92 with runs of
256 bytes or more, but the softmax reaches at most 0.67 / 0.62 (float32 4096 x 16384 / 16384 x 4096)
and 0.51 (bfloat16), against the slab's 0.79 / 0.62 and 0.65 / 0.55 in the same runs. At the same
slice, the larger the team the slower (float32 4096 x 16384, 64 KiB slices: teams of 16 / 33 / 66 /
128 at best 0.57 / 0.52 / 0.43 / 0.39); at the same team, the larger the slice (the fewer lines a
block) the faster. That reads as a wait a line (the team's pairs counted, then merged) which the
next line's copies do not hide; the phases were not timed one by one.

The kernel (`team` below) cuts the grid (one or two blocks an SM, every block resident at once)
into teams of `team` blocks. A line is a strip of P 16-byte packs of every row; team t takes
lines t, t + teams, ..., its block j holding rows j * per, ..., (j + 1) * per - 1 of the line in
shared memory. Per column, the block's max and its sum against that max (over its threads,
shuffles within a warp, then the warps through shared memory); the pairs go to L2, the team's
blocks count them (counters a team, acquire loads), and then
  LEVELS 1: every block merges the team's pairs of every column (team x cols pairs a block), or
  LEVELS 2: block j merges columns j, j + team, ... alone, writes their (max, 1 / sum), the team
            counts again, and every block reads the line's (cols pairs a block).
Every block of a team merges in the same order, so the same bits. NB buffers of lines: NB 2,
the next line's copies are in flight while this one is reduced, exchanged and written; NB 3 or 4
(LEVELS 1), iteration i issues line i + 2's copies, reduces and publishes line i + 1, then
merges and writes line i, so the team's count is awaited an iteration after it is raised; with
bulk stores the results go back into the buffer and out by the TMA engine, a row a thread.
MODE 1 is a plain copy in the same walk (NB 2, no exchange): the ceiling of the walk itself.
Results are checked against cusoftmax's own axis-0 result and sampled columns against a float64
reference before timing; timed as the benchmark times (L2 flushed, CUDA events, median), the
counters' memset included, against a device-to-device copy of the same bytes. The grid is
launched plainly: on an idle GPU every block is resident (a library kernel would need that
guaranteed, by a cooperative launch). Run on a sm_90 GPU: `python3 dev/probes/team_probe.py [--out
DIR]`, or `tools/gpu_check.sh team-probe`."""

import argparse
import math
import sys
from pathlib import Path

import cupy
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from axis0_cases import Case, Table  # noqa: E402
from cusoftmax import _kernels, bench  # noqa: E402

PROBE = r"""
namespace csm {
constexpr int TEAM_THREADS = 512;

// Columns c = first, first + step, ... < cols: (max, 1 / sum) of the `nb` (m, d) float pairs at
// src[2 * (b * cols + c)] into out[2 * c] (G lanes a column: lane g merges sources g, g + G, ...
// in turn, then the lanes' pairs in a fixed shuffle tree). Pairs read through L2 (__ldcg).
__device__ inline void team_merge(const float* src, int nb, int cols, int first, int step, float* out,
                                  bool global_out) {
    const int count = first < cols ? (cols - 1 - first) / step + 1 : 0;
    int G = 32;
    while (G > 1 && G * count > 2 * TEAM_THREADS) G >>= 1;
    for (int base = threadIdx.x & ~31; base < G * count; base += TEAM_THREADS) {
        const int i = (base + (threadIdx.x & 31)) / G, g = (threadIdx.x & 31) % G;
        const bool on = i < count;
        const int c = first + i * step;
        float m = neg_inf<float>(), d = 0;
        if (on)
            for (int b = g; b < nb; b += G) {
                const float2 q = __ldcg(reinterpret_cast<const float2*>(src) + (long long)b * cols + c);
                const float top = fmaxf(m, q.x);
                d = sum_at(m, d, top) + sum_at(q.x, q.y, top);
                m = top;
            }
        const float top = group_reduce(m, G, MaxOp());
        const float sum = group_reduce(sum_at(m, d, top), G, SumOp());
        if (on && g == 0) {
            const float2 r = make_float2(top, scale_of(sum, float()));
            if (global_out) __stcg(reinterpret_cast<float2*>(out) + c, r);
            else reinterpret_cast<float2*>(out)[c] = r;
        }
    }
}

// Thread 0 counts this block at `count` (after the block's stores, fenced by their writers) and
// waits until the team's `target`; the barrier hands the ordering to the block.
__device__ inline void team_arrive(unsigned* count, unsigned target, bool wrote) {
    if (wrote) __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicAdd(count, 1u);
        spin_until(count, target);
    }
    __syncthreads();
}

// One-dimensional bulk copies (the TMA engine) of shared memory out to global memory: issued by
// one thread and tracked per thread (bulk groups); `bytes` a multiple of 16, both addresses
// 16-byte aligned. The generic-proxy writes of the data must be fenced (fence.proxy.async) and
// made block-visible before the copies are issued.
__device__ inline void bulk_store(void* dst, const void* src, unsigned bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 ::"l"(dst), "r"((unsigned)__cvta_generic_to_shared(src)), "r"(bytes) : "memory");
}
__device__ inline void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N> __device__ inline void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ inline void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// NB 2: line i's copies land while line i - 1 is written; line i is reduced, published, merged
// and written in turn. NB 3 or 4 (LEVELS 1 only): iteration i issues line i + 2's copies,
// reduces and publishes line i + 1, then merges and writes line i, whose pairs went out an
// iteration ago, so the team's count is waited for a whole iteration later than it is raised.
// Slots of pairs: 2, or 4 for NB 3 or 4 (a block publishing line i + 1 may find another still
// merging line i - 2). BULK (NB 3 or 4): the results written back into the line's buffer and sent
// out by bulk copies, a row a thread; a buffer is loaded again once its stores have read it.
// MINB: blocks an SM (2: at most 64 registers a thread).
template <typename T, int V, int P, int NB, int LEVELS, int MODE, bool BULK = false, int MINB = 1>
__global__ void __launch_bounds__(TEAM_THREADS, MINB)
    team(const T* x, T* y, long long n, long long inner, int team_size, int per, float* part,
         float* stats, unsigned* count) {
    static_assert(NB == 2 || (NB >= 3 && LEVELS == 1 && MODE == 0), "team: NB 2, or NB 3 or 4 with LEVELS 1");
    static_assert(!BULK || NB >= 3, "team: bulk stores with NB 3 or 4");
    constexpr int C = P * V, LANES = TEAM_THREADS / P, SLOTS = NB >= 3 ? 4 : 2;
    // Rows of the block's column partials: a warp's lanes of one pack are merged by shuffles
    // first (P < 32), so a row per warp; else a row per step lane.
    constexpr int R = P >= 32 ? LANES : TEAM_THREADS / 32;
    extern __shared__ __align__(16) unsigned char smem[];
    float* rm = reinterpret_cast<float*>(smem);  // [R][C]
    float* rd = rm + R * C;                      // [R][C]
    float* fin = rd + R * C;                     // [C][2]
    T* buf = reinterpret_cast<T*>(fin + 2 * C);  // [NB][per][C]
    const int j = blockIdx.x % team_size, t = blockIdx.x / team_size, teams = gridDim.x / team_size;
    if (t >= teams) return;
    const long long k0 = (long long)j * per;
    const int cnt = int(max(0LL, min((long long)per, n - k0)));
    const int p = threadIdx.x % P, l = threadIdx.x / P;
    const long long lines = inner / C;
    const int mine = (lines - t + teams - 1) / teams;  // the team's lines: t, t + teams, ...
    auto line_of = [&](int i) { return t + (long long)i * teams; };
    auto slice = [&](int i) { return buf + (long long)(i % NB) * per * C + p * V; };
    auto load = [&](int i) {  // line i's copies, one group (empty past the last line)
        if constexpr (BULK) {  // the buffer's last line's bulk stores have read it
            if (threadIdx.x < per) bulk_wait_read<NB - 3>();
            __syncthreads();
        }
        if (i < mine) {
            T* dst = slice(i);
            const T* src = x + k0 * inner + line_of(i) * C + p * V;
            for (int s = l; s < cnt; s += LANES) copy_async<16>(dst + s * C, src + s * inner);
        }
        copy_commit();
    };
    auto pairs_of = [&](int i) { return part + (long long)(t * SLOTS + i % SLOTS) * team_size * 2 * C; };
    // Counters: NB 2, one for the team's pairs (a block publishes line i + 1 only after line i was
    // complete); NB 3, one a slot (a block may publish line i + 1 while another has not yet
    // published line i; line i + SLOTS is published only after line i is complete). Then one for
    // LEVELS 2's column statistics.
    constexpr int CS = NB >= 3 ? SLOTS : 1;
    unsigned* count2 = count + 8 * t + CS;
    auto count1 = [&](int i) { return count + 8 * t + i % CS; };
    // Line i (landed) reduced: the block's (max, sum) per column into its slot of pairs_of(i), counted.
    auto publish = [&](int i) {
        const T* cur = slice(i);
        float m[V], d[V], v[V];
#pragma unroll
        for (int q = 0; q < V; ++q) m[q] = neg_inf<float>(), d[q] = 0;
        for (int s = l; s < cnt; s += LANES) {
            unpack(load_pack<T, V>(cur + s * C), v);
#pragma unroll
            for (int q = 0; q < V; ++q) m[q] = fmaxf(m[q], v[q]);
        }
        const int row = P >= 32 ? l : int(threadIdx.x >> 5);
        const bool rep = P >= 32 || (threadIdx.x & 31) < P;
#pragma unroll
        for (int q = 0; q < V; ++q) {
            for (int o = P; o < 32; o <<= 1) m[q] = fmaxf(m[q], __shfl_xor_sync(0xffffffffu, m[q], o));
            if (rep) rm[row * C + p * V + q] = m[q];
        }
        __syncthreads();
        if (l == 0)
#pragma unroll
            for (int q = 0; q < V; ++q) {
                float top = rm[p * V + q];
#pragma unroll
                for (int o = 1; o < R; ++o) top = fmaxf(top, rm[o * C + p * V + q]);
                fin[2 * (p * V + q)] = top;
            }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < V; ++q) m[q] = fin[2 * (p * V + q)];
        for (int s = l; s < cnt; s += LANES) {
            unpack(load_pack<T, V>(cur + s * C), v);
#pragma unroll
            for (int q = 0; q < V; ++q) d[q] += fast_exp(v[q] - sum_base(m[q]));
        }
#pragma unroll
        for (int q = 0; q < V; ++q) {
            for (int o = P; o < 32; o <<= 1) d[q] += __shfl_xor_sync(0xffffffffu, d[q], o);
            if (rep) rd[row * C + p * V + q] = d[q];
        }
        __syncthreads();
        float* own = pairs_of(i) + (long long)j * 2 * C;
        if (l == 0) {
#pragma unroll
            for (int q = 0; q < V; ++q) {
                float sum = 0;
#pragma unroll
                for (int o = 0; o < R; ++o) sum += rd[o * C + p * V + q];
                __stcg(reinterpret_cast<float2*>(own) + p * V + q, make_float2(m[q], sum));
            }
            __threadfence();
        }
        __syncthreads();
        if (threadIdx.x == 0) atomicAdd(count1(i), 1u);
    };
    // Line i's column (max, 1 / sum) into fin, once the team's pairs are counted, then written.
    auto finish = [&](int i) {
        if (threadIdx.x == 0) spin_until(count1(i), unsigned(team_size) * (i / CS + 1));
        __syncthreads();
        if constexpr (LEVELS == 1) {
            team_merge(pairs_of(i), team_size, C, 0, 1, fin, false);
        } else {
            float* line_stats = stats + (long long)(t * 2 + (i & 1)) * 2 * C;
            team_merge(pairs_of(i), team_size, C, j, team_size, line_stats, true);
            team_arrive(count2, unsigned(team_size) * (i + 1), true);
            for (int c = threadIdx.x; c < C; c += TEAM_THREADS)
                reinterpret_cast<float2*>(fin)[c] = __ldcg(reinterpret_cast<const float2*>(line_stats) + c);
        }
        __syncthreads();
        T* cur = slice(i);
        T* dst = y + k0 * inner + line_of(i) * C + p * V;
        float top[V], scale[V], v[V];
#pragma unroll
        for (int q = 0; q < V; ++q) top[q] = fin[2 * (p * V + q)], scale[q] = fin[2 * (p * V + q) + 1];
        for (int s = l; s < cnt; s += LANES) {
            unpack(load_pack<T, V>(cur + s * C), v);
#pragma unroll
            for (int q = 0; q < V; ++q) v[q] = fast_exp(v[q] - top[q]) * scale[q];
            if constexpr (BULK) store_pack<T, V>(cur + s * C, pack_out<T, V>(v));  // in place
            else store_pack_global<T, V>(dst + s * inner, pack_out<T, V>(v));
        }
        if constexpr (BULK) {  // the rows out by the TMA engine, a row a thread
            fence_proxy_async();
            __syncthreads();
            T* rows = cur - p * V;
            T* out = dst - p * V;
            for (int s = threadIdx.x; s < cnt; s += TEAM_THREADS) bulk_store(out + s * inner, rows + s * C, C * sizeof(T));
            if (threadIdx.x < per) bulk_commit();
        }
    };
    load(0);
    if constexpr (NB >= 3) {
        load(1);
        copy_wait_pending(1);
        __syncthreads();
        if (0 < mine) publish(0);
    }
    for (int i = 0; i < mine; ++i) {
        load(NB == 2 ? i + 1 : i + 2);
        copy_wait_pending(1);  // NB 2: line i landed; NB 3 or 4: line i + 1
        __syncthreads();
        if constexpr (MODE == 1) {
            const T* cur = slice(i);
            T* dst = y + k0 * inner + line_of(i) * C + p * V;
            for (int s = l; s < cnt; s += LANES) store_pack_global<T, V>(dst + s * inner, load_pack<T, V>(cur + s * C));
        } else {
            if constexpr (NB >= 3) {
                if (i + 1 < mine) publish(i + 1);
            } else {
                publish(i);
            }
            finish(i);
        }
        __syncthreads();  // line i's buffer, rm, rd and fin free again
    }
}
}  // namespace csm
"""

TYPES = {"float32": "float", "bfloat16": "__nv_bfloat16"}
THREADS = 512  # TEAM_THREADS above

# (dtype, n, inner): [(P packs a strip, team size, NB, LEVELS, bulk stores, blocks an SM), ...].
# Teams divide the 132 SMs of an H200 (or take 128 of them); a block's slice (per x 16 P bytes)
# is at most 93.25 KiB (64 KiB with NB 3, 48 KiB with NB 4). Runs s28-1 to
# s28-4 (docs/history/benchmarks-log.md) each ran a part of this list on earlier forms of the
# kernel; s28-5 and s28-6 ran all of it on this one.
CASES = {
    ("float32", 4096, 16384): [
        (16, 16, 2, 1, False, 1), (32, 33, 2, 2, False, 1), (64, 66, 2, 2, False, 1), (128, 128, 2, 2, False, 1),
        (16, 16, 3, 1, False, 1), (32, 33, 3, 1, False, 1), (64, 66, 3, 1, False, 1),
        (16, 16, 3, 1, True, 1), (16, 22, 4, 1, True, 1), (16, 33, 3, 1, False, 2), (8, 16, 3, 1, False, 2),
        (8, 8, 3, 1, False, 1), (4, 4, 3, 1, False, 1), (16, 12, 2, 1, False, 1), (16, 11, 2, 1, False, 1),
        (8, 12, 3, 1, False, 1)],
    ("float32", 16384, 4096): [
        (16, 66, 2, 2, False, 1), (32, 128, 2, 2, False, 1), (8, 33, 3, 1, False, 1), (16, 66, 3, 1, False, 1),
        (32, 132, 3, 1, False, 1), (16, 66, 3, 1, True, 1), (8, 66, 4, 1, True, 1), (8, 66, 3, 1, False, 2),
        (4, 16, 3, 1, False, 1), (8, 22, 2, 1, False, 1)],
    ("bfloat16", 4096, 16384): [
        (32, 33, 2, 2, False, 1), (64, 66, 2, 2, False, 1), (128, 128, 2, 2, False, 1), (16, 16, 3, 1, False, 1),
        (32, 33, 3, 1, False, 1), (16, 16, 3, 1, True, 1), (16, 22, 4, 1, True, 1), (16, 33, 3, 1, False, 2),
        (8, 8, 3, 1, False, 1), (16, 12, 2, 1, False, 1), (4, 4, 3, 1, False, 1)],
    ("bfloat16", 16384, 4096): [
        (16, 66, 2, 2, False, 1), (32, 132, 2, 2, False, 1), (8, 33, 3, 1, False, 1), (16, 66, 3, 1, False, 1),
        (16, 66, 3, 1, True, 1), (8, 66, 4, 1, True, 1), (8, 66, 3, 1, False, 2), (4, 16, 3, 1, False, 1),
        (8, 22, 2, 1, False, 1)],
}


def expr(dname, P, NB, LEVELS, MODE, BULK=False, MINB=1):
    V = 16 // (4 if dname == "float32" else 2)
    return f"csm::team<{TYPES[dname]}, {V}, {P}, {NB}, {LEVELS}, {MODE}, {str(BULK).lower()}, {MINB}>"


def instantiations():
    """Every kernel the probe launches: (dtype name, P, NB, LEVELS, MODE, BULK, MINB) -> name
    expression."""
    names = {}
    for (dname, _, _), cases in CASES.items():
        for P, _, NB, LEVELS, BULK, MINB in cases:
            for key in ((P, NB, LEVELS, 0, BULK, MINB), (P, 2, 1, 1, False, 1)):
                names[(dname, *key)] = expr(dname, *key)
    return names


def source():
    return _kernels.source("softmax_columns.cu") + PROBE


def smem_bytes(V, P, per, itemsize, NB):
    C = P * V
    rows = THREADS // P if P >= 32 else THREADS // 32  # R in the kernel
    return 2 * rows * C * 4 + 2 * C * 4 + NB * per * C * itemsize


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="probe-results", help="folder for team_probe.csv")
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args(argv)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    if sms < 132:  # fewer SMs than the grids below: blocks would wait for teammates never resident
        raise SystemExit(f"team_probe.py: its grids are cut for 132 SMs, this GPU has {sms}")
    mod = cupy.RawModule(code=source(), options=_kernels.options(),
                         name_expressions=tuple(instantiations().values()))
    timer = bench.Timer(cupy, args.repeat)
    table = Table(Path(args.out) / "team_probe.csv")
    for (dname, n, inner), cases in CASES.items():
        itemsize = bench._dtype(cupy, dname).itemsize
        V = 16 // itemsize
        case = Case(timer, dname, n, inner)
        for P, team, NB, LEVELS, BULK, MINB in cases:
            C = P * V
            per = math.ceil(n / team)
            teams = 132 * MINB // team
            lines = inner // C
            part = cupy.zeros(teams * 4 * team * 2 * C, dtype=cupy.float32)
            stats = cupy.zeros(teams * 2 * 2 * C, dtype=cupy.float32)
            count = cupy.zeros(8 * teams, dtype=cupy.uint32)
            smem = smem_bytes(V, P, per, itemsize, NB)
            for mode in (1, 0):
                fn = mod.get_function(expr(dname, P, NB, LEVELS, 0, BULK, MINB) if mode == 0 else expr(dname, P, 2, 1, 1))
                fn.max_dynamic_shared_size_bytes = smem

                def run():
                    count.fill(0)
                    fn((teams * team,), (THREADS,), (case.x, case.y, np.int64(n), np.int64(inner), np.int32(team),
                                                     np.int32(per), part, stats, count), shared_mem=smem)

                t, bad = case.measure(run, copy=mode == 1)
                table.add(dict(dtype=dname, n=n, inner=inner, strip_bytes=16 * P, team=team, teams=teams, per=per,
                               slice_kb=round(per * 16 * P / 1024, 1), nb=NB, levels=LEVELS, bulk=BULK,
                               blocks_an_sm=MINB, lines_a_team=math.ceil(lines / teams),
                               mode=("copy", "softmax")[mode == 0], **case.times(t), regs=fn.num_regs,
                               local_bytes=fn.local_size_bytes, error=bad))


if __name__ == "__main__":
    main()
