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

// Blocks of ONLINE_THREADS threads, ONLINE_BLOCKS resident per SM: half types 3 (at most 40
// registers a thread), the others 2 (at most 64). ONLINE_BLOCKS_PER_SM in cusoftmax/_dispatch.py
// has the measurements.
constexpr int ONLINE_THREADS = 512;
// L2 priorities: a chunk's first read, its second read, the output. Evidence: H200, 2026-11-30,
// run s14-1 (two rounds, fraction of copy), float32 rows of 2**21 / 2**22, then one row of 2**24 /
// 2**27; bfloat16 rows of 2**21 / 2**22; float16 the same: none 0.61 each / 0.62 each / 0.57,
// 0.60 / 0.62 each; 0.56 each / 0.60 each; 0.58 each / 0.60 each; evict-first second reads and
// stores 0.60 each / 0.61, 0.62 / 0.58, 0.61 / 0.61 each; 0.57, 0.58 / 0.60, 0.61; 0.58, 0.59 /
// 0.60, 0.61; also evict-last first reads (these) 0.61 each / 0.62, 0.63 / 0.57 each / 0.62 each;
// 0.58 each / 0.61 each; 0.59, 0.60 / 0.62, 0.63; evict-first stores alone 0.61, 0.62 / 0.62
// each / 0.56, 0.60 / 0.62 each; 0.56, 0.57 / 0.60 each; 0.58 each / 0.60, 0.61. Nsight Compute
// (s14-2, bfloat16 rows of 2**21): L2 hits of the loads' sectors 0.8% without, 4.8% with them;
// at 128 KiB chunks and groups of half a wave the second read is seldom in L2 either way.
constexpr L2 ONLINE_FIRST_READ = L2::last, ONLINE_SECOND_READ = L2::first, ONLINE_STORE = L2::first;
template <typename T> constexpr int ONLINE_BLOCKS = sizeof(T) == 2 ? 3 : 2;

// A read item: the chunk's (m, d) into the workspace, then counted (nothing waits for it).
template <typename T, int V, typename C>
__device__ inline void online_read(const T* xc, int n, double* chunk_part, unsigned* row_count,
                                   acc_t* scratch) {
    MD<C> s = MD<C>::identity();
    walk_run<ONLINE_THREADS, T, V, ONLINE_FIRST_READ>(xc, n, [&](int, C(&v)[V], bool) { s.push_pack(v); });
    publish_chunk(chunk_part, block_merge(s, scratch), row_count);
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
        write_run<true, ONLINE_THREADS, T, V, ONLINE_SECOND_READ, ONLINE_STORE>(xc, yc, n, s.m, scale * exp_shifted(C(0), shift_rounding(s.m)));
    else
        write_run<false, ONLINE_THREADS, T, V, ONLINE_SECOND_READ, ONLINE_STORE>(xc, yc, n, s.m, scale);
}

template <typename T, int V>
__global__ void __launch_bounds__(ONLINE_THREADS, ONLINE_BLOCKS<T>) softmax_online(const T* x, T* y, void* work, long long rows, long long cols,
                               long long ldx, long long ldy, long long chunk, long long chunks,
                               long long per_group) {
    using C = compute_t<T>;
    __shared__ acc_t scratch[32];
    __shared__ unsigned long long slot;
    const Schedule plan{rows, chunks, per_group, (rows + per_group - 1) / per_group};
    const Workspace ws(work, rows, 1);
    if (blockDim.x != ONLINE_THREADS) __trap();  // walk_run steps by ONLINE_THREADS packs
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
