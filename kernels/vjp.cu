// Backward passes of softmax and log_softmax: dx from y and dy by each slice's sum s of
// Ep::term(y, dy) (ops.cuh), summed in the compute type within a thread's packs, then in double.
// Rows of n contiguous elements: vjp_lanes (a row in a warp's lanes, 1 read of y and dy),
// vjp_block (a block a row) and vjp_chunks (few rows, in chunks), 2 reads, vjp_hold (a block a
// row held on chip: y in registers, dy in shared memory), 1 read; a strided axis:
// vjp_columns, 2 reads (docs/design.md). Ld loads both arrays.
#include "common.cuh"
#include "ops.cuh"

#if !defined(CSM_VJP_THREADS) || !defined(CSM_VJP_COLUMNS_BLOCKS_PER_SM) || !defined(CSM_VJP_HOLD_THREADS)
#error "vjp.cu needs -DCSM_VJP_THREADS, -DCSM_VJP_COLUMNS_BLOCKS_PER_SM, -DCSM_VJP_HOLD_THREADS"
#endif

namespace csm {

[[maybe_unused]] constexpr int VJP_THREADS = CSM_VJP_THREADS;  // threads a block of every kernel
[[maybe_unused]] constexpr int VJP_BATCH = 4;  // packs of each array a thread loads before any is used (block walks)
static_assert(VJP_THREADS % 32 == 0 && VJP_THREADS <= 1024, "whole warps, one block");
template <typename T> constexpr int VJP_BLOCKS = HALF_RESIDENT<T, VJP_THREADS>;  // launch bounds
constexpr int VJP_COLUMNS_BLOCKS = CSM_VJP_COLUMNS_BLOCKS_PER_SM;  // vjp_columns' launch bounds
[[maybe_unused]] constexpr int VJP_HOLD_THREADS = CSM_VJP_HOLD_THREADS;  // vjp_hold's threads a block at most

// A pack's two inputs as Ld loads them.
template <class Ld, typename T, int V, typename C>
__device__ inline void vjp_values(const Ld& ld, const word_t<T, V>& wy, const word_t<T, V>& wg, C (&y)[V], C (&g)[V]) {
    unpack_word<T, V>(wy, y);
    unpack_word<T, V>(wg, g);
    ld.load(y);
    ld.load(g);
}

// The same, and the row's terms of them added to `part`.
template <class Ld, class Ep, typename T, int V, typename C>
__device__ inline void vjp_terms(const Ld& ld, const word_t<T, V>& wy, const word_t<T, V>& wg, C (&y)[V], C (&g)[V], C& part) {
    vjp_values<Ld, T, V>(ld, wy, wg, y, g);
#pragma unroll
    for (int j = 0; j < V; ++j) part += Ep::term(y[j], g[j]);
}

// Padding past a row's end loads as y = dy = 0: every op's term of it is 0; nothing there is
// written.
template <class Ld, class Ep, typename T, int V, int W, int P, int R>
__global__ void __launch_bounds__(VJP_THREADS, VJP_BLOCKS<T>)
    vjp_lanes(const T* y, const T* dy, T* dx, long long rows, int n, const Ld ld) {
    using C = compute_t<T>;
    constexpr int G = 32 / W;
    const int sub = threadIdx.x & (W - 1), group = (threadIdx.x & 31) / W;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const long long stride = (long long)gridDim.x * blockDim.x / 32 * G * R;
    for (long long first = warp * G * R; first < rows; first += stride) {
        word_t<T, V> wy[R][P], wg[R][P];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const long long row = min(first + (long long)r * G + group, rows - 1);
#pragma unroll
            for (int p = 0; p < P; ++p) {
                const int c = (p * W + sub) * V;
                wy[r][p] = load_row_word<T, V>(y + row * n, c, n, C(0));
                wg[r][p] = load_row_word<T, V>(dy + row * n, c, n, C(0));
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            C part = 0, yv[P][V], gv[P][V];
#pragma unroll
            for (int p = 0; p < P; ++p) vjp_terms<Ld, Ep, T, V>(ld, wy[r][p], wg[r][p], yv[p], gv[p], part);
            const C s = C(group_reduce(acc_t(part), W, SumOp()));
            const long long row = first + (long long)r * G + group;
            if (row >= rows) continue;
#pragma unroll
            for (int p = 0; p < P; ++p) {
#pragma unroll
                for (int j = 0; j < V; ++j) yv[p][j] = Ep::out(yv[p][j], gv[p][j], s);
                store_row_pack<T, V>(dx + row * n, (p * W + sub) * V, n, yv[p]);
            }
        }
    }
}

// A block's walk of a run of `n` elements of y and dy (a row, or a chunk of one) in batches of
// VJP_BATCH packs a thread: this thread's sum of the terms (vjp_run_sum), or dx of every
// element from the row's sum s (vjp_run_write).
template <typename T, int V> struct VjpBatch {
    word_t<T, V> y[VJP_BATCH], g[VJP_BATCH];
    __device__ void load(const T* yr, const T* gr, long long c0, long long n) {
        const int step = int(blockDim.x) * V;
#pragma unroll
        for (int b = 0; b < VJP_BATCH; ++b) {
            y[b] = load_row_word<T, V>(yr, c0 + b * step, n, compute_t<T>(0));
            g[b] = load_row_word<T, V>(gr, c0 + b * step, n, compute_t<T>(0));
        }
    }
};
template <class Ld, class Ep, typename T, int V>
__device__ inline acc_t vjp_run_sum(const Ld& ld, const T* yr, const T* gr, long long n) {
    using C = compute_t<T>;
    acc_t sum = 0;
    for (long long c0 = threadIdx.x * V; c0 < n; c0 += VJP_BATCH * (long long)blockDim.x * V) {
        VjpBatch<T, V> w;
        w.load(yr, gr, c0, n);
        C part = 0, yv[V], gv[V];
#pragma unroll
        for (int b = 0; b < VJP_BATCH; ++b) vjp_terms<Ld, Ep, T, V>(ld, w.y[b], w.g[b], yv, gv, part);
        sum += acc_t(part);
    }
    return sum;
}
template <class Ld, class Ep, typename T, int V>
__device__ inline void vjp_run_write(const Ld& ld, const T* yr, const T* gr, T* xr, long long n, compute_t<T> s) {
    using C = compute_t<T>;
    const int step = int(blockDim.x) * V;
    for (long long c0 = threadIdx.x * V; c0 < n; c0 += VJP_BATCH * (long long)step) {
        VjpBatch<T, V> w;
        w.load(yr, gr, c0, n);
#pragma unroll
        for (int b = 0; b < VJP_BATCH; ++b) {
            C yv[V], gv[V];
            vjp_values<Ld, T, V>(ld, w.y[b], w.g[b], yv, gv);
#pragma unroll
            for (int j = 0; j < V; ++j) yv[j] = Ep::out(yv[j], gv[j], s);
            store_row_pack<T, V>(xr, c0 + b * step, n, yv);
        }
    }
}

// A row a block: its sum over both arrays in batches, the block's tree (one barrier), then the
// row read again for the writes.
template <class Ld, class Ep, typename T, int V>
__global__ void __launch_bounds__(VJP_THREADS, VJP_BLOCKS<T>)
    vjp_block(const T* y, const T* dy, T* dx, long long rows, long long n, const Ld ld) {
    using C = compute_t<T>;
    __shared__ acc_t scratch[2][32];
    int turn = 0;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x, turn ^= 1) {
        const long long at = row * n;
        // Two scratch areas in turn: a row's reduction writes one only after every thread
        // passed the other's barrier (block_reduce_once).
        const acc_t sum = vjp_run_sum<Ld, Ep, T, V>(ld, y + at, dy + at, n);
        const C s = C(block_reduce_once(sum, scratch[turn], SumOp()));
        vjp_run_write<Ld, Ep, T, V>(ld, y + at, dy + at, dx + at, n, s);
    }
}

