// Online tiled softmax for rows too long to hold on chip, any length (64-bit offsets).
// Each row is cut into `chunks` chunks of `chunk` elements (chunk a multiple of V); one block
// works on one (row, chunk) at a time. Two launches:
//
//   online_partials<T, V>  reads its chunk once and writes that chunk's (m, d) to `part`
//                          (rows * chunks pairs of double, a few bytes per chunk).
//   online_finish<T, V>    merges the row's partials in a fixed order, then reads its chunk
//                          again and writes exp(x - m) / d.
//
// DRAM traffic: 2 reads + 1 write per element; the second read may hit L2, since
// online_finish walks the chunks in reverse. The chunk length depends on the row length only,
// never on the number of rows, so a row's bits do not depend on the batch it came in. Padding
// past the row end loads as -inf and is never stored.
#include "common.cuh"

namespace csm {

// Packs each thread loads before using any: bytes in flight to cover DRAM latency.
constexpr int ONLINE_BATCH = 4;

// Work item b: chunk b % chunks of row b / chunks, columns [begin, end).
struct Chunk {
    long long row, begin, end;
    __device__ Chunk(long long b, long long chunk, long long chunks, long long cols)
        : row(b / chunks), begin((b % chunks) * chunk), end(min(cols, (b % chunks) * chunk + chunk)) {}
};

// This thread's ONLINE_BATCH packs starting at column c0, `step` columns apart.
template <typename T, int V, typename C>
__device__ inline void load_batch(const T* row, long long c0, long long step, long long end,
                                  C (&v)[ONLINE_BATCH][V]) {
#pragma unroll
    for (int b = 0; b < ONLINE_BATCH; ++b) load_row_pack<T, V>(row, c0 + b * step, end, neg_inf<C>(), v[b]);
}

template <typename T, int V>
__global__ void online_partials(const T* x, long long rows, long long cols, long long ldx,
                                long long chunk, long long chunks, double* part) {
    using C = compute_t<T>;
    __shared__ MD<C> scratch[32];
    for (long long b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
        const Chunk w(b, chunk, chunks, cols);
        const T* xr = x + w.row * ldx;
        MD<C> s = MD<C>::identity();
        const long long step = (long long)blockDim.x * V;
        for (long long c0 = w.begin + (long long)threadIdx.x * V; c0 < w.end; c0 += ONLINE_BATCH * step) {
            C v[ONLINE_BATCH][V];
            load_batch<T, V>(xr, c0, step, w.end, v);
#pragma unroll
            for (int b = 0; b < ONLINE_BATCH; ++b) s.push_pack(v[b]);
        }
        s = block_merge(s, scratch);
        if (threadIdx.x == 0) {
            part[2 * b] = double(s.m);
            part[2 * b + 1] = s.d;
        }
    }
}

template <typename T, int V>
__global__ void online_finish(const T* x, T* y, long long rows, long long cols, long long ldx,
                              long long ldy, long long chunk, long long chunks,
                              const double* part) {
    using C = compute_t<T>;
    __shared__ MD<C> scratch[32];
    // Last chunk first: online_partials read the chunks in order, so the most recently read
    // ones (the likeliest still in L2) are read again first.
    for (long long i = blockIdx.x; i < rows * chunks; i += gridDim.x) {
        const long long b = rows * chunks - 1 - i;
        const Chunk w(b, chunk, chunks, cols);
        MD<C> s = MD<C>::identity();
        for (long long k = threadIdx.x; k < chunks; k += blockDim.x) {
            const double* pk = part + 2 * (w.row * chunks + k);
            s.merge(MD<C>{C(pk[0]), pk[1]});
        }
        s = block_merge(s, scratch);
        const C scale = scale_of(s.d, C());
        const T* xr = x + w.row * ldx;
        T* yr = y + w.row * ldy;
        const long long step = (long long)blockDim.x * V;
        for (long long c0 = w.begin + (long long)threadIdx.x * V; c0 < w.end; c0 += ONLINE_BATCH * step) {
            C v[ONLINE_BATCH][V];
            load_batch<T, V>(xr, c0, step, w.end, v);
#pragma unroll
            for (int b = 0; b < ONLINE_BATCH; ++b) {
#pragma unroll
                for (int j = 0; j < V; ++j) v[b][j] = fast_exp(v[b][j] - s.m) * scale;
                store_row_pack<T, V>(yr, c0 + b * step, w.end, v[b]);
            }
        }
    }
}

}  // namespace csm
