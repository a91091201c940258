// The family over segments of rows (sorted ids or CSR offsets; rows of no segment left out), an
// op policy Op (SegmentForward<Ep>, SegmentBackward<V>) over ops.cuh; docs/design.md, "Segments".
//   segment_tiles  x and the keys read once; runs joined across a tile's threads by scans
//   segment_fold   segments that cross tiles: their parts folded in tile order (fixed: same bits)
//   segment_fixup  their rows read again and written from the total

#include "common.cuh"
#include "ops.cuh"

#if !defined(CSM_SEGMENT_THREADS) || !defined(CSM_SEGMENT_BLOCKS)
#error "segment.cu needs -DCSM_SEGMENT_THREADS and -DCSM_SEGMENT_BLOCKS from the loader"
#endif

namespace csm {

constexpr int SEGMENT_THREADS = CSM_SEGMENT_THREADS;  // threads a block of every launch here
constexpr long long PAD_KEY = 0x7fffffffffffffffLL;    // rows past the end: no segment


// The state's terms: log_softmax's and logsumexp's are taken against ref(m), 0 where m is +inf,
// so that +inf gives +inf (not NaN) as SciPy's.
template <class Ep> struct SegmentTerm { using type = Ep; static constexpr bool LSE = false; };
template <> struct SegmentTerm<LogSumExp> { using type = LogSoftmax; static constexpr bool LSE = true; };

// (m, d) of each column: max and sum of terms against it; identity (-inf, 0).
template <typename C, int COLS> struct SegmentState {
    C m[COLS], d[COLS];
    __device__ void clear() {
#pragma unroll
        for (int c = 0; c < COLS; ++c) {
            m[c] = neg_inf<C>();
            d[c] = C(0);
        }
    }
    // this (earlier rows) then o (later rows); exact where either is the identity
    __device__ void merge(const SegmentState& o) {
#pragma unroll
        for (int c = 0; c < COLS; ++c) {
            const C top = fmax(m[c], o.m[c]);
            d[c] = C(sum_at(m[c], d[c], top)) + C(sum_at(o.m[c], o.d[c], top));
            m[c] = top;
        }
    }
    template <class Ep> __device__ void push(int c, C x) {
        const C top = fmax(m[c], x);  // fmax ignores NaN: a NaN makes d NaN below
        if (top != m[c]) {
            d[c] = C(sum_at(m[c], d[c], top));
            m[c] = top;
        }
        d[c] += SegmentTerm<Ep>::type::term(x, top);
    }
    __device__ SegmentState up(int o) const {
        SegmentState s;
#pragma unroll
        for (int c = 0; c < COLS; ++c) {
            s.m[c] = __shfl_up_sync(0xffffffffu, m[c], o);
            s.d[c] = __shfl_up_sync(0xffffffffu, d[c], o);
        }
        return s;
    }
    __device__ SegmentState down(int o) const {
        SegmentState s;
#pragma unroll
        for (int c = 0; c < COLS; ++c) {
            s.m[c] = __shfl_down_sync(0xffffffffu, m[c], o);
            s.d[c] = __shfl_down_sync(0xffffffffu, d[c], o);
        }
        return s;
    }
};

// A plain sum a column (the backward passes' sum over a segment); identity 0.
template <typename C, int COLS> struct SegmentSum {
    C s[COLS];
    __device__ void clear() {
#pragma unroll
        for (int c = 0; c < COLS; ++c) s[c] = C(0);
    }
    __device__ void merge(const SegmentSum& o) {
#pragma unroll
        for (int c = 0; c < COLS; ++c) s[c] += o.s[c];
    }
    __device__ SegmentSum up(int o) const {
        SegmentSum r;
#pragma unroll
        for (int c = 0; c < COLS; ++c) r.s[c] = __shfl_up_sync(0xffffffffu, s[c], o);
        return r;
    }
    __device__ SegmentSum down(int o) const {
        SegmentSum r;
#pragma unroll
        for (int c = 0; c < COLS; ++c) r.s[c] = __shfl_down_sync(0xffffffffu, s[c], o);
        return r;
    }
};

// What a segment kernel computes, from one input (x) or two (y and dy): its state a segment,
// an element's term in it, an element's output from the segment's state, a row of no segment's.
// The forward ops: Ep of ops.cuh (Softmax, LogSoftmax; LogSumExp writes one value a segment).
template <class Ep> struct SegmentForward {
    static constexpr int INPUTS = 1;
    static constexpr bool LSE = SegmentTerm<Ep>::LSE;
    template <typename C, int COLS> using State = SegmentState<C, COLS>;
    template <typename C, int COLS> __device__ static void push(State<C, COLS>& s, int c, C x, C) {
        s.template push<Ep>(c, x);
    }
    template <typename C, int COLS> __device__ static C out(const State<C, COLS>& s, int c, C x, C);
    template <typename C> __device__ static C excluded() { return Ep::template masked<C>(); }
};
// The backward passes: V of ops.cuh (SoftmaxVjp, LogSoftmaxVjp), x the forward's y, g its dy.
template <class V> struct SegmentBackward {
    static constexpr int INPUTS = 2;
    static constexpr bool LSE = false;
    template <typename C, int COLS> using State = SegmentSum<C, COLS>;
    template <typename C, int COLS> __device__ static void push(State<C, COLS>& s, int c, C y, C g) {
        s.s[c] += V::term(y, g);
    }
    template <typename C, int COLS> __device__ static C out(const State<C, COLS>& s, int c, C y, C g) {
        return V::out(y, g, s.s[c]);
    }
    template <typename C> __device__ static C excluded() { return C(0); }
};

// The workspace: for each tile, meta[4] (first key, last key, open flags (1 head, 2 tail), the
// head segment's end row | the tail segment's first row << 32), then the states: the tile's
// part of its head and tail segments, their totals (segment_fold).
struct SegmentWork {
    long long* meta;
    unsigned char* states;
    template <class St> __device__ St* at(long long tile, int which) const {
        return reinterpret_cast<St*>(states) + 4 * tile + which;
    }
};
__device__ inline SegmentWork segment_work(unsigned char* work, long long tiles) {
    return {reinterpret_cast<long long*>(work), work + 32 * tiles};
}
enum { PART_HEAD = 0, PART_TAIL = 1, TOTAL_HEAD = 2, TOTAL_TAIL = 3 };

__device__ inline bool in_segment(long long key, long long nseg) { return key >= 0 && key < nseg; }

// The key of row r: ids[r], or upper_bound(offsets[0..nseg], r) - 1 (-1 before the first
// segment, nseg from offsets[nseg] on); PAD_KEY past the end.
template <typename I> __device__ inline long long key_at(const I* seg, int offsets, long long nseg, long long n, long long r) {
    if (r >= n) return PAD_KEY;
    if (!offsets) return (long long)seg[r];
    long long lo = 0, hi = nseg + 1;
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if ((long long)seg[mid] <= r) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

// Sorted ids of rows [row0, row0 + ROWS) in 16-byte loads, where they are whole and the rows'
// ids fill whole loads (seg 16-byte aligned); false where not (the caller loads them one by one).
template <typename I, int ROWS> __device__ inline bool load_ids(const I* seg, long long row0, long long n, long long (&key)[ROWS]) {
    constexpr int PER = 16 / int(sizeof(I));
    if constexpr (ROWS % PER == 0) {
        if (row0 + ROWS <= n) {
            const uint4* p = reinterpret_cast<const uint4*>(seg + row0);
#pragma unroll
            for (int i = 0; i < ROWS / PER; ++i) {
                const uint4 w = p[i];
                I v[PER];
                memcpy(v, &w, sizeof w);
#pragma unroll
                for (int j = 0; j < PER; ++j) key[i * PER + j] = (long long)v[j];
            }
            return true;
        }
    }
    return false;
}

// An element's output from its loaded value and its segment's state.
template <class Ep, typename C> __device__ inline C segment_out(C x, C m, C d) {
    const C k = Ep::constant(m, d);
    return Ep::template apply<false>(x, m, m, k);
}
template <class Ep> template <typename C, int COLS>
__device__ C SegmentForward<Ep>::out(const State<C, COLS>& s, int c, C x, C) {
    return segment_out<Ep>(x, s.m[c], s.d[c]);
}
// logsumexp of a state: m + log(d); -inf for a segment of only -inf (d = 0); +inf and NaN pass
// through d (a NaN beside only -inf leaves m at -inf, d NaN).
template <typename C> __device__ inline C segment_lse(C m, C d) {
    return m == neg_inf<C>() && d == C(0) ? m : m + log_sum(C(1), d - C(1));
}

template <typename T, int N> __device__ inline void load_elements(const T* p, long long avail, compute_t<T> (&v)[N]) {
    using B = typename Traits<T>::B;
    constexpr int PACK = 16 / int(sizeof(T));
    if (avail >= N && N % PACK == 0) {
#pragma unroll
        for (int i = 0; i < N / PACK; ++i) {
            const Pack<T, PACK> w = load_pack<T, PACK>(p + i * PACK);
#pragma unroll
            for (int j = 0; j < PACK; ++j) v[i * PACK + j] = Traits<T>::in(w.v[j]);
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i)
            v[i] = i < avail ? Traits<T>::in(reinterpret_cast<const B*>(p)[i]) : neg_inf<compute_t<T>>();
    }
}

// The rows [row0, row0 + ROWS) of x (n rows of cols <= COLS elements) in the compute type,
// times `scale`; -inf past the end.
template <typename T, int COLS, int ROWS>
__device__ inline void load_rows(const T* x, long long row0, long long n, long long cols, double scale,
                                 compute_t<T> (&v)[ROWS][COLS]) {
    using C = compute_t<T>;
    const long long avail = n > row0 ? (n - row0) * cols : 0;
    C flat[ROWS * COLS];
    if (cols == COLS) {
        load_elements<T, ROWS * COLS>(x + row0 * cols, avail, flat);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS * COLS; ++i) flat[i] = neg_inf<C>();
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int c = 0; c < COLS; ++c)
                if (c < cols && (r * cols + c) < avail) flat[r * COLS + c] = Traits<T>::in(bits(x)[(row0 + r) * cols + c]);
    }
    const C f = C(scale);
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int c = 0; c < COLS; ++c) v[r][c] = scale == 1.0 ? flat[r * COLS + c] : mul_rn(flat[r * COLS + c], f);
}

