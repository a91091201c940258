// Backward passes of softmax and log_softmax: dx from y and dy, rows of n contiguous elements
// (row r of each array at r * n), by the row's sum s of Ep::term(y, dy) (kernels/ops.cuh).
//
//   kernel (after Ld, Ep)        a row by                          passes over memory
//   vjp_lanes<T, V, W, P, R>     W lanes of a warp, P packs of y   1 read of y and dy, 1 write
//                                and dy a lane, R rows a group
//   vjp_block<T, V>              a block, rows r, r + gridDim.x    2 reads of y and dy (the
//                                                                  second from L2 where it
//                                                                  stays), 1 write
//
// Sums in the compute type within a lane's packs, then in double. Ld: the values' load (both
// arrays); rows past the end are loaded again from the last row and never written.
#include "common.cuh"
#include "ops.cuh"

#if !defined(CSM_VJP_THREADS)
#error "vjp.cu needs -DCSM_VJP_THREADS from the loader"
#endif

namespace csm {

constexpr int VJP_THREADS = CSM_VJP_THREADS;  // threads a block of either kernel
constexpr int VJP_BATCH = 4;  // packs of each array a thread of vjp_block loads before any is used
static_assert(VJP_THREADS % 32 == 0 && VJP_THREADS <= 1024, "whole warps, one block");
template <typename T> constexpr int VJP_BLOCKS = HALF_RESIDENT<T, VJP_THREADS>;  // launch bounds

// A pack's two inputs as Ld loads them, and the row's terms of them added to `part`.
template <class Ld, class Ep, typename T, int V, typename C>
__device__ inline void vjp_terms(const Ld& ld, const word_t<T, V>& wy, const word_t<T, V>& wg, C (&y)[V], C (&g)[V], C& part) {
    unpack_word<T, V>(wy, y);
    unpack_word<T, V>(wg, g);
    ld.load(y);
    ld.load(g);
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

// A row a block: its sum over both arrays in batches, the block's tree (one barrier), then the
// row read again for the writes.
template <class Ld, class Ep, typename T, int V>
__global__ void __launch_bounds__(VJP_THREADS, VJP_BLOCKS<T>)
    vjp_block(const T* y, const T* dy, T* dx, long long rows, long long n, const Ld ld) {
    using C = compute_t<T>;
    __shared__ acc_t scratch[2][32];
    const int step = int(blockDim.x) * V;
    int turn = 0;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x, turn ^= 1) {
        const T *yr = y + row * n, *gr = dy + row * n;
        T* xr = dx + row * n;
        word_t<T, V> wy[VJP_BATCH], wg[VJP_BATCH];
        auto load = [&](long long c0) {  // this thread's batch of both arrays from c0
#pragma unroll
            for (int b = 0; b < VJP_BATCH; ++b) {
                wy[b] = load_row_word<T, V>(yr, c0 + b * step, n, C(0));
                wg[b] = load_row_word<T, V>(gr, c0 + b * step, n, C(0));
            }
        };
        acc_t sum = 0;
        for (long long c0 = threadIdx.x * V; c0 < n; c0 += VJP_BATCH * (long long)step) {
            load(c0);
            C part = 0, yv[V], gv[V];
#pragma unroll
            for (int b = 0; b < VJP_BATCH; ++b) vjp_terms<Ld, Ep, T, V>(ld, wy[b], wg[b], yv, gv, part);
            sum += acc_t(part);
        }
        // Two scratch areas in turn: a row's reduction writes one only after every thread
        // passed the other's barrier (block_reduce_once).
        const C s = C(block_reduce_once(sum, scratch[turn], SumOp()));
        for (long long c0 = threadIdx.x * V; c0 < n; c0 += VJP_BATCH * (long long)step) {
            load(c0);
#pragma unroll
            for (int b = 0; b < VJP_BATCH; ++b) {
                C part = 0, yv[V], gv[V];
                vjp_terms<Ld, Ep, T, V>(ld, wy[b], wg[b], yv, gv, part);
#pragma unroll
                for (int j = 0; j < V; ++j) yv[j] = Ep::out(yv[j], gv[j], s);
                store_row_pack<T, V>(xr, c0 + b * step, n, yv);
            }
        }
    }
}

}  // namespace csm
