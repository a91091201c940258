// Softmax and top-k in one read: each row's k largest entries in the order of
// argsort(-x, kind="stable") (ties to the lower position, NaN after every number), with the
// values Ep gives them (Softmax or LogSoftmax, ops.cuh) from the row's (m, d).
//
//   kernel (after Ld, Ep)      a row by                                  k
//   topk_lanes<T, W, P, K>     W lanes of a warp holding P elements      K <= 32 at most
//                              each (rows of at most W * P); k rounds
//                              of the group's least key
//   topk_block<T, V, K>        blocks streaming chunks of it: each warp  K <= TOPK_THREADS
//                              keeps its K least keys, the block merges  at most
//                              its warps' lists, the last block of a
//                              row the chunks' (through the workspace)
//
// An element's key is its order key (order_key) above its position: a 64-bit integer whose
// ascending order is the output order. Keys are unique, so a merge of sorted lists is a count of
// smaller keys for each entry. Row r's outputs: k values at vals[r * k], their positions (int64)
// at idx[r * k]. With `renorm` the values are Ep's of the k chosen among themselves (their own
// (m, d)), and NaN for a row holding NaN (the row's d is NaN).
// Computed in float (half types and float32); float64 is not fused (cusoftmax/_topk.py).
#include "common.cuh"
#include "ops.cuh"

#if !defined(CSM_TOPK_THREADS) || !defined(CSM_TOPK_BLOCKS) || !defined(CSM_TOPK_BATCH)
#error "topk.cu needs -DCSM_TOPK_THREADS, -DCSM_TOPK_BLOCKS and -DCSM_TOPK_BATCH from the loader"
#endif