// A row a block, held: this thread's N packs of y in registers and of dy in its own slots of
// shared memory ([N][blockDim.x] packs, staged by cp.async), so that y and dy are read once
// (rows of up to blockDim.x * N * V elements: 128 KiB of each array at 1024 threads, N = 8 and
// 16-byte packs).
template <class Ld, class Ep, typename T, int V, int N>
__global__ void __launch_bounds__(VJP_HOLD_THREADS, 1)
    vjp_hold(const T* y, const T* dy, T* dx, long long rows, long long n, const Ld ld) {
    using C = compute_t<T>;
    extern __shared__ __align__(16) unsigned char smem[];
    word_t<T, V>* const slot = reinterpret_cast<word_t<T, V>*>(smem) + threadIdx.x;  // pack p: p * blockDim.x
    __shared__ acc_t scratch[2][32];
    int turn = 0;
    const int step = int(blockDim.x) * V;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x, turn ^= 1) {
        const long long at = row * n;
        word_t<T, V> wy[N];
#pragma unroll
        for (int p = 0; p < N; ++p) {
            const long long c = threadIdx.x * V + (long long)p * step;
            wy[p] = load_row_word<T, V>(y + at, c, n, C(0));
            stage_pack<T, V>(reinterpret_cast<T*>(slot + p * blockDim.x), dy + at + c, n - c, 0, C(0));
        }
        copy_commit();
        copy_wait_pending(0);
        C part = 0;
#pragma unroll
        for (int p = 0; p < N; ++p) {
            C yv[V], gv[V];
            vjp_terms<Ld, Ep, T, V>(ld, wy[p], slot[p * blockDim.x], yv, gv, part);
        }
        const C s = C(block_reduce_once(acc_t(part), scratch[turn], SumOp()));
#pragma unroll
        for (int p = 0; p < N; ++p) {
            C yv[V], gv[V];
            vjp_values<Ld, T, V>(ld, wy[p], slot[p * blockDim.x], yv, gv);
#pragma unroll
            for (int j = 0; j < V; ++j) yv[j] = Ep::out(yv[j], gv[j], s);
            store_row_pack<T, V>(dx + at, threadIdx.x * V + p * step, n, yv);
        }
    }
}

