// Reductions of each slice to one value (logsumexp): one read of every element, no write pass,
// nothing held on chip but each thread's running state.
//
//   reduce_lanes<T, V, W, P, R, S, WR>  rows of up to 32 * P * V: W lanes a row, P packs a lane,
//                                       R rows a group, S steps in flight (WR 1: WarpRing)
//   reduce_chunks<T, V>                 longer rows: a chunk a block, merged through the workspace
//   reduce_columns<T, V, S>             a strided axis: a strip a block, S steps a batch
//
// The state of a slice is (m, c, s): its max m, the count c of its elements equal to m, and the
// sum s of exp(x - m) over the others, so that Ep's value of it can take log(c) + log1p(s / c):
// a sum dominated by its max term keeps its relative accuracy (logsumexp([0, -50]) is
// log1p(e^-50), not 0). Merges in fixed orders: the same input gives the same bits.
// The output y holds slice r's output (row r, or column o * inner + i) at the op's place r (one
// element of x's type for logsumexp; ops.cuh).
#include "common.cuh"
#include "ops.cuh"

#if !defined(CSM_REDUCE_THREADS) || !defined(CSM_REDUCE_SHIFTED)
#error "reduce.cu needs -DCSM_REDUCE_THREADS and -DCSM_REDUCE_SHIFTED from the loader"
#endif

