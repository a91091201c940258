// Online softmax for rows too long to hold on chip, any length (64-bit offsets), in one launch.
// Each row is a line of the two-pass schedule in common.cuh, cut into `chunks` chunks of `chunk`
// elements (chunk a multiple of V):
//
//   read item   reads its chunk once, writes the chunk's (m, d) to the workspace and counts
//               it (without waiting for the count).
//   write item  waits until the row's chunks are all counted, merges their pairs (a fixed
//               order: strided over the threads, then the block merge; 16 bytes of L2 reads per
//               chunk of the row), reads its chunk again (from L2 when the row's group still is
//               there) and writes exp(x - m) / d.
//
// DRAM traffic: 1 read + 1 write per element when a group's chunks stay in L2 between the two
// passes (rows of a few MB at most), 2 reads + 1 write otherwise. The chunk length depends on
// the row length and the vector width only, never on the number of rows or the grouping, so for
// the same vector width a row's bits do not depend on the batch it came in. Padding past the
// row end loads as -inf and is never stored.
#include "common.cuh"

namespace csm {

// Packs each thread loads before using any: bytes in flight to cover DRAM latency.
constexpr int ONLINE_BATCH = 4;
// Blocks of ONLINE_THREADS threads, at least 2 resident per SM (at most 64 registers per thread).
constexpr int ONLINE_THREADS = 512;

// Calls f(c, v, whole) for each of this thread's packs of the `n` elements at xc (a chunk, so
// n < 2^31: 32-bit offsets): c the pack's offset, v its values, `whole` true where the pack is
// inside (a constant at each call, so an inlined f tests it at compile time). ONLINE_BATCH packs
// are loaded before any is used; a batch wholly inside the chunk (every batch but the last of a
// row's last chunk) loads and stores without a bound test per pack.
template <typename T, int V, typename F>
__device__ inline void walk_chunk(const T* xc, int n, F&& f) {
    using C = compute_t<T>;
    constexpr int STEP = ONLINE_THREADS * V;
    int c0 = int(threadIdx.x) * V;
    for (; c0 + (ONLINE_BATCH - 1) * STEP + V <= n; c0 += ONLINE_BATCH * STEP) {
        word_t<T, V> w[ONLINE_BATCH];
#pragma unroll
        for (int b = 0; b < ONLINE_BATCH; ++b) w[b] = *reinterpret_cast<const word_t<T, V>*>(xc + c0 + b * STEP);
#pragma unroll
        for (int b = 0; b < ONLINE_BATCH; ++b) {
            C v[V];
            unpack_word<T, V>(w[b], v);
            f(c0 + b * STEP, v, true);
        }
    }
    if (c0 < n) {  // the chunk's last, partial batch: -inf past its end
        word_t<T, V> w[ONLINE_BATCH];
#pragma unroll
        for (int b = 0; b < ONLINE_BATCH; ++b) w[b] = load_row_word<T, V>(xc, c0 + b * STEP, n, neg_inf<C>());
#pragma unroll
        for (int b = 0; b < ONLINE_BATCH; ++b) {
            C v[V];
            unpack_word<T, V>(w[b], v);
            f(c0 + b * STEP, v, false);
        }
    }
}

// A read item: the chunk's (m, d) into the workspace, then counted (nothing waits for it).
template <typename T, int V, typename C>
__device__ inline void online_read(const T* xc, int n, double* chunk_part, unsigned* row_count,
                                   acc_t* scratch) {
    MD<C> s = MD<C>::identity();
    walk_chunk<T, V>(xc, n, [&](int, C(&v)[V], bool) { s.push_pack(v); });
    publish_chunk(chunk_part, block_merge(s, scratch), row_count);
}

// exp(x - m) * scale for the chunk's packs, stored (SHIFTED: by exp_shifted, m passes shift_ok).
template <bool SHIFTED, typename T, int V, typename C>
__device__ inline void write_chunk(const T* xc, T* yc, int n, C m, C scale) {
    const C s = shift_of(m);
    walk_chunk<T, V>(xc, n, [&](int c, C(&v)[V], bool whole) {
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = exp_by<SHIFTED>(v[j], m, s) * scale;
        if (whole)
            store_pack_global<T, V>(yc + c, pack_out<T, V>(v));
        else
            store_row_pack<T, V>(yc, c, n, v);
    });
}

// A write item: once every chunk of the row is counted, the row's (m, d) from its chunks' pairs
// (merged the same way by every write item of the row: the same bits), then exp(x - m) / d for
// the chunk.
template <typename T, int V, typename C>
__device__ inline void online_write(const T* xc, T* yc, int n, long long chunks,
                                    const double* row_part, const unsigned* row_count,
                                    acc_t* scratch) {
    wait_count(row_count, unsigned(chunks));
    const MD<C> s = merge_chunks<C>(row_part, chunks, scratch);
    const C scale = scale_of(s.d, C());
    if (shift_ok(s.m))  // d came from exp(x - m) itself: the shift's rounding goes into the scale
        write_chunk<true, T, V>(xc, yc, n, s.m, scale * exp_shifted(C(0), shift_rounding(s.m)));
    else
        write_chunk<false, T, V>(xc, yc, n, s.m, scale);
}

template <typename T, int V>
__global__ void __launch_bounds__(ONLINE_THREADS, 2) softmax_online(const T* x, T* y, void* work, long long rows, long long cols,
                               long long ldx, long long ldy, long long chunk, long long chunks,
                               long long per_group) {
    using C = compute_t<T>;
    __shared__ acc_t scratch[32];
    __shared__ unsigned long long slot;
    const Schedule plan{rows, chunks, per_group, (rows + per_group - 1) / per_group};
    const Workspace ws(work, rows, 1);
    if (blockDim.x != ONLINE_THREADS) __trap();  // walk_chunk steps by ONLINE_THREADS packs
    for (unsigned long long t = hand_over(prefetch_ticket(ws.ticket), &slot); t < plan.tickets();) {
        const unsigned long long next = prefetch_ticket(ws.ticket);
        long long row, c;
        bool write;
        if (plan.item(t, row, c, write)) {
            const long long begin = c * chunk;
            const int n = int(min(cols - begin, chunk));
            double* row_part = ws.part + 2 * row * chunks;
            if (write)
                online_write<T, V, C>(x + row * ldx + begin, y + row * ldy + begin, n, chunks,
                                      row_part, ws.count + row, scratch);
            else
                online_read<T, V, C>(x + row * ldx + begin, n, row_part + 2 * c, ws.count + row,
                                     scratch);
        }
        t = hand_over(next, &slot);
    }
}

}  // namespace csm