// Few long rows: (row, chunk) items of `chunk` elements (a multiple of V) by ticket in the
// two-pass schedule (Schedule; Workspace of width 1, its head zeroed before the launch). A read
// item adds its chunk's terms into its partial and counts it; the block that counts a row's last
// chunk adds the partials in chunk order (the same bits whichever block) into the row's sum; a
// write item waits for it and reads its chunk again. Read items never wait: any grid completes.
template <class Ld, class Ep, typename T, int V>
__global__ void __launch_bounds__(VJP_THREADS, VJP_BLOCKS<T>)
    vjp_chunks(const T* y, const T* dy, T* dx, void* work, long long rows, long long n, long long chunk,
               long long chunks, long long per_group, const Ld ld) {
    using C = compute_t<T>;
    // scratch[0]: a read item's tree, scratch[1]: a row's merge; each written again only after
    // a later barrier (chunk_done's, the next hand-over's) that every reader has passed.
    __shared__ acc_t scratch[2][32];
    __shared__ unsigned long long slots[2];
    __shared__ int flag;
    unsigned turn = 0;
    const Schedule plan{rows, chunks, per_group, (rows + per_group - 1) / per_group};
    const Workspace ws(work, rows, 1);
    for (unsigned long long t = hand_over(prefetch_ticket(ws.ticket), slots, turn); t < plan.tickets();) {
        const unsigned long long next = prefetch_ticket(ws.ticket);
        long long row, k;
        bool write;
        if (plan.item(t, row, k, write)) {
            const long long begin = k * chunk, at = row * n + begin, len = min(chunk, n - begin);
            if (!write) {
                const acc_t sum = vjp_run_sum<Ld, Ep, T, V>(ld, y + at, dy + at, len);
                const acc_t part = block_reduce_once(sum, scratch[0], SumOp());
                if (threadIdx.x == 0) __stcg(ws.part + 2 * (row * chunks + k), part);
                if (chunk_done(ws.count + row, chunks, &flag, threadIdx.x == 0)) {
                    acc_t total = 0;
                    for (long long j = threadIdx.x; j < chunks; j += blockDim.x)
                        total += __ldcg(ws.part + 2 * (row * chunks + j));
                    total = block_reduce_once(total, scratch[1], SumOp());
                    if (threadIdx.x == 0) __stcg(ws.stats + 2 * row, total);
                    line_merged(ws.count + row);
                }
            } else {
                wait_count(ws.count + row, unsigned(chunks + 1));
                const C s = C(__ldcg(ws.stats + 2 * row));
                vjp_run_write<Ld, Ep, T, V>(ld, y + at, dy + at, dx + at, len, s);
            }
        }
        t = hand_over(next, slots, turn);
    }
}