namespace csm {

[[maybe_unused]] constexpr int REDUCE_THREADS = CSM_REDUCE_THREADS;  // threads a block of every reduce kernel
// The kernels whose MCS::push takes exp_shifted's terms (bits: 1 reduce_lanes, 2 reduce_chunks,
// 4 reduce_columns).
[[maybe_unused]] constexpr bool LANES_SHIFTED = CSM_REDUCE_SHIFTED & 1, CHUNKS_SHIFTED = CSM_REDUCE_SHIFTED & 2,
               COLUMNS_SHIFTED = CSM_REDUCE_SHIFTED & 4;
[[maybe_unused]] constexpr int REDUCE_BATCH = 4;  // packs of a long row a thread loads before it uses any
template <typename T> constexpr int REDUCE_BLOCKS = HALF_RESIDENT<T, REDUCE_THREADS>;  // launch bounds
static_assert(REDUCE_THREADS % 32 == 0 && REDUCE_THREADS <= 1024, "whole warps, one block");

// The largest of m and the values that each(f) passes to f (fmax: NaN ignored).
template <class Each, typename C> __device__ inline C max_of(const Each& each, C m) {
    each([&](C v) { m = fmax(m, v); });
    return m;
}

// A state (m, c, s) against a max top >= m: every element so far goes to s, times exp(m - top)
// (0 where m is -inf, or top is +inf and m is not), taken in the compute type: a float factor
// errs by 2^-22 and drops what lies below 2^-126 of the max's term, inside float types' bounds.
template <typename A, typename C> __device__ inline void raise_to(C& m, A& c, A& s, C top) {
    if (top != m) {
        s = (s + c) * A(fast_exp(m - top));
        c = 0;
        m = top;
    }
}

// (m, c, s), identity (-inf, 0, 0). fmax ignores NaN, so a NaN element goes to s and makes it
// NaN; elements equal to m are counted, never exp'd, whatever m is (-inf and +inf included, so a
// slice of -inf is (-inf, n, 0) and one holding +inf has c > 0 and s 0 or NaN). c and s in A:
// double, or float for a thread's own state where its bounds allow (Own); wide() for merges.
template <typename C, typename A = acc_t> struct MCS {
    C m;
    A c, s;
    __device__ static MCS identity() { return {neg_inf<C>(), A(0), A(0)}; }
    __device__ MCS<C> wide() const { return {m, acc_t(c), acc_t(s)}; }
    __device__ void raise(C top) { raise_to(m, c, s, top); }
    // Adds the elements that each(f) passes to f, one at a time, walked twice: one raise to
    // their max, then their counts and terms, summed in the compute type (at most 64 terms
    // below 1) and added to c and s once. SHIFTED: a term is exp_shifted's (FFMA, MUFU) where m
    // passes shift_ok, the batch's sum then times shift_fix(m) (one MUFU more a batch); else
    // fast_exp(v - m).
    template <bool SHIFTED = false, typename Each> __device__ void push(Each&& each) {
        raise(max_of(each, m));
        C cs = 0, ss = 0;
        auto terms = [&](auto shifted) {
            constexpr bool BY_SHIFT = decltype(shifted)::value;
            const C sh = shift_of(m);
            each([&](C v) {  // x = m is counted, its term dropped
                const C e = exp_by<BY_SHIFT>(v, m, sh);
                if (v == m) cs += C(1); else ss += e;
            });
            if (BY_SHIFT) ss *= shift_fix(m);
        };
        if constexpr (SHIFTED) with_shift(shift_ok(m), terms); else terms(Shift<false>());
        c += A(cs);
        s += A(ss);
    }
    __device__ void merge(MCS o) {
        const C top = fmax(m, o.m);
        raise(top);
        o.raise(top);
        c += o.c;
        s += o.s;
    }
};

// A thread's own running state (its part of a slice, merged wide): c and s float for 2-byte
// types, else double. A float sum of k terms errs by at most k * 2^-24 of it, and so log(c + s)
// by that: k, a thread's terms, is 512 at most in rows and some 4096 in columns of a 2^31-element
// tensor (2 columns of some 2 * 528 items of 256 threads), 2.4e-4, inside their atol of 1e-2.
template <typename T, bool HALF = sizeof(T) == 2> struct OwnAcc { using type = acc_t; };
template <typename T> struct OwnAcc<T, true> { using type = float; };
template <typename T> using Own = MCS<compute_t<T>, typename OwnAcc<T>::type>;

// The state of each aligned group of `width` lanes, every lane getting its group's (shuffle
// trees: the largest m, then the counts and sums raised to it), the trees' sums in A. A = C
// (float) for reduce_lanes' rows, of reduce_warp_max_bytes at most, so float counts are exact:
// a float tree of 32 lanes' sums errs by some 4e-7 of the sum, inside float types' bounds, for
// half the shuffles and no double math.
template <typename A = acc_t, typename C> __device__ inline MCS<C> group_merge(const MCS<C>& s, int width) {
    C m = s.m;
    A c = A(s.c), t = A(s.s);
    raise_to(m, c, t, group_reduce(s.m, width, MaxOp()));
    return {m, acc_t(group_reduce(c, width, SumOp())), acc_t(group_reduce(t, width, SumOp()))};
}

// The block's state on every thread: each warp's by shuffles, then warp 0's lanes take the
// warps' through `sh` (3 * 32 doubles); two barriers, so `sh` may be used again at once.
template <typename C> __device__ inline MCS<C> block_merge(MCS<C> s, double* sh) {
    s = group_merge(s, 32);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sh[3 * warp] = double(s.m);
        sh[3 * warp + 1] = s.c;
        sh[3 * warp + 2] = s.s;
    }
    __syncthreads();
    s = lane < int(blockDim.x >> 5) ? MCS<C>{C(sh[3 * lane]), sh[3 * lane + 1], sh[3 * lane + 2]}
                                   : MCS<C>::identity();
    s = group_merge(s, 32);  // every warp alike: the same bits on every thread
    __syncthreads();
    return s;
}

// States in the workspace (written and read through L2: other blocks read them).
template <typename C> __device__ inline void put_mcs(double* p, const MCS<C>& s) {
    __stcg(p, double(s.m));
    __stcg(p + 1, s.c);
    __stcg(p + 2, s.s);
}
template <typename C> __device__ inline MCS<C> get_mcs(const double* p) {
    return MCS<C>{C(__ldcg(p)), __ldcg(p + 1), __ldcg(p + 2)};
}

// Ep's output of slice i's state (y: of the op's own type and layout, see ops.cuh).
template <class Ep, typename T, typename C> __device__ inline void put_value(void* y, long long i, const MCS<C>& s) {
    Ep::template put<T>(y, i, s.m, s.c, s.s);
}

