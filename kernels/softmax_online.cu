// Online softmax for rows too long to hold on chip, any length (64-bit offsets), in one launch.
// Each row is a line of the two-pass schedule in common.cuh, cut into `chunks` chunks of `chunk`
// elements (chunk a multiple of V):
//
//   read item   reads its chunk once, writes the chunk's (m, d) to the workspace and counts
//               it (without waiting for the count).
//   merge       the block whose read item counted a row's last chunk merges the row's pairs
//               (a fixed order: the same bits whichever block it is) into the row's (m, d)
//               and counts the row once more.
//   write item  waits for that, reads its chunk again (from L2 when the row's group still is
//               there) and writes exp(x - m) / d.
//
// An item has two barriers: the ticket's hand-over and one inside the item (a merge one more).
// Evidence: H200, 2026-11-30, run s14-6 (two rounds, fraction of copy; float32 rows of 2**21 /
// 2**22, one row of 2**24 / 2**27; bfloat16 rows of 2**21 / 2**22; float16 the same): 0.63 each
// / 0.63 each / 0.59, 0.58 / 0.62 each; 0.59 each / 0.63, 0.64; 0.59 each / 0.63 each, against
// the block merges of before (six barriers a read item, seven a write item) 0.61 each / 0.62
// each / 0.58, 0.59 / 0.62 each; 0.60, 0.59 / 0.62 each; 0.60 each / 0.62 each. Each write item
// merging the row's pairs on warp 0 alone (s14-5): one row of 2**24 / 2**27 0.49, 0.47 / 0.57
// each (16 and 32 pairs a lane, one after another). Each thread waiting for the row's merge on
// its own after its first loads, no barrier in a write item (s14-7): half types 0.51 to 0.53.
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

constexpr int ONLINE_WARPS = ONLINE_THREADS / 32;
static_assert(ONLINE_WARPS <= 32, "a lane of warp 0 per warp");

// The block's (m, d) from every thread's: each warp's by shuffles, the warps' pairs through
// `pairs` (2 * ONLINE_WARPS doubles of shared memory; one barrier), merged by warp 0 (lane w
// takes warp w's). The result is valid in warp 0 only.
template <typename C> __device__ inline MD<C> online_block_md(MD<C> s, double* pairs) {
    s = group_merge(s, 32);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        pairs[2 * warp] = double(s.m);
        pairs[2 * warp + 1] = s.d;
    }
    __syncthreads();
    s = lane < ONLINE_WARPS ? MD<C>{C(pairs[2 * lane]), pairs[2 * lane + 1]} : MD<C>::identity();
    return group_merge(s, 32);
}

// A read item: the chunk's (m, d) into the workspace, counted by thread 0, which returns true
// when that made the row's chunks all counted (its block then merges the row).
template <typename T, int V, typename C>
__device__ inline bool online_read(const T* xc, int n, long long chunks, double* chunk_part,
                                   unsigned* row_count, double* pairs) {
    MD<C> s = MD<C>::identity();
    walk_run<ONLINE_THREADS, T, V, ONLINE_FIRST_READ>(xc, n, [&](int, C(&v)[V], bool) { s.push_pack(v); });
    s = online_block_md(s, pairs);
    if (threadIdx.x != 0) return false;
    // publish_chunk's steps, keeping the count's old value (publish_chunk drops it)
    put_md(chunk_part, s);
    __threadfence();  // the pair before the count
    return atomicAdd(row_count, 1u) == unsigned(chunks - 1);
}

// The row's (m, d) from its chunks' pairs (strided over the threads, then online_block_md: a
// fixed order), into the workspace's statistics, counted once more: the write items' release.
// `pairs`: shared memory that no other item touches before the next hand-over.
template <typename C>
__device__ inline void online_merge(const double* row_part, long long chunks, double* row_stats,
                                    unsigned* row_count, double* pairs) {
    __threadfence();  // every other block's pairs are seen after the count that ended them
    MD<C> s = MD<C>::identity();
    for (long long k = threadIdx.x; k < chunks; k += ONLINE_THREADS) s.merge(get_md<C>(row_part + 2 * k));
    s = online_block_md(s, pairs);
    publish_chunk(row_stats, s, row_count);
}

