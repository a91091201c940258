"""Whether softmax along axis 0 of a C-contiguous (n x inner) matrix can reach 0.85 of copy by
holding nothing on chip and reading x twice, the second time from L2. Runs s27-1 and s27-2
(docs/history/benchmarks-log.md, H200, 2026-12-01): no, at most 0.64 (float32) and 0.53
(bfloat16), below the slab; the copy in the same walk 0.91 to 0.93.

The kernel (`reread` below, built from softmax_columns.cu's pieces) walks lines as the slab
does: a line is a strip of `width` 16-byte packs of every row, cut over the CL blocks of a
cluster along n. Each block reads its slice once into per-thread running (max, sum) pairs
(column_states), the pairs are merged over the block's warps and the cluster's blocks
(cluster_columns), and the block reads its slice again, this time from L2, and writes it
(column_writes). Unlike the slab, the strip's width is not bounded by shared memory (n x 16 x
width bytes a line), so strips of 256 and 512 bytes can be walked, where the slab takes 64 or
128 (run s20-9, float32 4096 x 16384: a copy walked in strips of 64 / 128 / 256 bytes ran at
0.58 to 0.61 / 0.79 / 0.86 to 0.90 of copy). The cost is L2's room: a grid of K clusters keeps
about K x n x 16 x width bytes between a slice's two reads, so the grid is cut to K clusters
that walk the lines in turn (K printed with that working set).

Each thread loads B steps (4 or 8) before it uses any, and keeps its running pairs either as
MD<float> (float max, double sum, a double exp per rescale, as the columns kernel) or as FloatMD
(float sum, rescaled by MUFU). MODE 1 is a plain copy in the same walk (each slice read once and
written; no second read, no exchange): the ceiling of the walk itself. Every MODE 0 result is
checked against cusoftmax's own axis-0 result (whatever the dispatcher runs there), to twice the
dtype's bound, and sampled columns against a float64 reference, before it is timed. Timed as the
benchmark times (`cusoftmax.bench.Timer`: L2 flushed, CUDA events, median of 30), against a
device-to-device copy of the same bytes. Run on a sm_90 GPU: `python3 dev/probes/reread_probe.py
[--out DIR]`, or `tools/gpu_check.sh axis0-probe` (under its step's time limit)."""

import argparse
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
#if __CUDA_ARCH__ >= 900
// A running (max, sum) in float, rescaled by fast_exp (MUFU) where MD<float> rescales by a
// double exp and sums in double: which of the two costs a thread's pass more.
struct FloatMD {
    float m, d;
    __device__ static FloatMD identity() { return {neg_inf<float>(), 0.0f}; }
    template <int B> __device__ void push_pack(const float (&v)[B]) {
        float pm = v[0];
#pragma unroll
        for (int j = 1; j < B; ++j) pm = fmaxf(pm, v[j]);
        const float mn = fmaxf(m, pm);
        d = sum_at(m, d, mn);
        m = mn;
        float s = 0;
#pragma unroll
        for (int j = 0; j < B; ++j) s += term(v[j], m);
        d += s;
    }
};

template <bool FS> struct StateOf { using type = MD<float>; };
template <> struct StateOf<true> { using type = FloatMD; };