// A walk of P packs' words for MCS::push: each value as Ld loads it (unpacked at each walk, so
// only the words are held).
template <class Ld, typename T, int V, int P> struct Words {
    const Ld& ld;
    const word_t<T, V> (&w)[P];
    template <typename F> __device__ void operator()(F&& f) const {
#pragma unroll
        for (int p = 0; p < P; ++p) {
            compute_t<T> u[V];
            unpack_word<T, V>(w[p], u);
            ld.load(u);
#pragma unroll
            for (int j = 0; j < V; ++j) f(u[j]);
        }
    }
};
// max_of a walk of words: each pack's max on its bits (pack_max; a load that runs here is
// monotone, ops.cuh), so that no pack's values stay unpacked between MCS::push's two walks.
template <class Ld, typename T, int V, int P>
__device__ inline compute_t<T> max_of(const Words<Ld, T, V, P>& each, compute_t<T> m) {
    static_assert(!Ld::MASKS, "a load that leaves elements out has no max on bits");
#pragma unroll
    for (int p = 0; p < P; ++p) {
        Pack<T, V> v;
        memcpy(&v, &each.w[p], sizeof v);
        m = fmax(m, one(each.ld, pack_max(v)));
    }
    return m;
}
template <class Ld, typename T, int V, int P> __device__ inline Words<Ld, T, V, P> words(const Ld& ld, const word_t<T, V> (&w)[P]) {
    return {ld, w};
}

// Column j of S packs of V columns of a 2-byte type (the same columns at S steps of a strided
// axis): each value as Ld loads it, unpacked from the packs at each walk (only the packs are held).
template <class Ld, typename T, int V, int S> struct Column {
    static_assert(sizeof(T) == 2 && V >= 2, "half types' pairs");
    const Ld& ld;
    const Pack<T, V> (&p)[S];
    int j;
    template <typename F> __device__ void operator()(F&& f) const {
#pragma unroll
        for (int b = 0; b < S; ++b) {
            compute_t<T> v[V];
            unpack(p[b], v);
            ld.load(v);
            f(v[j]);
        }
    }
};
// max_of a column: the max of its pair of columns on their bits over the S steps (HMNMX2, fmax
// semantics as pack_max; a load that runs here is monotone, ops.cuh).
template <class Ld, typename T, int V, int S>
__device__ inline compute_t<T> max_of(const Column<Ld, T, V, S>& each, compute_t<T> m) {
    static_assert(!Ld::MASKS, "a load that leaves elements out has no max on bits");
    using T2 = typename Traits<T>::T2;
    const int pair = each.j & ~1;
    T2 w, u;
    memcpy(&w, &each.p[0].v[pair], sizeof w);
#pragma unroll
    for (int b = 1; b < S; ++b) {
        memcpy(&u, &each.p[b].v[pair], sizeof u);
        w = __hmax2(w, u);
    }
    return fmax(m, one(each.ld, each.j & 1 ? __high2float(w) : __low2float(w)));
}

// This thread's packs of the n elements at xr: c0, c0 + step, ..., in batches of REDUCE_BATCH,
// the next batch loaded before this one is pushed, so two are in flight (-inf past n, no load).
template <class Ld, typename T, int V>
__device__ inline void push_run(const Ld& ld, const T* xr, int n, int c0, int step, Own<T>& s) {
    using C = compute_t<T>;
    auto load = [&](int c, word_t<T, V>(&w)[REDUCE_BATCH]) {
#pragma unroll
        for (int b = 0; b < REDUCE_BATCH; ++b) w[b] = load_row_word<T, V>(xr, c + b * step, n, neg_inf<C>());
    };
    word_t<T, V> w[REDUCE_BATCH], next[REDUCE_BATCH];
    if (c0 < n) load(c0, w);
    for (int c = c0; c < n; c += REDUCE_BATCH * step) {
        load(c + REDUCE_BATCH * step, next);
        s.template push<CHUNKS_SHIFTED>(words<Ld, T, V>(ld, w));
#pragma unroll
        for (int b = 0; b < REDUCE_BATCH; ++b) w[b] = next[b];
    }
}

