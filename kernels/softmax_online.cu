// Online softmax for rows too long to hold on chip, any length (64-bit offsets), in one launch.
//
//   kernel (after Ld, Ep)  holds on chip                 passes over memory          used for
//   online<T, V>           a running (m, d) a thread     2 reads (the second from L2  rows past the
//                          (float32: a chunk a block)    where it stays), 1 write     cluster kernels
//
// Each row is a line of the two-pass schedule in common.cuh, cut into `chunks` chunks of `chunk`
// elements (chunk a multiple of V):
//
//   read item   reads its chunk once, writes the chunk's (m, d) to the workspace and counts
//               it (without waiting for the count).
//   merge       the block whose read item counted a row's last chunk merges the row's pairs
//               (a fixed order: the same bits whichever block it is) into the row's (m, d)
//               and publishes its max and its constant in one word (publish_norm).
//   write item  waits for that word, reads its chunk again (from L2 when the row's group still is
//               there) and writes Ep's outputs (softmax: exp(x - m) / d).
//   holding     a read item whose block holds no chunk keeps the chunk's first `held` elements
//               (a multiple of the walk's step) in the block's shared memory as well; the block
//               writes them itself, from there, after its next write item of that group or a later
//               one (or at its end), and the chunk's write item reads and writes only the rest.
//
// An item has two barriers: the ticket's hand-over and one inside the item (a merge one more);
// block merges with more barriers, or each write item merging its row on one warp, ran slower
// [kernels-8].
//
// DRAM traffic: 1 read + 1 write per element where a group's chunks stay in L2 between the two
// passes (rows of a few MB at most) or are held, 2 reads + 1 write otherwise. The chunk length
// depends on the row length and the vector width only, never on the number of rows, the grouping
// or what is held, so for the same vector width a row's bits do not depend on the batch it came
// in. Padding past the row end loads as -inf and is never stored.
#include "common.cuh"
#include "ops.cuh"

#if !defined(CSM_ONLINE_THREADS) || !defined(CSM_ONLINE_BLOCKS_2) || !defined(CSM_ONLINE_BLOCKS_4) || \
    !defined(CSM_ONLINE_BLOCKS_8) || !defined(CSM_ONLINE_HOLDS_2) || !defined(CSM_ONLINE_HOLDS_4) ||  \
    !defined(CSM_ONLINE_HOLDS_8)
#error "softmax_online.cu needs -DCSM_ONLINE_THREADS, -DCSM_ONLINE_BLOCKS_{2,4,8} and -DCSM_ONLINE_HOLDS_{2,4,8} from the loader"
#endif