// MODE 0: softmax over n; MODE 1: y = x, one read and one write in the same walk. B: steps a
// thread loads before using any; FS: the running state FloatMD (else MD<float>). 64 registers a
// thread, 128 for B > 4 (at 64, ptxas sm_90 spills 20 to 284 bytes there).
template <typename T, int V, int CL, int THREADS, int MODE, int B, bool FS>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, (B > 4 ? 512 : 1024) / THREADS)
    reread(const T* x, T* y, long long n, long long inner, int width) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int RB = CL > THREADS / 32 ? CL : THREADS / 32;
    const Mail<CL> mail{reinterpret_cast<unsigned long long*>(smem)};
    const int cols = width * V;
    float* fin = reinterpret_cast<float*>(smem + 16);  // [cols][2]
    float* recv = fin + 2 * cols;                       // [2][RB][cols][2]
    const int rank = int(cluster_rank<CL>());
    const long long per = (n + CL - 1) / CL, k0 = rank * per, k1 = min(n, k0 + per);
    const long long lines = inner / cols;  // the probe's inner is a multiple of cols
    mail.open();
    int k = 0;
    for (long long line = blockIdx.x / CL; line < lines; line += gridDim.x / CL, ++k) {
        const StripLane at(line, lines, inner, width, V);
        const T* xo = x + at.col;
        T* yo = y + at.col;
        if constexpr (MODE == 1) {
            for (long long s = k0 + at.lane; s < k1; s += B * at.lanes) {
                Pack<T, V> p[B];
                load_steps<T, V>(xo, s, at.lanes, k1, inner, at.left, p);
#pragma unroll
                for (int b = 0; b < B; ++b)
                    if (s + b * at.lanes < k1) store_pack_global<T, V>(yo + (s + b * at.lanes) * inner, p[b]);
            }
        } else {
            typename StateOf<FS>::type s[V];
            column_states<Plain, T, V, B>(xo, at, k0, k1, inner, s);
            if (k == 0) mail.opened();
            float m[V], d[V], scale[V];
#pragma unroll
            for (int j = 0; j < V; ++j) m[j] = s[j].m;
            warp_columns_reduce(m, width, MaxOp());
#pragma unroll
            for (int j = 0; j < V; ++j) d[j] = float(sum_at(s[j].m, s[j].d, m[j]));
            warp_columns_reduce(d, width, SumOp());
            cluster_columns<Softmax>(m, d, scale, at.pack, width, cols, rank, k, RB, mail, recv, fin);
            column_writes<Plain, Softmax, T, V, B>(xo, yo, at, k0, k1, inner, inner, m, scale);
        }
    }
    if (MODE == 1 || k == 0) mail.opened();  // still leave the cluster barrier
    mail.close();
}
#endif
}  // namespace csm
"""

TYPES = {"float32": "float", "bfloat16": "__nv_bfloat16"}
SHAPES = [(4096, 16384), (16384, 4096)]
WIDTHS = [16, 32]  # packs a strip: 256 and 512 bytes of each row
CLUSTERS = [8, 16]
THREADS = 512  # run s27-1 (docs/history/benchmarks-log.md): 1024 slower in every case
# (mode, steps loaded at once, float state): the copy, then softmax with either state
KINDS = [(1, 4, False), (1, 8, False), (0, 4, False), (0, 8, False), (0, 4, True), (0, 8, True)]


def instantiations():
    """Every kernel the probe launches: (dtype name, CL, kind) -> name expression."""
    return {(d, cl, kind): f"csm::reread<{c}, {16 // (4 if d == 'float32' else 2)}, {cl}, {THREADS}, "
                           f"{kind[0]}, {kind[1]}, {str(kind[2]).lower()}>"
            for d, c in TYPES.items() for cl in CLUSTERS for kind in KINDS}


def source():
    return _kernels.source("softmax_columns.cu") + PROBE


def smem_bytes(cl, threads, cols):
    rb = max(cl, threads // 32)
    return 16 + 8 * cols + 2 * rb * cols * 8


def main(argv=None):
    from cupy_backends.cuda.api import driver

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="probe-results", help="folder for reread_probe.csv")
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args(argv)
    names = instantiations()
    mod = cupy.RawModule(code=source(), options=_kernels.options(), name_expressions=tuple(names.values()))
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    timer = bench.Timer(cupy, args.repeat)
    table = Table(Path(args.out) / "reread_probe.csv")
    for dname in TYPES:
        V = 16 // bench._dtype(cupy, dname).itemsize
        for n, inner in SHAPES:
            case = Case(timer, dname, n, inner)
            x, y = case.x, case.y
            for width in WIDTHS:
                cols = width * V
                lines = inner // cols
                line_mb = n * width * 16 / 2**20
                for cl in CLUSTERS:
                    smem = smem_bytes(cl, THREADS, cols)
                    one_a_sm = max(1, sms // cl)
                    for clusters in sorted({min(k, lines) for k in (one_a_sm, 2 * one_a_sm, lines)}):
                        for mode, batch, float_state in KINDS:
                            fn = mod.get_function(names[(dname, cl, (mode, batch, float_state))])
                            fn.max_dynamic_shared_size_bytes = smem
                            if cl > 8:
                                driver.funcSetAttribute(fn.kernel.ptr, _kernels._NON_PORTABLE_CLUSTER, 1)

                            def run():
                                fn((clusters * cl,), (THREADS,), (x, y, np.int64(n), np.int64(inner),
                                                                   np.int32(width)), shared_mem=smem)

                            t, bad = case.measure(run, copy=mode == 1)
                            table.add(dict(dtype=dname, n=n, inner=inner, strip_bytes=width * 16, cluster=cl,
                                           threads=THREADS, batch=batch, float_state=float_state,
                                           clusters=clusters, working_mb=round(clusters * line_mb, 1),
                                           mode=("copy", "softmax")[mode == 0], **case.times(t),
                                           regs=fn.num_regs, local_bytes=fn.local_size_bytes, error=bad))


if __name__ == "__main__":
    main()