// f(r, p, j, k) for each of a lane's packs of a reduce_lanes step, R rows by P packs: row j =
// r * 32 / W + group of the warp's step, pack k = p * W + sub of that row.
template <int W, int R, int P, class F> __device__ inline void lane_packs(F&& f) {
    const int sub = threadIdx.x & (W - 1), group = (threadIdx.x & 31) / W;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int p = 0; p < P; ++p) f(r, p, r * (32 / W) + group, p * W + sub);
}

// The rings: a step's packs issued AHEAD steps before they are taken, at(j, k, c) giving row j's
// pointer and setting pack k's column c; a pack across or past the row's end: element loads,
// -inf.
//
// StepRing: each lane copies its own packs, of 4 bytes or more by cp.async into the thread's own
// slots of a ring of S + 1 steps in dynamic shared memory (step j + S into the slot step j - 1
// was read from); S = 0, or smaller packs: one step ahead in registers.
template <typename T, int V, int W, int R, int P, int S, bool ASYNC = (S > 0 && sizeof(T) * V >= 4)> struct StepRing;
template <typename T, int V, int W, int R, int P, int S> struct StepRing<T, V, W, R, P, S, true> {
    static constexpr int AHEAD = S;
    static_assert(S >= 1 && S < 8, "1 to 7 steps in flight (copy_wait_pending)");
    word_t<T, V>* const ring;  // [S + 1][R][P][REDUCE_THREADS]
    int issued = 0, taken = 0;
    __device__ explicit StepRing(void* smem) : ring(static_cast<word_t<T, V>*>(smem) + threadIdx.x) {}
    template <class At> __device__ void issue(bool any, int n, At&& at) {
        if (any) {
            word_t<T, V>* slot = ring + issued % (S + 1) * (R * P * REDUCE_THREADS);
            lane_packs<W, R, P>([&](int r, int p, int j, int k) {
                int c;
                const T* xr = at(j, k, c);
                stage_pack<T, V>(reinterpret_cast<T*>(slot + (r * P + p) * REDUCE_THREADS), xr + c, n - c);
            });
        }
        copy_commit();  // an empty group past the last step, so the waits count alike
        ++issued;
    }
    __device__ void take(word_t<T, V> (&w)[R][P]) {
        copy_wait_pending(S - 1);
        const word_t<T, V>* slot = ring + taken % (S + 1) * (R * P * REDUCE_THREADS);
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int p = 0; p < P; ++p) w[r][p] = slot[(r * P + p) * REDUCE_THREADS];
        ++taken;
    }
};
template <typename T, int V, int W, int R, int P, int S> struct StepRing<T, V, W, R, P, S, false> {
    static constexpr int AHEAD = 1;
    word_t<T, V> held[R][P];
    __device__ explicit StepRing(void*) {}
    template <class At> __device__ void issue(bool any, int n, At&& at) {
        if (!any) return;
        lane_packs<W, R, P>([&](int r, int p, int j, int k) {
            int c;
            const T* xr = at(j, k, c);
            held[r][p] = load_row_word<T, V>(xr, c, n, neg_inf<compute_t<T>>());
        });
    }
    __device__ void take(word_t<T, V> (&w)[R][P]) {
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int p = 0; p < P; ++p) w[r][p] = held[r][p];
    }
};

