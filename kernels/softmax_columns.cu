// Softmax over a strided axis, without a transposing copy.
//
// The input is seen as [outer][n][inner], inner contiguous, softmax over n: element (o, k, i)
// is at x + o * xso + k * xsn + i (y likewise). V divides xso, xsn, yso, ysn and both base
// addresses are V-aligned; the last pack of the inner axis may be partial. n is cut into
// `chunks` chunks of `chunk` steps (chunk from n alone, so results do not depend on the batch),
// and a thread owns one pack of V adjacent inner elements of one (o, chunk); neighbouring threads
// own neighbouring packs, so every step is a coalesced run of the contiguous axis. Three launches:
//
//   columns_partials<T, V>  walks its chunk once: per element (m, d) into part[o][chunk][i].
//   columns_merge<T>        per (o, i): merges the chunks in order into part[o][0][i].
//   columns_finish<T, V>    walks its chunk again and writes exp(x - m) / d.
//
// DRAM traffic: 2 reads + 1 write per element (the second read may hit L2), plus 16 bytes of
// partials per chunk per column, at most a quarter byte per element.
#include "common.cuh"

namespace csm {

constexpr int COLUMN_BATCH = 4;  // steps of n each thread loads before using any

// This thread's packs at steps k .. k + COLUMN_BATCH - 1 of its column run (steps past k1, the
// end of its chunk, load -inf); `left` elements of the pack are inside the inner axis.
template <typename T, int V, typename C>
__device__ inline void load_steps(const T* xo, long long k, long long k1, long long xsn,
                                  long long left, C (&v)[COLUMN_BATCH][V]) {
#pragma unroll
    for (int b = 0; b < COLUMN_BATCH; ++b)
        load_row_pack<T, V>(xo + (k + b) * xsn, 0, k + b < k1 ? left : 0, neg_inf<C>(), v[b]);
}

template <typename T, int V>
__global__ void columns_partials(const T* x, long long outer, long long n, long long inner,
                                 long long xso, long long xsn, long long chunk, long long chunks,
                                 double* part) {
    using C = compute_t<T>;
    const long long packs = (inner + V - 1) / V;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < outer * chunks * packs;
         t += (long long)gridDim.x * blockDim.x) {
        const long long oc = t / packs;  // o * chunks + chunk index
        const long long i = (t % packs) * V, left = inner - i;
        const long long k0 = (oc % chunks) * chunk, k1 = min(n, k0 + chunk);
        const T* xo = x + (oc / chunks) * xso + i;
        MD<C> s[V];
#pragma unroll
        for (int j = 0; j < V; ++j) s[j] = MD<C>::identity();
        for (long long k = k0; k < k1; k += COLUMN_BATCH) {
            C v[COLUMN_BATCH][V];
            load_steps<T, V>(xo, k, k1, xsn, left, v);
#pragma unroll
            for (int j = 0; j < V; ++j) {  // one rescale check per column per batch
                C w[COLUMN_BATCH];
#pragma unroll
                for (int b = 0; b < COLUMN_BATCH; ++b) w[b] = v[b][j];
                s[j].push_pack(w);
            }
        }
        double* out = part + 2 * (oc * inner + i);
#pragma unroll
        for (int j = 0; j < V; ++j)
            if (j < left) {
                out[2 * j] = double(s[j].m);
                out[2 * j + 1] = s[j].d;
            }
    }
}

template <typename T>
__global__ void columns_merge(long long outer, long long inner, long long chunks, double* part) {
    using C = compute_t<T>;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < outer * inner;
         t += (long long)gridDim.x * blockDim.x) {
        const long long o = t / inner, i = t % inner;
        double* first = part + 2 * (o * chunks * inner + i);
        MD<C> s = MD<C>::identity();
        for (long long c = 0; c < chunks; ++c) {
            const double* pc = first + 2 * c * inner;
            s.merge(MD<C>{C(pc[0]), pc[1]});
        }
        first[0] = double(s.m);
        first[1] = s.d;
    }
}

template <typename T, int V>
__global__ void columns_finish(const T* x, T* y, long long outer, long long n, long long inner,
                               long long xso, long long xsn, long long yso, long long ysn,
                               long long chunk, long long chunks, const double* part) {
    using C = compute_t<T>;
    const long long packs = (inner + V - 1) / V;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < outer * chunks * packs;
         t += (long long)gridDim.x * blockDim.x) {
        const long long oc = t / packs, o = oc / chunks;
        const long long i = (t % packs) * V, left = inner - i;
        const long long k0 = (oc % chunks) * chunk, k1 = min(n, k0 + chunk);
        const double* stats = part + 2 * (o * chunks * inner + i);
        C m[V], scale[V];
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const bool in = j < left;
            m[j] = in ? C(stats[2 * j]) : C(0);
            scale[j] = in ? scale_of(stats[2 * j + 1], C()) : C(0);
        }
        const T* xo = x + o * xso + i;
        T* yo = y + o * yso + i;
        for (long long k = k0; k < k1; k += COLUMN_BATCH) {
            C v[COLUMN_BATCH][V];
            load_steps<T, V>(xo, k, k1, xsn, left, v);
#pragma unroll
            for (int b = 0; b < COLUMN_BATCH; ++b) {
                if (k + b >= k1) break;
#pragma unroll
                for (int j = 0; j < V; ++j) v[b][j] = fast_exp(v[b][j] - m[j]) * scale[j];
                store_row_pack<T, V>(yo + (k + b) * ysn, 0, left, v[b]);
            }
        }
    }
}

}  // namespace csm