// This thread's packs of y and dy at steps k, k + lanes, ... (VJP_BATCH of them; past the ends
// y = dy = 0: every op's term of them is 0), and step b's values as Ld loads them.
template <typename T, int V> struct VjpSteps {
    Pack<T, V> y[VJP_BATCH], g[VJP_BATCH];
    __device__ VjpSteps(const T* yo, const T* go, const StripLane& at, long long k, long long k1, long long sn) {
        load_steps<T, V>(yo, k, at.lanes, k1, sn, at.left, compute_t<T>(0), y);
        load_steps<T, V>(go, k, at.lanes, k1, sn, at.left, compute_t<T>(0), g);
    }
    template <class Ld, typename C> __device__ void values(const Ld& ld, int b, C (&yv)[V], C (&gv)[V]) const {
        unpack(y[b], yv);
        unpack(g[b], gv);
        ld.load(yv);
        ld.load(gv);
    }
};

// Each of this thread's V columns' sum of terms over its steps k0 + lane, + lanes, ... < k1 of
// y and dy (yo, go: its pack at step 0), VJP_BATCH steps at once.
template <class Ld, class Ep, typename T, int V>
__device__ inline void vjp_column_sums(const Ld& ld, const T* yo, const T* go, const StripLane& at, long long k0,
                                       long long k1, long long sn, acc_t (&s)[V]) {
    using C = compute_t<T>;
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = 0;
    for (long long k = k0 + at.lane; k < k1; k += VJP_BATCH * at.lanes) {
        const VjpSteps<T, V> w(yo, go, at, k, k1, sn);
        C part[V] = {};
#pragma unroll
        for (int b = 0; b < VJP_BATCH; ++b) {
            C yv[V], gv[V];
            w.values(ld, b, yv, gv);
#pragma unroll
            for (int j = 0; j < V; ++j) part[j] += Ep::term(yv[j], gv[j]);
        }
#pragma unroll
        for (int j = 0; j < V; ++j) s[j] += acc_t(part[j]);
    }
}

// The same steps read again and dx written (xo: this thread's pack of dx at step 0).
template <class Ld, class Ep, typename T, int V, typename C>
__device__ inline void vjp_column_writes(const Ld& ld, const T* yo, const T* go, T* xo, const StripLane& at,
                                         long long k0, long long k1, long long sn, const C (&s)[V]) {
    for (long long k = k0 + at.lane; k < k1; k += VJP_BATCH * at.lanes) {
        const VjpSteps<T, V> w(yo, go, at, k, k1, sn);
#pragma unroll
        for (int b = 0; b < VJP_BATCH; ++b) {
            const long long kb = k + b * at.lanes;
            if (kb >= k1) break;
            C yv[V], gv[V];
            w.values(ld, b, yv, gv);
#pragma unroll
            for (int j = 0; j < V; ++j) yv[j] = Ep::out(yv[j], gv[j], s[j]);
            store_row_pack<T, V>(xo + kb * sn, 0, at.left, yv);
        }
    }
}