// WarpRing: rows whose W lanes span less than a 128-byte line at once. Per lane-owned packs,
// each load instruction would touch 32 / W rows for W * V * sizeof(T) bytes each; here the
// warp copies its step whole rows at a time (lane l the step's packs l, l + 32, ...: an
// instruction covers 32 packs of consecutive rows) by cp.async into its part of a ring of S + 1
// steps (the same bytes as StepRing's), and each lane reads its own packs back after the warp's
// copies have landed. Row j's pack k sits at j * WP + (k ^ swz(j)): swz(j) is a multiple of W
// that differs between the rows sharing a quarter warp's 16-byte accesses (rows of 16-byte packs
// meet no bank twice, copying or reading).
template <typename T, int V, int W, int R, int P, int S> struct WarpRing {
    static constexpr int AHEAD = S, WP = W * P, PACKS = 32 * R * P;  // a row's packs, a step's
    static constexpr int LINE_ROWS = WP >= 8 ? 1 : 8 / WP;  // rows of 16-byte packs a line
    static_assert(S >= 1 && S < 8 && sizeof(T) * V >= 4, "1 to 7 steps of cp.async copies");
    word_t<T, V>* const ring;  // [S + 1][warps][PACKS]
    int issued = 0, taken = 0;
    __device__ explicit WarpRing(void* smem)
        : ring(static_cast<word_t<T, V>*>(smem) + (threadIdx.x >> 5) * PACKS) {}
    static __device__ int place(int j, int k) { return j * WP + (k ^ (W * (j / LINE_ROWS % P))); }
    __device__ word_t<T, V>* step(int i) const { return ring + i % (S + 1) * (REDUCE_THREADS / 32 * PACKS); }
    template <class At> __device__ void issue(bool any, int n, At&& at) {
        if (any) {
            word_t<T, V>* slot = step(issued);
#pragma unroll
            for (int i = 0; i < R * P; ++i) {
                const int q = i * 32 + (threadIdx.x & 31), j = q / WP, k = q % WP;
                int c;
                const T* xr = at(j, k, c);
                stage_pack<T, V>(reinterpret_cast<T*>(slot + place(j, k)), xr + c, n - c);
            }
        }
        copy_commit();
        ++issued;
    }
    __device__ void take(word_t<T, V> (&w)[R][P]) {
        copy_wait_pending(S - 1);
        __syncwarp();  // the other lanes' copies of this step; their reads of the slot reused next
        const word_t<T, V>* slot = step(taken);
        lane_packs<W, R, P>([&](int r, int p, int j, int k) { w[r][p] = slot[place(j, k)]; });
        ++taken;
    }
};

// reduce_lanes' ring: WarpRing where the plan says (WR), else StepRing.
template <typename T, int V, int W, int R, int P, int S, int WR> struct LaneRing {
    using type = StepRing<T, V, W, R, P, S>;
};
template <typename T, int V, int W, int R, int P, int S> struct LaneRing<T, V, W, R, P, S, 1> {
    using type = WarpRing<T, V, W, R, P, S>;
};

// Rows of n elements (row r at x + r * ldx), each by an aligned group of W lanes, in rounds of P
// packs a lane; a group takes R rows at a time (a warp 32 / W * R), a step (rows, round) issued
// S steps before it is used (LaneRing, WR its kind: the plan's shared memory; S = 0, registers,
// one ahead).
// Rows past the end: the last row again, not written; every lane runs the same steps, so the
// shuffles stay converged.
template <class Ld, class Ep, typename T, int V, int W, int P, int R, int S, int WR>
__global__ void __launch_bounds__(REDUCE_THREADS, REDUCE_BLOCKS<T>)
    reduce_lanes(const T* x, void* y, long long rows, int n, long long ldx, const Ld ld) {
    using C = compute_t<T>;
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int G = 32 / W;  // groups a warp
    constexpr int SPAN = W * P * V;  // elements a round
    const int sub = threadIdx.x & (W - 1), group = (threadIdx.x & 31) / W;
    const int rounds = (n + SPAN - 1) / SPAN;
    if (rounds == 0) return;  // no element (the library never launches one): no step ends
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const long long stride = (long long)gridDim.x * blockDim.x / 32 * G * R;
    struct Step {
        long long t;  // the group's first row
        int b;  // the round
    };
    auto after = [&](Step u) { return u.b + 1 == rounds ? Step{u.t + stride, 0} : Step{u.t, u.b + 1}; };
    typename LaneRing<T, V, W, R, P, S, WR>::type ring(smem);
    auto issue = [&](const Step& u) {
        ring.issue(u.t < rows, n, [&](int j, int k, int& c) {
            c = u.b * SPAN + k * V;
            return x + min(u.t + j, rows - 1) * ldx;
        });
    };
    Own<T> s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = Own<T>::identity();
    Step u{warp * G * R, 0}, ahead = u;
    for (int i = 0; i < ring.AHEAD; ++i, ahead = after(ahead)) issue(ahead);
    for (; u.t < rows; u = after(u), ahead = after(ahead)) {
        word_t<T, V> raw[R][P];
        ring.take(raw);
        issue(ahead);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            s[r].template push<LANES_SHIFTED>(words<Ld, T, V>(ld, raw[r]));
            if (u.b + 1 == rounds) {
                const MCS<C> m = group_merge<C>(s[r].wide(), W);
                const long long row = u.t + (long long)r * G + group;
                if (sub == 0 && row < rows) put_value<Ep, T>(y, row, m);
                s[r] = Own<T>::identity();
            }
        }
    }
}