namespace csm {

[[maybe_unused]] constexpr int TOPK_THREADS = CSM_TOPK_THREADS;  // threads a block of either kernel
[[maybe_unused]] constexpr int TOPK_BLOCKS = CSM_TOPK_BLOCKS;  // topk_block's launch bound: blocks an SM
[[maybe_unused]] constexpr int TOPK_BATCH = CSM_TOPK_BATCH;  // elements a thread of topk_block loads before it uses any
[[maybe_unused]] constexpr int TOPK_WARPS = TOPK_THREADS / 32;
[[maybe_unused]] constexpr int TOPK_CAP = 128;  // candidates a warp holds (4 a lane): merged at k, at most CAP - 32
static_assert(TOPK_THREADS % 32 == 0 && TOPK_THREADS <= 1024 && TOPK_WARPS >= 2 &&
                  (TOPK_WARPS & (TOPK_WARPS - 1)) == 0,
              "whole warps, a power of two of them, at least 2 (the final merge takes 1 + 1 lists)");

using Key = unsigned long long;
[[maybe_unused]] constexpr Key NO_KEY = ~0ull;  // after every element's key
[[maybe_unused]] constexpr unsigned NAN_KEY = 0xff800001u;  // the order key of NaN: next after -inf's

// Ascending as the values descend: a non-negative value's bits with all but the sign flipped,
// a negative value's bits as they are (so -inf's, 0xff800000, is the largest of any number);
// -0.0 as +0.0 (they tie), every NaN NAN_KEY.
__device__ inline unsigned order_key(float v) {
    const unsigned b = __float_as_uint(v + 0.0f);
    return v != v ? NAN_KEY : (b >> 31 ? b : b ^ 0x7fffffffu);
}
// The value of an order key; NaN for keys past -inf's.
__device__ inline float key_value(unsigned k) {
    return k > 0xff800000u ? __uint_as_float(0x7fc00000u) : __uint_as_float(k >> 31 ? k : k ^ 0x7fffffffu);
}
__device__ inline Key key_of(float v, unsigned pos) { return Key(order_key(v)) << 32 | pos; }
__device__ inline float value_of(Key k) { return key_value(unsigned(k >> 32)); }

// The least key over aligned groups of `width` lanes, every lane getting its group's.
__device__ inline Key group_min(Key v, int width) {
    for (int o = width / 2; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Ep's output of a chosen key at vals[at], its position at idx[at]; `st`: the state the value is
// taken against (the row's, or with renorm the chosen keys' own, from renormed).
template <class Ep, typename T> __device__ inline void put_chosen(T* vals, long long* idx, long long at,
                                                                  Key key, MD<float> st) {
    const float v = value_of(key);
    const float k = Ep::constant(st.m, st.d);
    bits(vals)[at] = Traits<T>::out(Ep::template apply<false>(v, st.m, st.m, k));
    idx[at] = (long long)unsigned(key);
}
// The chosen keys' own state, its max NaN where the row's d is NaN (a row holding NaN; for
// Softmax also one holding +inf, whose chosen keys hold it and come out NaN either way).
__device__ inline MD<float> renormed(MD<float> own, const MD<float>& row) {
    if (row.d != row.d) own.m = __uint_as_float(0x7fc00000u);
    return own;
}

// Rows of at most W * P elements (row r at x + r * ldx), each held by an aligned group of W lanes,
// element c at lane c % W; K >= k rounds, each taking the group's least key left, whose lane
// then drops it. A group's rows: first + group for first = its warp's, then a stride on; rows
// past the end run as the last row (the shuffles stay converged) and are not written.
template <class Ld, class Ep, typename T, int W, int P, int K>
__global__ void __launch_bounds__(TOPK_THREADS)
    topk_lanes(const T* x, T* vals, long long* idx, long long rows, int n, long long ldx, int k, int renorm,
               const Ld ld) {
    using C = compute_t<T>;
    static_assert(sizeof(C) == 4, "float types");
    constexpr int G = 32 / W, S = (K + W - 1) / W;  // groups a warp, chosen keys a lane
    const int sub = threadIdx.x & (W - 1), group = (threadIdx.x & 31) / W;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const long long stride = (long long)gridDim.x * blockDim.x / 32 * G;
    for (long long first = warp * G; first < rows; first += stride) {
        const long long row = min(first + group, rows - 1);
        C v[P];
#pragma unroll
        for (int p = 0; p < P; ++p) {
            C u[1];
            unpack_word<T, 1>(load_row_word<T, 1>(x + row * ldx, p * W + sub, n, neg_inf<C>()), u);
            v[p] = u[0];
        }
        ld.load(v);
        MD<C> st = MD<C>::identity();
        st.template push_pack<Ep>(v);
        st = group_merge(st, W);
        unsigned key[P];
#pragma unroll
        for (int p = 0; p < P; ++p) key[p] = p * W + sub < n ? order_key(v[p]) : ~0u;
        Key mine[S];
#pragma unroll
        for (int r = 0; r < K; ++r) {
            if (r >= k) break;
            Key b = NO_KEY;
#pragma unroll
            for (int p = 0; p < P; ++p) b = min(b, Key(key[p]) << 32 | unsigned(p * W + sub));
            b = group_min(b, W);
#pragma unroll
            for (int p = 0; p < P; ++p)
                if (unsigned(p * W + sub) == unsigned(b)) key[p] = ~0u;  // taken: after every element
            if (r % W == sub) mine[r / W] = b;
        }
        if (renorm) {
            C own[S];
#pragma unroll
            for (int s = 0; s < S; ++s) own[s] = s * W + sub < k ? value_of(mine[s]) : neg_inf<C>();
            MD<C> o = MD<C>::identity();
            o.template push_pack<Ep>(own);
            st = renormed(group_merge(o, W), st);
        }
        if (first + group >= rows) continue;
#pragma unroll
        for (int s = 0; s < S; ++s)
            if (s * W + sub < k) put_chosen<Ep>(vals, idx, row * k + s * W + sub, mine[s], st);
    }
}

// Shared memory of topk_block: two sides of every warp's list of its K least keys so far
// (ascending, NO_KEY past them; a merge reads one side and writes the other) and its
// candidates; the block's bound (block_bound), and each warp's share: a key with
// ceil(k / TOPK_WARPS) of the chunk's elements at or before it (its list's, or seed_bounds'),
// so that the largest share has k: no element after the bound can be chosen.
template <int K> struct TopkShared {
    Key lists[2][TOPK_WARPS * K];
    Key cand[TOPK_WARPS][TOPK_CAP];
    Key bound;
    Key share[TOPK_WARPS];
    acc_t red[32];
    int flag;
};

// The number of keys of the sorted list a[0, K) below e (UPPER: at most e).
template <int K, bool UPPER = false> __device__ inline int rank_in(const Key* a, Key e) {
    int lo = 0;
#pragma unroll
    for (int step = K / 2; step > 0; step /= 2)
        if (UPPER ? a[lo + step - 1] <= e : a[lo + step - 1] < e) lo += step;
    return lo + (UPPER ? a[lo] <= e : a[lo] < e);
}

// The keys e[0, R) of every lane sorted ascending over i = b * 32 + lane (a bitonic network:
// pairs i, i ^ stride exchanged in lanes by shuffles, in a lane's registers from stride 32).
template <int R> __device__ inline void warp_sort(Key (&e)[TOPK_CAP / 32]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int size = 2; size <= 32 * R; size <<= 1) {
#pragma unroll
        for (int stride = size / 2; stride > 0; stride >>= 1) {
#pragma unroll
            for (int b = 0; b < R; ++b) {
                const bool up = ((b * 32 + lane) & size) == 0;  // this run of size ascends
                if (stride >= 32) {
                    const int b2 = b ^ (stride / 32);
                    if (b < b2) {
                        const Key lo = min(e[b], e[b2]), hi = max(e[b], e[b2]);
                        e[b] = up ? lo : hi;
                        e[b2] = up ? hi : lo;
                    }
                } else {
                    const Key other = __shfl_xor_sync(0xffffffffu, e[b], stride);
                    e[b] = ((lane & stride) == 0) == up ? min(e[b], other) : max(e[b], other);
                }
            }
        }
    }
}

// warp_merge with the candidates in R keys a lane (cnt <= 32 * R): sorted, written back to
// cand (NO_KEY after the cnt keys), then each entry placed at its own index in its list plus its
// count of smaller keys in the other list.
template <int K, int R> __device__ inline void merge_sorted(const Key* src, Key* dst, Key* cand, int cnt) {
    const int lane = threadIdx.x & 31;
    Key e[TOPK_CAP / 32];
#pragma unroll
    for (int b = 0; b < R; ++b) e[b] = b * 32 + lane < cnt ? cand[b * 32 + lane] : NO_KEY;
    warp_sort<R>(e);
    __syncwarp();  // every lane's reads of cand done
#pragma unroll
    for (int b = 0; b < R; ++b) cand[b * 32 + lane] = e[b];
    __syncwarp();
#pragma unroll
    for (int a = 0; a < K / 32; ++a) {
        const Key key = src[lane + 32 * a];
        const int r = lane + 32 * a + rank_in<32 * R>(cand, key);
        if (r < K) dst[r] = key;
    }
#pragma unroll
    for (int b = 0; b < R; ++b) {
        const int r = b * 32 + lane + rank_in<K>(src, e[b]);
        if (b * 32 + lane < cnt && r < K) dst[r] = e[b];
    }
}

// A warp's list src and its candidates cand[0, cnt) (unique keys; cand is left sorted) merged
// into dst: each entry goes to the place of its count of smaller keys in both (src's NO_KEY
// padding after every key, in its own order); those past K are dropped. Out of line (rare): its
// registers are its own.
template <int K> __device__ __noinline__ void warp_merge(const Key* src, Key* dst, Key* cand, int cnt) {
    __syncwarp();  // every lane's appends seen
    if (cnt <= 32)
        merge_sorted<K, 1>(src, dst, cand, cnt);
    else if (cnt <= 64)
        merge_sorted<K, 2>(src, dst, cand, cnt);
    else
        merge_sorted<K, TOPK_CAP / 32>(src, dst, cand, cnt);
    __syncwarp();
}

// The L sorted lists of K at src (back to back; L a power of two) merged by the block, in rounds
// that merge lists 2p and 2p + 1 into list p of the other buffer; returns the buffer whose first
// K keys are the merged list. The caller's barrier before; one after each round.
template <int K> __device__ inline Key* merge_lists(Key* src, Key* dst, int L) {
    for (; L > 1; L /= 2) {
        for (int i = threadIdx.x; i < L * K; i += TOPK_THREADS) {
            const int p = i / (2 * K), at = i % (2 * K);
            const Key* a = src + 2 * p * K;
            const Key e = a[at];  // list 2p, then list 2p + 1 after it
            const int r = at < K ? at + rank_in<K>(a + K, e) : at - K + rank_in<K, true>(a, e);
            if (r < K) dst[p * K + r] = e;
        }
        __syncthreads();
        Key* t = src;
        src = dst;
        dst = t;
    }
    return src;
}

// The block's bound, sh.bound: the least of every k-th key a warp has had and of every largest
// share seen when a share fell (keys only fall, so any value read is a bound). One load where
// the streaming loop reads it; the warp whose share fell takes the shares' max.
template <int K> __device__ inline Key block_bound(const TopkShared<K>& sh) {
    return *static_cast<const volatile Key*>(&sh.bound);
}
template <int K> __device__ inline Key largest_share(const TopkShared<K>& sh) {
    const volatile Key* share = sh.share;
    Key m = share[0];
#pragma unroll
    for (int w = 1; w < TOPK_WARPS; ++w) m = max(m, share[w]);
    return m;
}
// A warp's new share and k-th key (own; NO_KEY for none) into sh, by one lane.
template <int K> __device__ inline void publish(TopkShared<K>& sh, int warp, Key share, Key own) {
    atomicMin(&sh.share[warp], share);
    __threadfence_block();  // the share before the reads of every share
    atomicMin(&sh.bound, min(own, largest_share(sh)));
}

// Bounds from an item's first batch, before any list holds a key. A lane's batch max bm, where
// above -inf, is a value of the chunk's, and (bm, the last position) a key at or after that
// element's; so a warp's r-th least of its lanes' keys has r of the chunk's elements at or
// before it: r = ceil(k / TOPK_WARPS) for its share, r = k (k <= 32) for a bound of its own.
template <int K> __device__ __noinline__ void seed_bounds(float bm, int k, TopkShared<K>& sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const Key mine = bm > neg_inf<float>() ? Key(order_key(bm)) << 32 | 0xffffffffu : NO_KEY;
    int below = 0;  // lanes whose key comes first, ties to the lower lane: ranks 0 to 31
    for (int o = 1; o < 32; ++o) {
        const int other = (lane + o) & 31;
        const Key e = __shfl_sync(0xffffffffu, mine, other);
        below += e < mine || (e == mine && other < lane);
    }
    const int r = (k + TOPK_WARPS - 1) / TOPK_WARPS;
    const Key share = __shfl_sync(0xffffffffu, mine, __ffs(__ballot_sync(0xffffffffu, below == r - 1)) - 1);
    const Key own = k <= 32 ? __shfl_sync(0xffffffffu, mine, __ffs(__ballot_sync(0xffffffffu, below == k - 1)) - 1)
                            : NO_KEY;
    if (lane == 0) publish(sh, warp, share, own);
    __syncwarp();
}

// A warp's gathering: the bound key thr (the least k-th key it knows) and its value tv, its
// candidates' count, its list's side; the same on every lane but thr and tv (a lane may have
// read a newer block bound: either is a bound).
struct Gather {
    Key thr;
    float tv;
    int cnt, side;
    __device__ void tighten(Key bound) {  // thr the lesser of thr and bound, tv its value
        if (bound < thr) {
            thr = bound;
            tv = value_of(bound);
        }
    }
};
template <int V> struct Values { float v[V]; };

// A pack that may hold passing elements (some lane's max met the bound), at position c of the
// chunk at `begin`: the exact key test of each element, passing keys appended in lane order,
// and a merge of the candidates into the warp's list once `trigger` are held (the bound then
// rises: it moves only at merges), its new k-th key and share published in sh. Out of line:
// the streaming loop keeps its registers.
template <int K, int V>
__device__ __noinline__ Gather offer(Gather g, Values<V> u, int c, int len, int begin, int k, int trigger,
                                    TopkShared<K>& sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    Key* cand = sh.cand[warp];
#pragma unroll
    for (int j = 0; j < V; ++j) {
        const Key key = key_of(u.v[j], unsigned(begin + c + j));
        const bool in = c + j < len && key < g.thr;
        const unsigned mask = __ballot_sync(0xffffffffu, in);
        if (in) cand[g.cnt + __popc(mask & ((1u << lane) - 1))] = key;
        g.cnt += __popc(mask);
        if (g.cnt >= trigger) {
            warp_merge<K>(sh.lists[g.side] + warp * K, sh.lists[g.side ^ 1] + warp * K, cand, g.cnt);
            g.side ^= 1;
            g.cnt = 0;
            const Key* list = sh.lists[g.side] + warp * K;
            g.thr = list[k - 1];
            if (lane == 0) publish(sh, warp, list[(k + TOPK_WARPS - 1) / TOPK_WARPS - 1], g.thr);
            __syncwarp();
            g.thr = min(g.thr, block_bound(sh));
            g.tv = value_of(g.thr);
        }
    }
    return g;
}

// The workspace of rows cut in chunks (zeroed head): a count of chunks done per row, then each
// (row, chunk)'s K keys and its (m, d) as two doubles.
struct TopkWork {
    unsigned* count;
    Key* keys;
    double* md;
    __device__ TopkWork(void* base, long long rows, long long chunks, int K) {
        count = static_cast<unsigned*>(base);
        keys = reinterpret_cast<Key*>(static_cast<char*>(base) + (4 * rows + 7) / 8 * 8);
        md = reinterpret_cast<double*>(keys + rows * chunks * K);
    }
};

// Rows in chunks of `chunk` (a multiple of V), blocks taking (row, chunk) items t, t + gridDim.x.
// Each batch's max meets the value tv of the warp's bound (one vote a batch), then each pack's;
// where a lane's passes, its elements take the exact key test (offer). A row of one chunk is
// written by its block; else each block publishes its list and (m, d), and the block counting a
// row's last chunk merges the row (TOPK_WARPS - 1 lists at a time; the states in chunk order).
template <class Ld, class Ep, typename T, int V, int K>
__global__ void __launch_bounds__(TOPK_THREADS, TOPK_BLOCKS)
    topk_block(const T* x, T* vals, long long* idx, void* work, long long rows, int n, long long ldx,
               int k, int renorm, int chunk, int chunks, const Ld ld) {
    using C = compute_t<T>;
    static_assert(sizeof(C) == 4 && K <= TOPK_THREADS && K % 32 == 0 && (K & (K - 1)) == 0,
                  "float types; a key a thread; a power of two (rank_in)");
    // A batch: TOPK_BATCH elements in packs of V, at most 4 packs (element loads, V = 1, 4 a batch).
    constexpr int STEP = TOPK_THREADS * V, BATCH = TOPK_BATCH / V < 4 ? TOPK_BATCH / V : 4;
    __shared__ TopkShared<K> sh;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // Candidates merged once k are held (at most TOPK_CAP - 32): the bound then follows the
    // k-th key closely, and few elements pass it.
    const int trigger = min(k, TOPK_CAP - 32);
    const TopkWork ws(work, rows, chunks, K);
    for (long long t = blockIdx.x; t < rows * chunks; t += gridDim.x) {
        const long long row = t / chunks;
        const int part = int(t % chunks), begin = part * chunk, len = min(chunk, n - begin);
        const T* xr = x + row * ldx + begin;
        for (int p = lane; p < K; p += 32) sh.lists[0][warp * K + p] = NO_KEY;
        if (lane == 0) sh.share[warp] = NO_KEY;
        if (threadIdx.x == 0) sh.bound = NO_KEY;
        __syncthreads();
        Gather g{NO_KEY, key_value(~0u), 0, 0};  // tv NaN: every value passes
        MD<C> st = MD<C>::identity();
        const int c0 = (warp * 32 + lane) * V;  // then steps of TOPK_THREADS * V: a warp's lanes alike
        word_t<T, V> w[BATCH], next[BATCH];
#pragma unroll
        for (int b = 0; b < BATCH; ++b) w[b] = load_row_word<T, V>(xr, c0 + b * STEP, len, neg_inf<C>());
        for (int base = warp * 32 * V; base < len; base += BATCH * STEP) {
#pragma unroll
            for (int b = 0; b < BATCH; ++b)
                next[b] = load_row_word<T, V>(xr, c0 + (BATCH + b) * STEP + base - warp * 32 * V, len, neg_inf<C>());
            g.tighten(block_bound(sh));
            // The batch's values (-inf past the chunk: no term, no max, no offer), pushed at
            // once (one rescale check a batch), and its max against the bound first.
            C u[BATCH * V];
#pragma unroll
            for (int b = 0; b < BATCH; ++b) {
                C p[V];
                unpack_word<T, V>(w[b], p);
                ld.load(p);
#pragma unroll
                for (int j = 0; j < V; ++j) u[b * V + j] = p[j];
            }
            st.template push_pack<Ep>(u);
            C bm = u[0];
#pragma unroll
            for (int j = 1; j < BATCH * V; ++j) bm = fmax(bm, u[j]);  // NaN only if all are
            if (base == warp * 32 * V) {  // the item's first batch
                seed_bounds<K>(bm, k, sh);
                g.tighten(block_bound(sh));
            }
            if (__any_sync(0xffffffffu, !(bm < g.tv))) {
#pragma unroll
                for (int b = 0; b < BATCH; ++b) {
                    Values<V> vs;
                    C pm = u[b * V];
#pragma unroll
                    for (int j = 0; j < V; ++j) {
                        vs.v[j] = u[b * V + j];
                        pm = fmax(pm, vs.v[j]);
                    }
                    if (__any_sync(0xffffffffu, !(pm < g.tv)))
                        g = offer<K, V>(g, vs, base + b * STEP + lane * V, len, begin, k, trigger, sh);
                }
            }
#pragma unroll
            for (int b = 0; b < BATCH; ++b) w[b] = next[b];
        }
        if (g.cnt > 0) {
            warp_merge<K>(sh.lists[g.side] + warp * K, sh.lists[g.side ^ 1] + warp * K, sh.cand[warp], g.cnt);
            g.side ^= 1;
        }
        if (g.side == 1)  // every list on side 0 for the block's merge
            for (int p = lane; p < K; p += 32) sh.lists[0][warp * K + p] = sh.lists[1][warp * K + p];
        st = block_merge(st, sh.red);  // its barriers also make every warp's list seen
        Key* res = merge_lists<K>(sh.lists[0], sh.lists[1], TOPK_WARPS);
        if (chunks > 1) {
            Key* keys = ws.keys + (row * chunks + part) * K;
            for (int p = threadIdx.x; p < K; p += TOPK_THREADS) __stcg(keys + p, res[p]);
            if (threadIdx.x == 0) {
                __stcg(ws.md + 2 * (row * chunks + part), double(st.m));
                __stcg(ws.md + 2 * (row * chunks + part) + 1, st.d);
            }
            __threadfence();
            __syncthreads();
            if (!count_chunk(ws.count + row, chunks, &sh.flag)) continue;
            // The other chunks' lists, TOPK_WARPS - 1 at a time after the merged list so far.
            for (int q0 = 0; q0 < chunks; q0 += TOPK_WARPS - 1) {
                for (int i = threadIdx.x; i < (TOPK_WARPS - 1) * K; i += TOPK_THREADS) {
                    const int q = q0 + i / K;
                    const Key* theirs = ws.keys + (row * chunks + q) * K;
                    res[K + i] = q < chunks && q != part ? __ldcg(theirs + i % K) : NO_KEY;
                }
                __syncthreads();
                res = merge_lists<K>(res, res == sh.lists[0] ? sh.lists[1] : sh.lists[0], TOPK_WARPS);
            }
            st = MD<C>::identity();
            for (int q = threadIdx.x; q < chunks; q += TOPK_THREADS)
                st.merge(MD<C>{C(__ldcg(ws.md + 2 * (row * chunks + q))), __ldcg(ws.md + 2 * (row * chunks + q) + 1)});
            st = block_merge(st, sh.red);
        }
        const Key mine = threadIdx.x < k ? res[threadIdx.x] : NO_KEY;
        if (renorm) {
            MD<C> o = MD<C>::identity();
            const C own[1] = {threadIdx.x < k ? value_of(mine) : neg_inf<C>()};
            o.template push_pack<Ep>(own);
            st = renormed(block_merge(o, sh.red), st);
        }
        if (threadIdx.x < k) put_chosen<Ep>(vals, idx, row * k + threadIdx.x, mine, st);
        __syncthreads();  // the lists are set again for the next item
    }
}

}  // namespace csm