// segment_tiles: x and y (n rows of cols <= COLS elements, 16-byte aligned) and, for a backward pass, g
// (dy, as x), seg (ids or offsets of I), y (x's shape; logsumexp: nseg rows of cols, filled with
// -inf beforehand), work (SegmentWork of the tiles), unsorted (zeroed beforehand; set to 1 where
// ids go down: the results are then not to be used). One block a tile.
template <class Op, typename T, typename I, int COLS, int ROWS>
__global__ void __launch_bounds__(SEGMENT_THREADS, CSM_SEGMENT_BLOCKS)
    segment_tiles(const T* x, const T* g, const I* seg, T* y, unsigned char* work, int* unsorted,
                  long long n, long long cols, long long nseg, long long offsets, const Scaled ld) {
    using C = compute_t<T>;
    using St = typename Op::template State<C, COLS>;
    constexpr long long TILE = (long long)SEGMENT_THREADS * ROWS;
    constexpr bool LSE = Op::LSE;
    constexpr int WARPS = SEGMENT_THREADS / 32;
    __shared__ long long s_first[SEGMENT_THREADS], s_last[SEGMENT_THREADS], s_edge[2];
    __shared__ St s_fwd[WARPS], s_back[WARPS];
    __shared__ int s_fflag[WARPS], s_bflag[WARPS];

    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const long long tile = blockIdx.x, tiles = gridDim.x, first_row = tile * TILE;
    const long long row0 = first_row + (long long)t * ROWS;
    const SegmentWork ws = segment_work(work, tiles);

    long long key[ROWS];
    if (offsets || !load_ids<I, ROWS>(seg, row0, n, key)) {
        key[0] = key_at(seg, int(offsets), nseg, n, row0);
#pragma unroll
        for (int r = 1; r < ROWS; ++r) {
            if (!offsets || row0 + r >= n) {
                key[r] = key_at(seg, int(offsets), nseg, n, row0 + r);
            } else {  // the next segment holding row0 + r, past empty ones
                long long k = key[r - 1];
                while (k < nseg && (long long)seg[k + 1] <= row0 + r) ++k;
                key[r] = k;
            }
        }
    }
    if (t == 0) {  // the keys beside the tile: is its first (last) segment open?
        s_edge[0] = tile > 0 ? key_at(seg, int(offsets), nseg, n, first_row - 1) : PAD_KEY;
        s_edge[1] = key_at(seg, int(offsets), nseg, n, first_row + TILE);
    }
    s_first[t] = key[0];
    s_last[t] = key[ROWS - 1];

    C v[ROWS][COLS], gv[ROWS][COLS];
    load_rows<T, COLS, ROWS>(x, row0, n, cols, ld.s, v);
    if constexpr (Op::INPUTS == 2) {
        load_rows<T, COLS, ROWS>(g, row0, n, cols, 1.0, gv);
    } else {
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int c = 0; c < COLS; ++c) gv[r][c] = C(0);
    }

    // Runs of equal keys inside the thread: run[r] is, after the backward pass, the state of the
    // whole (thread-local) run holding row r.
    St run[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        if (r == 0 || key[r] != key[r - 1]) run[r].clear();
        else run[r] = run[r - 1];
        if (in_segment(key[r], nseg))
#pragma unroll
            for (int c = 0; c < COLS; ++c)
                if (c < cols) Op::push(run[r], c, v[r][c], gv[r][c]);
    }