// The head of a reduce workspace (zeroed before the launch): a count of chunks done per line;
// then the partial states, 3 doubles each, [line][chunk][column].
struct ReduceWork {
    unsigned* count;
    double* part;
    __device__ ReduceWork(void* base, long long lines) {
        count = static_cast<unsigned*>(base);
        part = reinterpret_cast<double*>(static_cast<char*>(base) + (4 * lines + 7) / 8 * 8);
    }
};

// Rows of n elements in chunks of `chunk` (a multiple of V): blocks take (row, chunk) items t,
// t + gridDim.x, ...; a row of one chunk is written by its block at once, else each chunk's
// state goes to the workspace, and the block that counts a row's last chunk merges the row's
// states (threads strided over the chunks in order, then the block merge: a fixed order).
template <class Ld, class Ep, typename T, int V>
__global__ void __launch_bounds__(REDUCE_THREADS, REDUCE_BLOCKS<T>)
    reduce_chunks(const T* x, void* y, void* work, long long rows, long long n, long long ldx,
                  long long chunk, long long chunks, const Ld ld) {
    using C = compute_t<T>;
    __shared__ double sh[3 * 32];
    __shared__ int flag;
    const ReduceWork ws(work, rows);
    for (long long t = blockIdx.x; t < rows * chunks; t += gridDim.x) {
        const long long row = t / chunks, k = t % chunks, begin = k * chunk;
        const int len = int(min(chunk, n - begin));
        Own<T> own = Own<T>::identity();
        push_run<Ld, T, V>(ld, x + row * ldx + begin, len, int(threadIdx.x) * V, REDUCE_THREADS * V, own);
        const MCS<C> s = block_merge(own.wide(), sh);
        if (chunks == 1) {
            if (threadIdx.x == 0) put_value<Ep, T>(y, row, s);
            continue;
        }
        double* parts = ws.part + 3 * row * chunks;
        if (threadIdx.x == 0) put_mcs(parts + 3 * k, s);
        if (!count_chunk(ws.count + row, chunks, &flag)) continue;
        MCS<C> r = MCS<C>::identity();
        for (long long j = threadIdx.x; j < chunks; j += blockDim.x) r.merge(get_mcs<C>(parts + 3 * j));
        r = block_merge(r, sh);
        if (threadIdx.x == 0) put_value<Ep, T>(y, row, r);
    }
}