// A write item: once the row is merged, thread 0 hands its max and scale over (one barrier);
// then exp(x - m) / d for the chunk.
template <typename T, int V, typename C>
__device__ inline void online_write(const T* xc, T* yc, int n, long long chunks,
                                    const double* row_stats, const unsigned* row_count, C* stat) {
    if (threadIdx.x == 0) {
        while (load_acquire(row_count) < unsigned(chunks + 1)) __nanosleep(100);
        const MD<C> s = get_md<C>(row_stats);
        stat[0] = s.m;
        stat[1] = scale_of(s.d, C());
    }
    __syncthreads();
    const C m = stat[0], scale = stat[1];
    if (shift_ok(m))  // d came from exp(x - m) itself: the shift's rounding goes into the scale
        write_run<true, ONLINE_THREADS, T, V, ONLINE_SECOND_READ, ONLINE_STORE>(xc, yc, n, m, scale * exp_shifted(C(0), shift_rounding(m)));
    else
        write_run<false, ONLINE_THREADS, T, V, ONLINE_SECOND_READ, ONLINE_STORE>(xc, yc, n, m, scale);
}

// What thread 0 hands over: the next ticket, and the row whose chunks its last read item
// completed (-1 for none), which the block merges before that ticket's item. No item waits
// between a row's completion and its merge, so every write item's wait ends.
struct Handed {
    unsigned long long ticket;
    long long merge_row;
};

// Shared memory is reused from item to item without a barrier of its own: an item writes it only
// after the hand-over's barrier, which every thread reaches after its reads of the item before
// (the merge uses `line_pairs`, as the item after it writes `pairs` with no barrier between).
template <typename T, int V>
__global__ void __launch_bounds__(ONLINE_THREADS, ONLINE_BLOCKS<T>) softmax_online(const T* x, T* y, void* work, long long rows, long long cols,
                               long long ldx, long long ldy, long long chunk, long long chunks,
                               long long per_group) {
    using C = compute_t<T>;
    __shared__ double pairs[2 * ONLINE_WARPS], line_pairs[2 * ONLINE_WARPS];
    __shared__ C stat[2];
    __shared__ Handed slots[2];
    unsigned turn = 0;
    const Schedule plan{rows, chunks, per_group, (rows + per_group - 1) / per_group};
    const Workspace ws(work, rows, 1);
    if (blockDim.x != ONLINE_THREADS) __trap();  // walk_run steps by ONLINE_THREADS packs
    for (Handed h = hand_over(Handed{prefetch_ticket(ws.ticket), -1}, slots, turn);;) {
        if (h.merge_row >= 0) {
            const long long r = h.merge_row;
            online_merge<C>(ws.part + 2 * r * chunks, chunks, ws.stats + 2 * r, ws.count + r, line_pairs);
        }
        if (h.ticket >= plan.tickets()) break;
        const unsigned long long next = prefetch_ticket(ws.ticket);
        long long row, c, merge_row = -1;
        bool write;
        if (plan.item(h.ticket, row, c, write)) {
            const long long begin = c * chunk;
            const int n = int(min(cols - begin, chunk));
            if (write)
                online_write<T, V, C>(x + row * ldx + begin, y + row * ldy + begin, n, chunks,
                                      ws.stats + 2 * row, ws.count + row, stat);
            else if (online_read<T, V, C>(x + row * ldx + begin, n, chunks,
                                          ws.part + 2 * (row * chunks + c), ws.count + row, pairs))
                merge_row = row;
        }
        h = hand_over(Handed{next, merge_row}, slots, turn);
    }
}

}  // namespace csm