#pragma unroll
    for (int r = ROWS - 2; r >= 0; --r)
        if (key[r + 1] == key[r]) run[r] = run[r + 1];
    int head = ROWS, tail = 0;  // rows [0, head) hold key[0]; rows [tail, ROWS) key[ROWS - 1]
#pragma unroll
    for (int r = ROWS - 1; r > 0; --r) {
        if (key[r] != key[0]) head = r;
        if (key[r - 1] != key[ROWS - 1] && tail == 0) tail = r;
    }
    const bool single = key[0] == key[ROWS - 1];
    __syncthreads();
    const long long prev_last = t > 0 ? s_last[t - 1] : PAD_KEY - 1;
    const long long next_first = t + 1 < SEGMENT_THREADS ? s_first[t + 1] : PAD_KEY - 1;
    const long long k_head = s_first[0], k_tail = s_last[SEGMENT_THREADS - 1];
    const bool head_open = in_segment(k_head, nseg) && s_edge[0] == k_head;
    const bool tail_open = in_segment(k_tail, nseg) && s_edge[1] == k_tail;
    if (!offsets) {  // ids out of order (rows past the end hold PAD_KEY): the call sorts them
        bool down = key[0] < (t > 0 ? s_last[t - 1] : tile > 0 ? s_edge[0] : key[0]);
#pragma unroll
        for (int r = 1; r < ROWS; ++r) down |= key[r] < key[r - 1];
        if (down) *unsorted = 1;
    }

    // Forward: p = the state of the thread's last segment from its start in the tile through
    // this thread (a segmented inclusive scan; a thread starts a segment where flag).
    St p = run[ROWS - 1];
    const int starts = !single || t == 0 || key[0] != prev_last;  // the last segment starts here
    int flag = starts;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const St q = p.up(o);
        const int qf = __shfl_up_sync(0xffffffffu, flag, o);
        if (lane >= o) {
            if (!flag) {
                St s = q;
                s.merge(p);
                p = s;
            }
            flag |= qf;
        }
    }
    if (lane == 31) {
        s_fwd[warp] = p;
        s_fflag[warp] = flag;
    }
    __syncthreads();
    St carry;  // the scan over the warps before this one
    carry.clear();
    for (int w = 0; w < warp; ++w) {
        if (s_fflag[w]) {
            carry = s_fwd[w];
        } else {
            carry.merge(s_fwd[w]);
        }
    }
    if (!flag && warp > 0) {
        St s = carry;
        s.merge(p);
        p = s;
    }
    // the previous thread's p: the state of prev_last's segment up to this thread
    St before = p.up(1);
    if (lane == 0) before = carry;
    St head_state;  // this thread's first segment, from its start in the tile through its run here
    if (single) {
        head_state = p;
    } else {
        if (t > 0 && prev_last == key[0]) {
            head_state = before;
            head_state.merge(run[0]);
        } else {
            head_state = run[0];
        }
    }
    // Backward: each segment's state at its last thread in the tile, copied to the threads before.
    const int ends = !single || t == SEGMENT_THREADS - 1 || next_first != key[ROWS - 1];
    St q = head_state;
    int qflag = ends;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const St r = q.down(o);
        const int rf = __shfl_down_sync(0xffffffffu, qflag, o);
        if (lane + o < 32 && !qflag) {
            q = r;
            qflag = rf;
        }
    }
    if (lane == 0) {
        s_back[warp] = q;
        s_bflag[warp] = qflag;
    }
    __syncthreads();
    St right;  // the nearest end in the warps after this one (thread SEGMENT_THREADS - 1 ends)
    right.clear();
    for (int w = warp + 1; w < WARPS; ++w)
        if (s_bflag[w]) {
            right = s_back[w];
            break;
        }
    if (!qflag) q = right;
    St after = q.down(1);  // the next thread's q
    if (lane == 31) after = right;
    const St tail_total = t + 1 < SEGMENT_THREADS && next_first == key[ROWS - 1] ? after : p;
    const St head_total = single ? tail_total : head_state;

    // The tile's open segments: their parts and extents to the workspace.
    if (t == 0) {
        long long* meta = ws.meta + 4 * tile;
        meta[0] = k_head;
        meta[1] = k_tail;
        meta[2] = (head_open ? 1 : 0) | (tail_open ? 2 : 0);
        if (head_open) *ws.at<St>(tile, PART_HEAD) = head_total;
    }
    if (t == SEGMENT_THREADS - 1 && tail_open) *ws.at<St>(tile, PART_TAIL) = tail_total;
    if (key[0] == k_head && ends) {  // the last thread of the tile's first segment
        reinterpret_cast<unsigned*>(ws.meta + 4 * tile + 3)[0] = unsigned(t * ROWS + head);
    }
    if (key[ROWS - 1] == k_tail && starts) {  // the first thread of the tile's last segment
        reinterpret_cast<unsigned*>(ws.meta + 4 * tile + 3)[1] = unsigned(t * ROWS + (single ? 0 : tail));
    }

    // The writes of every segment closed in the tile. The per-element outputs go through shared
    // memory: a thread's rows are contiguous, so its own stores would leave each warp store
    // instruction 32 sectors apart (a partial-sector write an element in L2); read back across
    // the warp they leave as whole 16-byte pieces.
    using B = typename Traits<T>::B;
    constexpr int WARP_ROWS = 32 * ROWS;
    __shared__ __align__(16) B s_out[LSE ? 1 : SEGMENT_THREADS * ROWS * COLS];
    __shared__ bool s_keep[LSE ? 1 : SEGMENT_THREADS * ROWS];
    B outs[ROWS * COLS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const long long k = key[r];
        const bool open = (head_open && k == k_head) || (tail_open && k == k_tail);
        St s = run[r];  // by value: a reference into run[] would put it in local memory
        if (r < head) s = head_total;
        else if (r >= tail) s = tail_total;
        if constexpr (LSE) {
            const bool last = r + 1 < ROWS ? key[r + 1] != k : t + 1 == SEGMENT_THREADS || next_first != k;
            if (last && !open && in_segment(k, nseg))
#pragma unroll
                for (int c = 0; c < COLS; ++c)
                    if (c < cols) bits(y)[k * cols + c] = Traits<T>::out(segment_lse(s.m[c], s.d[c]));
        } else {
            s_keep[t * ROWS + r] = !open && row0 + r < n;
#pragma unroll
            for (int c = 0; c < COLS; ++c) {
                const C out = in_segment(k, nseg) ? Op::out(s, c, v[r][c], gv[r][c])
                                                  : Op::template excluded<C>();
                outs[r * COLS + c] = Traits<T>::out(out);
            }
        }
    }
    if constexpr (!LSE) {
        // this thread's rows at (t * ROWS) * cols in the block's rows of cols elements
        B* mine = s_out + (long long)t * ROWS * cols;
        constexpr int PACK = 16 / int(sizeof(T));
        if (cols == COLS && (ROWS * COLS) % PACK == 0) {
#pragma unroll
            for (int i = 0; i < ROWS * COLS / PACK; ++i) {
                Pack<T, PACK> w;
#pragma unroll
                for (int j = 0; j < PACK; ++j) w.v[j] = outs[i * PACK + j];
                store_pack<T, PACK>(reinterpret_cast<T*>(mine) + i * PACK, w);
            }
        } else {
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int c = 0; c < COLS; ++c)
                    if (c < cols) mine[r * cols + c] = outs[r * COLS + c];
        }
        __syncwarp();
        // The warp's rows (WARP_ROWS * cols elements, a multiple of 16 bytes from a 16-byte
        // boundary of y) in 16-byte pieces; a piece with a row to keep out goes element by element.
        const int base = warp * WARP_ROWS * int(cols);
        const int packs = WARP_ROWS * int(cols) / PACK;
        const bool* keep = s_keep + warp * WARP_ROWS;
        B* dst = bits(y) + (first_row + (long long)warp * WARP_ROWS) * cols;
        for (int p = lane; p < packs; p += 32) {
            const int e = p * PACK;
            bool all = true;
#pragma unroll
            for (int j = 0; j < PACK; ++j) all &= keep[COLS == 1 ? e + j : (e + j) / int(cols)];
            if (all) {
                store_pack_global<T, PACK>(reinterpret_cast<T*>(dst + e),
                                           load_pack<T, PACK>(reinterpret_cast<const T*>(s_out + base + e)));
            } else {
#pragma unroll
                for (int j = 0; j < PACK; ++j)
                    if (keep[COLS == 1 ? e + j : (e + j) / int(cols)]) dst[e + j] = s_out[base + e + j];
            }
        }
    }
}