// A strided reduced axis: element (o, k, i) at x + o * xso + k * xsn + i; V divides inner, xso,
// xsn and x's alignment. A block is `width` packs of a strip by blockDim.x / width lanes of steps,
// over items (line = (o, strip), chunk) t, t + gridDim.x, ...; a thread's V columns' states (S
// steps loaded at once) merge over the lanes in order; one chunk is written, else as reduce_chunks.
template <class Ld, class Ep, typename T, int V, int S>
__global__ void __launch_bounds__(REDUCE_THREADS, REDUCE_BLOCKS<T>)
    reduce_columns(const T* x, void* y, void* work, long long outer, long long n, long long inner,
                   long long xso, long long xsn, long long chunk, long long chunks, int width,
                   const Ld ld) {
    using C = compute_t<T>;
    __shared__ double red[3 * REDUCE_THREADS];
    __shared__ int flag;
    const int pack = threadIdx.x % width, lane = threadIdx.x / width, lanes = blockDim.x / width;
    const int cols = width * V;
    const long long strips = (inner + cols - 1) / cols, lines = outer * strips;
    const ReduceWork ws(work, lines);
    for (long long t = blockIdx.x; t < lines * chunks; t += gridDim.x) {
        const long long line = t / chunks, k = t % chunks, o = line / strips;
        const long long col0 = line % strips * cols, col = col0 + (long long)pack * V;
        const long long k0 = k * chunk, k1 = min(n, k0 + chunk);
        Own<T> s[V];
#pragma unroll
        for (int j = 0; j < V; ++j) s[j] = Own<T>::identity();
        // This thread's steps k0 + lane, k0 + lane + lanes, ...: `left` of them, `apart` apart.
        int left = col < inner ? int((k1 - k0 - lane + lanes - 1) / lanes) : 0;
        const long long apart = (long long)lanes * xsn;
        const T* at = x + o * xso + col + (k0 + lane) * xsn;
        auto load = [&](Pack<T, V>(&p)[S], int steps) {  // S packs, those past `steps` -inf
#pragma unroll
            for (int b = 0; b < S; ++b) {
                if (b < steps) {
                    p[b] = load_pack<T, V>(at + b * apart);
                } else {
#pragma unroll
                    for (int j = 0; j < V; ++j) p[b].v[j] = Traits<T>::out(neg_inf<C>());
                }
            }
            at += S * apart;
        };
        auto push = [&](const Pack<T, V>(&p)[S]) {
            if constexpr (sizeof(T) == 2 && V >= 2) {  // each walk unpacks its column (an instruction a value)
#pragma unroll
                for (int j = 0; j < V; ++j) s[j].template push<COLUMNS_SHIFTED>(Column<Ld, T, V, S>{ld, p, j});
            } else {
                C w[V][S];  // column j at the batch's steps, as Ld loads them
                pack_columns<Ld>(ld, p, w);
#pragma unroll
                for (int j = 0; j < V; ++j)
                    s[j].template push<COLUMNS_SHIFTED>([&](auto f) {
#pragma unroll
                        for (int b = 0; b < S; ++b) f(w[j][b]);
                    });
            }
        };
        Pack<T, V> p[S];
        for (; left >= S; left -= S) {
            load(p, S);
            push(p);
        }
        if (left > 0) {
            load(p, left);
            push(p);
        }
        // Over the lanes, column by column: lane 0 of each pack merges lanes 1, 2, ... in order.
        double* parts = ws.part + 3 * line * chunks * cols;
#pragma unroll
        for (int j = 0; j < V; ++j) {
            MCS<C> w = s[j].wide();
            red[3 * threadIdx.x] = double(w.m);
            red[3 * threadIdx.x + 1] = w.c;
            red[3 * threadIdx.x + 2] = w.s;
            __syncthreads();
            if (lane == 0) {
                for (int l = 1; l < lanes; ++l) {
                    const double* r = red + 3 * (l * width + pack);
                    w.merge(MCS<C>{C(r[0]), r[1], r[2]});
                }
                if (chunks == 1) {
                    if (col + j < inner) put_value<Ep, T>(y, o * inner + col + j, w);
                } else {
                    put_mcs(parts + 3 * (k * cols + pack * V + j), w);
                }
            }
            __syncthreads();
        }
        if (chunks == 1) continue;
        if (lane == 0) __threadfence();  // this thread's partials before the block's count
        __syncthreads();
        if (!count_chunk(ws.count + line, chunks, &flag)) continue;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {  // the line's merge, in chunk order
            if (col0 + c >= inner) continue;
            MCS<C> r = MCS<C>::identity();
            for (long long q = 0; q < chunks; ++q) r.merge(get_mcs<C>(parts + 3 * (q * cols + c)));
            put_value<Ep, T>(y, o * inner + col0 + c, r);
        }
    }
}

}  // namespace csm
