// Fused softmax: the row is held on chip, so each element is read once and written once
// (2 * itemsize bytes of DRAM traffic per element, the floor for any softmax).
//
//   softmax_warp<T, V, P, R> row in registers: `width` lanes (a power of two <= 32) share a row,
//                           each holding P packs of V elements; rows of up to 32 * P * V elements.
//                           Used for short rows; several rows per warp when width < 32, and R
//                           rows per lane group per iteration so short rows keep enough loads
//                           in flight.
//   softmax_block<T, V>     row in one block's dynamic shared memory (up to the device's opt-in
//                           limit); each thread keeps the packs it loaded, so after the load the
//                           row is walked twice on chip (sum of exp, then write). Medium rows.
//
// Here m is the row's final max, so plain exp(x - m) already follows SciPy: padding and -inf
// entries give 0, and a row whose max is -inf, +inf or whose sum is NaN comes out all NaN.
//
// Rows are `cols` contiguous elements; row r starts at x + r * ldx (y + r * ldy). V is chosen
// by the dispatcher so that every row start is V-aligned; the last pack of a row may be partial.
// x may equal y (in place): every element is read before it is written, by the same thread, so
// the pointers are not declared __restrict__.
#include "common.cuh"

namespace csm {

template <typename T, int V, int P, int R>
__global__ void softmax_warp(const T* x, T* y, long long rows, long long cols, long long ldx,
                             long long ldy, int width) {
    using C = compute_t<T>;
    const int sub = threadIdx.x & (width - 1);
    const int groups = 32 / width;  // row groups per warp
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    // Loop per warp, not per row: every lane runs the same iterations, so shuffles stay converged.
    // A group takes R rows per iteration (rows g, g + groups, ...), all loads issued first.
    for (long long first = warp * groups * R; first < rows; first += warps * groups * R) {
        C v[R][P][V], m[R], d[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const long long row = first + (long long)r * groups + (threadIdx.x & 31) / width;
            const long long n = row < rows ? cols : 0;  // a dead row loads nothing
            const T* xr = x + (n ? row : 0) * ldx;
#pragma unroll
            for (int p = 0; p < P; ++p)
                load_row_pack<T, V>(xr, ((long long)p * width + sub) * V, n, neg_inf<C>(), v[r][p]);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            m[r] = neg_inf<C>();
#pragma unroll
            for (int p = 0; p < P; ++p)
#pragma unroll
                for (int j = 0; j < V; ++j) m[r] = fmax(m[r], v[r][p][j]);
            m[r] = group_reduce(m[r], width, MaxOp());
            // At most 32 terms per lane and 5 shuffle levels: a float sum stays far inside 1e-5.
            d[r] = 0;
#pragma unroll
            for (int p = 0; p < P; ++p)
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    v[r][p][j] = fast_exp(v[r][p][j] - m[r]);  // padding (-inf) gives 0
                    d[r] += v[r][p][j];
                }
            d[r] = group_reduce(d[r], width, SumOp());
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const long long row = first + (long long)r * groups + (threadIdx.x & 31) / width;
            if (row >= rows) break;
            const C s = scale_of(acc_t(d[r]), C());
            T* yr = y + row * ldy;
#pragma unroll
            for (int p = 0; p < P; ++p) {
#pragma unroll
                for (int j = 0; j < V; ++j) v[r][p][j] *= s;
                store_row_pack<T, V>(yr, ((long long)p * width + sub) * V, cols, v[r][p]);
            }
        }
    }
}

// Dynamic shared memory: 32 acc_t of reduction scratch, then the row (cols elements of T,
// padded to whole packs). Loads go out BLOCK_BATCH packs per thread at a time, so enough bytes
// are in flight to cover DRAM latency with one 1024-thread block per SM.
constexpr int BLOCK_BATCH = 4;

template <typename T, int V>
__global__ void softmax_block(const T* x, T* y, long long rows, long long cols, long long ldx,
                              long long ldy) {
    using C = compute_t<T>;
    extern __shared__ __align__(16) unsigned char smem[];
    acc_t* scratch = reinterpret_cast<acc_t*>(smem);
    C* cscratch = reinterpret_cast<C*>(smem);
    T* row_s = reinterpret_cast<T*>(smem + 32 * sizeof(acc_t));
    const int packs = int((cols + V - 1) / V);
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * ldx;
        C m = neg_inf<C>();
        // One DRAM read per element. Each thread later walks exactly the packs it stored here,
        // so no barrier is needed between the load and the walks.
        for (int k0 = threadIdx.x; k0 < packs; k0 += BLOCK_BATCH * blockDim.x) {
            C v[BLOCK_BATCH][V];
#pragma unroll
            for (int b = 0; b < BLOCK_BATCH; ++b) {
                const int k = k0 + b * blockDim.x;
                load_row_pack<T, V>(xr, (long long)k * V, k < packs ? cols : 0, neg_inf<C>(), v[b]);
            }
#pragma unroll
            for (int b = 0; b < BLOCK_BATCH; ++b) {
                const int k = k0 + b * blockDim.x;
                if (k >= packs) break;
                Pack<T, V> p;
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    p.v[j] = Traits<T>::out(v[b][j]);
                    m = fmax(m, v[b][j]);
                }
                store_pack<T, V>(row_s + k * V, p);
            }
        }
        m = block_reduce(m, cscratch, MaxOp());
        C part = 0;  // at most ~120 terms per thread in float, then the tree in double
        for (int k = threadIdx.x; k < packs; k += blockDim.x) {
            const Pack<T, V> p = load_pack<T, V>(row_s + k * V);
#pragma unroll
            for (int j = 0; j < V; ++j) part += fast_exp(Traits<T>::in(p.v[j]) - m);
        }
        const C s = scale_of(block_reduce(acc_t(part), scratch, SumOp()), C());
        T* yr = y + row * ldy;
        for (int k = threadIdx.x; k < packs; k += blockDim.x) {
            const Pack<T, V> p = load_pack<T, V>(row_s + k * V);
            C v[V];
#pragma unroll
            for (int j = 0; j < V; ++j) v[j] = fast_exp(Traits<T>::in(p.v[j]) - m) * s;
            store_row_pack<T, V>(yr, (long long)k * V, cols, v);
        }
    }
}

}  // namespace csm