// segment_fold: block `a` folds the open segment that starts in tile a (its tail part, then the
// head parts of the tiles after it that the segment covers, SEGMENT_THREADS tiles a round in a
// fixed tree), and writes the total to every tile it covers (logsumexp: to y).
template <class Op, typename T, int COLS>
__global__ void __launch_bounds__(SEGMENT_THREADS)
    segment_fold(T* y, unsigned char* work, long long tiles, long long cols, const Plain) {
    using C = compute_t<T>;
    using St = typename Op::template State<C, COLS>;
    constexpr int WARPS = SEGMENT_THREADS / 32;
    __shared__ St s_part[WARPS];
    const SegmentWork ws = segment_work(work, tiles);
    const long long a = blockIdx.x;
    const long long* meta = ws.meta + 4 * a;
    const long long g = meta[1];
    if (!(meta[2] & 2) || ((meta[2] & 1) && meta[0] == g)) return;  // no open segment starts here
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    St total = *ws.at<St>(a, PART_TAIL);
    long long end = a;  // the last tile the segment covers
    for (long long base = a + 1;; base += SEGMENT_THREADS) {
        const long long b = base + t;
        const bool in = b < tiles && (ws.meta[4 * b + 2] & 1) && ws.meta[4 * b] == g;
        St s;
        if (in) s = *ws.at<St>(b, PART_HEAD);
        else s.clear();
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const St u = s.down(o);
            if (lane + o < 32) s.merge(u);
        }
        if (lane == 0) s_part[warp] = s;
        const int count = __syncthreads_count(in);
        for (int w = 0; w < WARPS; ++w) total.merge(s_part[w]);
        end += count;
        __syncthreads();
        if (count < SEGMENT_THREADS) break;
    }
    for (long long b = a + t; b <= end; b += SEGMENT_THREADS) {
        if (b == a) *ws.at<St>(b, TOTAL_TAIL) = total;
        else *ws.at<St>(b, TOTAL_HEAD) = total;
    }
    if constexpr (Op::LSE) {
        if (t < cols) bits(y)[g * cols + t] = Traits<T>::out(segment_lse(total.m[t < COLS ? t : 0], total.d[t < COLS ? t : 0]));
    }
}

