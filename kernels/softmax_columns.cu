// Softmax over a strided axis, without a transposing copy.
//
//   softmax_columns<T, V>  the input seen as [outer][n][inner] with the inner axis contiguous;
//                          the softmax runs over n. Each thread owns V adjacent inner elements
//                          (a 16-byte pack) of one outer index and walks n twice: an online
//                          (m, d) pass, then a write pass. Neighbouring threads read neighbouring
//                          packs, so each step of the walk is a coalesced row segment.
//                          DRAM traffic: 2 reads + 1 write per element (the second read may hit L2).
//
// Element (o, k, i) is at x + o * xso + k * xsn + i (likewise y). V divides xso, xsn, yso, ysn
// and both base addresses are V-aligned; the last pack of the inner axis may be partial.
#include "common.cuh"

namespace csm {

template <typename T, int V>
__global__ void softmax_columns(const T* x, T* y, long long outer, long long n, long long inner,
                                long long xso, long long xsn, long long yso, long long ysn) {
    using C = compute_t<T>;
    const long long packs = (inner + V - 1) / V;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < outer * packs;
         t += (long long)gridDim.x * blockDim.x) {
        const long long o = t / packs;
        const long long i = (t % packs) * V;
        const T* xo = x + o * xso + i;
        T* yo = y + o * yso + i;
        const long long left = inner - i;  // elements of this pack inside the inner axis
        MD<C> s[V];
#pragma unroll
        for (int j = 0; j < V; ++j) s[j] = MD<C>::identity();
        for (long long k = 0; k < n; ++k) {
            C v[V];
            load_row_pack<T, V>(xo + k * xsn, 0, left, neg_inf<C>(), v);
#pragma unroll
            for (int j = 0; j < V; ++j) s[j].push(v[j]);
        }
        C scale[V];
#pragma unroll
        for (int j = 0; j < V; ++j) scale[j] = scale_of(s[j].d, C());
        for (long long k = 0; k < n; ++k) {
            C v[V];
            load_row_pack<T, V>(xo + k * xsn, 0, left, neg_inf<C>(), v);
#pragma unroll
            for (int j = 0; j < V; ++j) v[j] = term(v[j], s[j].m) * scale[j];
            store_row_pack<T, V>(yo + k * ysn, 0, left, v);
        }
    }
}

}  // namespace csm