namespace csm {

// Blocks of ONLINE_THREADS threads, ONLINE_BLOCKS<T> resident per SM (by sizeof(T)); chunks
// held by the types of ONLINE_HOLDS<T>: values and evidence with the planner's ONLINE_*.
[[maybe_unused]] constexpr int ONLINE_THREADS = CSM_ONLINE_THREADS;
template <typename T>
constexpr int ONLINE_BLOCKS = sizeof(T) == 2 ? CSM_ONLINE_BLOCKS_2 : sizeof(T) == 4 ? CSM_ONLINE_BLOCKS_4 : CSM_ONLINE_BLOCKS_8;
template <typename T>
constexpr bool ONLINE_HOLDS = sizeof(T) == 2 ? CSM_ONLINE_HOLDS_2 : sizeof(T) == 4 ? CSM_ONLINE_HOLDS_4 : CSM_ONLINE_HOLDS_8;
// L2 priorities of a chunk's first read, its second read, the output: evict-last first reads,
// evict-first second reads and stores, best of the combinations tried [kernels-9].
[[maybe_unused]] constexpr L2 ONLINE_FIRST_READ = L2::last, ONLINE_SECOND_READ = L2::first, ONLINE_STORE = L2::first;

[[maybe_unused]] constexpr int ONLINE_WARPS = ONLINE_THREADS / 32;
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
// when that made the row's chunks all counted (its block then merges the row). The first `keep`
// elements (a multiple of the walk's step, so each thread walks the same packs in the same
// order as with none kept) also go to `held` in shared memory, each pack by the thread that
// writes it out later; they are loaded evict-first, as they are not read again. `kept`: keep,
// for the chunk's write item.
template <class Ld, class Ep, typename T, int V, typename C>
__device__ inline bool online_read(const Ld& ld, const T* xc, int n, int keep, T* held, long long chunks,
                                   double* chunk_part, unsigned* kept, unsigned* row_count,
                                   double* pairs) {
    MD<C> s = MD<C>::identity();
    if constexpr (ONLINE_HOLDS<T>)
        walk_run<Plain, ONLINE_THREADS, T, V, L2::first>(Plain(), xc, keep, [&](int c, C(&v)[V], bool) {
            if (c < keep) store_pack<T, V>(held + c, pack_out<T, V>(v));  // x's bits
            ld.load(v);
            s.template push_pack<Ep>(v);  // the last batch's packs past keep are -inf: nothing added
        });
    else
        keep = 0;
    walk_run<Ld, ONLINE_THREADS, T, V, ONLINE_FIRST_READ>(ld, xc + keep, n - keep, [&](int, C(&v)[V], bool) { s.template push_pack<Ep>(v); });
    s = online_block_md(s, pairs);
    if (threadIdx.x != 0) return false;
    if constexpr (ONLINE_HOLDS<T>) *kept = unsigned(keep);  // before the count, as the pair
    return publish_md(chunk_part, s, row_count) == unsigned(chunks - 1);
}

// A merged row's max and constant (softmax: 1/d), the write items' release: one 8-byte word of
// the row's statistics (zeroed before the launch, see the plan's workspace()) that a waiter
// polls and reads in the same load. Float compute types pack both; the constant's bits are
// never 0 (ops.cuh: 1/d is not, d being at least 1, 0 or NaN; log_softmax's zero is -0.0), so a
// zero word is a row not yet merged. Double stores m beside the word first, and the word is the constant (never 0 either).
template <typename C> __device__ inline void publish_norm(double* p, C m, C scale) {
    unsigned long long w;
    if constexpr (sizeof(C) == 4) {
        w = (unsigned long long)__float_as_uint(scale) << 32 | __float_as_uint(m);
    } else {
        __stcg(p + 1, m);
        w = (unsigned long long)__double_as_longlong(scale);
    }
    asm volatile("st.release.gpu.u64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}
template <typename C> __device__ inline void wait_norm(const double* p, C& m, C& scale) {
    unsigned long long w;
    while (!(w = load_acquire(reinterpret_cast<const unsigned long long*>(p)))) __nanosleep(100);
    if constexpr (sizeof(C) == 4) {
        m = __uint_as_float(unsigned(w));
        scale = __uint_as_float(unsigned(w >> 32));
    } else {
        m = __ldcg(p + 1);
        scale = __longlong_as_double((long long)w);
    }
}

// The row's (m, d) from its chunks' pairs (strided over the threads, then online_block_md: a
// fixed order), published as its max and Ep's constant (publish_norm). `pairs`: shared memory
// that no other item touches before the next hand-over.
template <class Ep, typename C>
__device__ inline void online_merge(const double* row_part, long long chunks, double* row_stats, double* pairs) {
    __threadfence();  // every other block's pairs are seen after the count that ended them
    const MD<C> s = online_block_md(strided_pairs<C>(row_part, chunks, ONLINE_THREADS), pairs);
    if (threadIdx.x == 0) publish_norm(row_stats, s.m, Ep::constant(s.m, s.d));
}

// What a write needs of its row: max, constant, and the elements of the chunk its reader held.
template <typename C> struct Norm {
    C m, scale;
    int skip;
};

// Thread 0 waits for the row's merge and hands its Norm over through `slot` (one barrier), the
// constant as Ep::shifted_writes makes it, as the writes' exps are shifted where m passes
// shift_ok; `kept`: the chunk's held elements (none where null), written before the count that
// the merge followed.
template <class Ep, typename C>
__device__ inline Norm<C> row_norm(const double* row_stats, const unsigned* kept, Norm<C>* slot) {
    if (threadIdx.x == 0) {
        Norm<C> r{};
        wait_norm(row_stats, r.m, r.scale);
        r.scale = Ep::shifted_writes(r.m, r.scale);
        r.skip = kept ? int(*kept) : 0;
        *slot = r;
    }
    __syncthreads();
    return *slot;
}

// A write item, once its row is merged: Ep's outputs for the chunk's elements past those its
// reader held (`kept`, as row_norm takes it).
template <class Ld, class Ep, typename T, int V, typename C>
__device__ inline void online_write(const Ld& ld, const T* xc, T* yc, int n, const double* row_stats, const unsigned* kept,
                                    Norm<C>* slot) {
    constexpr int TH = ONLINE_THREADS;
    const Norm<C> r = row_norm<Ep, C>(row_stats, kept, slot);
    const int skip = ONLINE_HOLDS<T> ? r.skip : 0;
    with_shift(Ep::SHIFTS && shift_ok(r.m), [&](auto sh) {
        write_run<Ld, Ep, decltype(sh)::value, TH, T, V, ONLINE_SECOND_READ, ONLINE_STORE>(
            ld, xc + skip, yc + skip, n - skip, r.m, r.scale);
    });
}

// The held elements written out: each thread its own packs (those it put there), loaded as
// write_run loads and computes and stores them, so the same bits.
template <class Ld, class Ep, typename T, int V, typename C>
__device__ inline void online_write_held(const Ld& ld, const T* held, T* yc, int keep, const Norm<C>& r) {
    with_shift(Ep::SHIFTS && shift_ok(r.m), [&](auto sh) {
        const C s = shift_of(r.m);
        const unsigned long long pol = l2_policy<ONLINE_STORE>();
        for (int c = int(threadIdx.x) * V; c < keep; c += ONLINE_THREADS * V) {
            C v[V];
            unpack(load_pack<T, V>(held + c), v);
            ld.load(v);
            finish<Ep, decltype(sh)::value>(v, r.m, s, r.scale);
            store_run_pack<T, V, ONLINE_STORE>(yc, c, keep, v, true, pol);
        }
    });
}

// What thread 0 hands over: the next ticket, and the row whose chunks its last read item
// completed (-1 for none), which the block merges before that ticket's item. No item waits
// between a row's completion and its merge, so every write item's wait ends.
struct Handed {
    unsigned long long ticket;
    long long merge_row;
};

// The chunk a block holds (row -1: none): its row, its first element's offset in the row, and
// the elements held.
struct Held {
    long long row = -1, begin = 0;
    int keep = 0;
};

__device__ inline unsigned dynamic_smem_bytes() {
    unsigned v;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
    return v;
}

// Shared memory is reused from item to item without a barrier of its own: an item writes it only
// after the hand-over's barrier, which every thread reaches after its reads of the item before
// (the merge uses `line_pairs`, as the item after it writes `pairs` with no barrier between; the
// held chunk's write uses norms[0], the write item norms[1]); each thread reads from the held
// elements only the packs it put there.
//
// `held` elements of a chunk (a multiple of ONLINE_THREADS * V, at most the dynamic shared
// memory) are held where the block holds none. The workspace (Workspace, width 1) has after the
// partials, per chunk, the elements its reader held.
template <class Ld, class Ep, typename T, int V>
__global__ void __launch_bounds__(ONLINE_THREADS, ONLINE_BLOCKS<T>)
    online(const T* x, T* y, void* work, long long rows, long long cols, long long ldx, long long ldy,
           long long chunk, long long chunks, long long per_group, long long held, const Ld ld) {
    using C = compute_t<T>;
    extern __shared__ __align__(16) unsigned char dynamic_smem[];
    T* const held_elems = reinterpret_cast<T*>(dynamic_smem);
    __shared__ double pairs[2 * ONLINE_WARPS], line_pairs[2 * ONLINE_WARPS];
    __shared__ Norm<C> norms[2];
    __shared__ Handed slots[2];
    unsigned turn = 0;
    const Schedule plan{rows, chunks, per_group, (rows + per_group - 1) / per_group};
    const Workspace ws(work, rows, 1);
    unsigned* const kept = reinterpret_cast<unsigned*>(ws.part + 2 * rows * chunks);
    // walk_run steps by ONLINE_THREADS packs; held packs are whole steps of it and fit
    if (blockDim.x != ONLINE_THREADS ||
        (ONLINE_HOLDS<T> && (held % (ONLINE_THREADS * V) || held * (long long)sizeof(T) > dynamic_smem_bytes())))
        __trap();
    Held hold;
    // The held chunk's write: its row is merged or will be (every read item of its group was
    // handed out, and read items never wait).
    auto write_held = [&]() {
        const Norm<C> r = row_norm<Ep, C>(ws.stats + 2 * hold.row, nullptr, &norms[0]);
        online_write_held<Ld, Ep, T, V, C>(ld, held_elems, y + hold.row * ldy + hold.begin, hold.keep, r);
        hold.row = -1;
    };
    for (Handed h = hand_over(Handed{prefetch_ticket(ws.ticket), -1}, slots, turn);;) {
        if (h.merge_row >= 0) {
            const long long r = h.merge_row;
            online_merge<Ep, C>(ws.part + 2 * r * chunks, chunks, ws.stats + 2 * r, line_pairs);
        }
        if (h.ticket >= plan.tickets()) break;
        const unsigned long long next = prefetch_ticket(ws.ticket);
        long long row, c, merge_row = -1;
        bool write;
        if (plan.item(h.ticket, row, c, write)) {
            const long long begin = c * chunk;
            const int n = int(min(cols - begin, chunk));
            if (write) {
                online_write<Ld, Ep, T, V, C>(ld, x + row * ldx + begin, y + row * ldy + begin, n, ws.stats + 2 * row,
                                      ONLINE_HOLDS<T> ? kept + row * chunks + c : nullptr, &norms[1]);
                // After the item, not before: its second read then comes while the chunk is likelier
                // still in L2, ahead of the held elements' stores [kernels-10]. A write item of group g
                // is handed out after every read item of groups <= g + 1, so the held row is merged
                // or will be.
                if (hold.row >= 0 && hold.row / per_group <= row / per_group) write_held();
            } else {
                int keep = 0;
                if (ONLINE_HOLDS<T> && hold.row < 0) {
                    keep = int(min((long long)n, held) / (ONLINE_THREADS * V) * (ONLINE_THREADS * V));
                    if (keep > 0) hold = Held{row, begin, keep};
                }
                if (online_read<Ld, Ep, T, V, C>(ld, x + row * ldx + begin, n, keep, held_elems, chunks,
                                         ws.part + 2 * (row * chunks + c), kept + row * chunks + c,
                                         ws.count + row, pairs))
                    merge_row = row;
            }
        }
        h = hand_over(Handed{next, merge_row}, slots, turn);
    }
    if (hold.row >= 0) write_held();  // every read item was handed out
}

}  // namespace csm