// segment_fixup: the rows of each tile's open segments, from their totals.
template <class Op, typename T, int COLS, int ROWS>
__global__ void __launch_bounds__(SEGMENT_THREADS)
    segment_fixup(const T* x, const T* g, const unsigned char* work, T* y, long long n, long long cols,
                  const Scaled ld) {
    using C = compute_t<T>;
    using St = typename Op::template State<C, COLS>;
    constexpr long long TILE = (long long)SEGMENT_THREADS * ROWS;
    const long long tile = blockIdx.x, tiles = gridDim.x, first_row = tile * TILE;
    const SegmentWork ws = segment_work(const_cast<unsigned char*>(work), tiles);
    const long long* meta = ws.meta + 4 * tile;
    const long long open = meta[2];
    if (!open) return;
    const unsigned* extent = reinterpret_cast<const unsigned*>(meta + 3);
    const long long rows_here = min(TILE, n - first_row);
    const bool single = meta[0] == meta[1];
    for (int part = 0; part < 2; ++part) {
        if (!(open & (part ? 2 : 1)) || (part && single && (open & 1))) continue;
        // a tile of one segment is all rows; else the head's rows [0, end), the tail's [start, ..)
        const long long lo = part && !single ? extent[1] : 0;
        const long long hi = part || single ? rows_here : extent[0];
        const St s = *ws.at<St>(tile, part ? TOTAL_TAIL : TOTAL_HEAD);
        const C f = C(ld.s);
        for (long long i = lo * cols + threadIdx.x; i < hi * cols; i += SEGMENT_THREADS) {
            const int c = int(i % cols);
            const long long e = first_row * cols + i;
            C v = Traits<T>::in(bits(x)[e]);
            if (ld.s != 1.0) v = mul_rn(v, f);
            const C gv = Op::INPUTS == 2 ? Traits<T>::in(bits(g)[e]) : C(0);
            bits(y)[e] = Traits<T>::out(Op::out(s, c < COLS ? c : 0, v, gv));
        }
    }
}

}  // namespace csm