// Each of this thread's V sums added over the step lanes of its pack in lane order (the same
// bits whichever block); lane 0 stores column j's at dst + 2 * j.
template <int V>
__device__ inline void vjp_lanes_sum(acc_t (&s)[V], acc_t* red, const StripLane& at, int width, double* dst) {
#pragma unroll
    for (int j = 0; j < V; ++j) {
        red[threadIdx.x] = s[j];
        __syncthreads();
        if (at.lane == 0) {
            for (int l = 1; l < at.lanes; ++l) s[j] += red[l * width + at.pack];
            __stcg(dst + 2 * j, s[j]);
        }
        __syncthreads();
    }
}

// A strided axis: the three arrays alike, element (o, k, i) at o * so + k * sn + i, summed over
// k. Lines (StripLane's strips) in chunks of `chunk` steps by ticket in the two-pass schedule:
// a read item's column sums over the step lanes are its partials; the block that counts a
// strip's last chunk adds them, each lane chunks lane, lane + lanes, ...; a write item reads
// again.
template <class Ld, class Ep, typename T, int V>
__global__ void __launch_bounds__(VJP_THREADS, VJP_COLUMNS_BLOCKS)
    vjp_columns(const T* y, const T* dy, T* dx, void* work, long long outer, long long n, long long inner,
                long long so, long long sn, long long chunk, long long chunks, long long per_group, int width,
                const Ld ld) {
    using C = compute_t<T>;
    __shared__ acc_t red[VJP_THREADS];
    __shared__ unsigned long long slots[2];
    __shared__ int flag;
    unsigned turn = 0;
    const int cols = width * V;
    const long long strips = (inner + cols - 1) / cols, lines = outer * strips;
    const Schedule plan{lines, chunks, per_group, (lines + per_group - 1) / per_group};
    const Workspace ws(work, lines, cols);
    for (unsigned long long t = hand_over(prefetch_ticket(ws.ticket), slots, turn); t < plan.tickets();) {
        const unsigned long long next = prefetch_ticket(ws.ticket);
        long long line, c;
        bool write;
        if (plan.item(t, line, c, write)) {
            const StripLane at(line, strips, inner, width, V);
            const long long k0 = c * chunk, k1 = min(n, k0 + chunk), first = at.o * so + at.col;
            double* stats = ws.stats + 2 * (line * cols + at.pack * V);
            if (!write) {
                acc_t s[V];
                vjp_column_sums<Ld, Ep, T, V>(ld, y + first, dy + first, at, k0, k1, sn, s);
                vjp_lanes_sum(s, red, at, width, ws.part + 2 * ((line * chunks + c) * cols + at.pack * V));
                if (chunk_done(ws.count + line, chunks, &flag, at.lane == 0)) {  // the strip's sums
#pragma unroll
                    for (int j = 0; j < V; ++j) s[j] = 0;
#pragma unroll 8  // loads of 8 chunks in flight: a strip may have hundreds
                    for (long long k = at.lane; k < chunks; k += at.lanes)
#pragma unroll
                        for (int j = 0; j < V; ++j)
                            s[j] += __ldcg(ws.part + 2 * ((line * chunks + k) * cols + at.pack * V + j));
                    vjp_lanes_sum(s, red, at, width, stats);
                    line_merged(ws.count + line);
                }
            } else {
                wait_count(ws.count + line, unsigned(chunks + 1));
                C s[V];
#pragma unroll
                for (int j = 0; j < V; ++j) s[j] = C(__ldcg(stats + 2 * j));
                vjp_column_writes<Ld, Ep, T, V>(ld, y + first, dy + first, dx + first, at, k0, k1, sn, s);
            }
        }
        t = hand_over(next, slots, turn);
    }
}

}  // namespace csm
