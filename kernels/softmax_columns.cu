// Softmax over a strided axis, without a transposing copy, in one launch.
//
//   kernel (after Ld, Ep)  holds on chip                     passes over memory         used for
//   columns<T, V>          V columns' running (m, d) a thread 2 reads (the second from L2) any axis
//   slab<T, V, CL>         a strip over the axis, CL blocks'  1 read, 1 write            axes a cluster holds (sm_90)
//
// The input is seen as [outer][n][inner], inner contiguous, softmax over n: element (o, k, i)
// is at x + o * xso + k * xsn + i (y likewise). V divides xso, xsn, yso, ysn and both base
// addresses are V-aligned; the last pack of the inner axis may be partial.
//
// The inner axis is cut into strips of `width` packs (width * V columns); a strip of one o is a
// line of the two-pass schedule in common.cuh, and n is cut into `chunks` chunks of `chunk`
// steps (chunk from n alone, so results do not depend on the batch). A block of `width` x S
// threads works on one (strip, chunk): thread (p, s) owns pack p of the strip at steps
// s, s + S, ... of the chunk, so each step is a coalesced run of width * V elements and S steps
// are read at once.
//
//   read item   per column (m, d) of the chunk: per thread, then merged over the S step lanes in
//               order; the block that completes a strip's last chunk merges its chunks in order.
//   write item  reads the chunk again (from L2 when the strip's group still is there) and
//               writes Ep's outputs (softmax: exp(x - m) / d).
//
// DRAM traffic: 1 read + 1 write per element when a group stays in L2 between the passes,
// 2 reads + 1 write otherwise, plus 16 bytes of partials per chunk per column.
#include "common.cuh"
#include "ops.cuh"

#if !defined(CSM_COLUMNS_THREADS) || !defined(CSM_COLUMNS_BLOCKS_PER_SM) || !defined(CSM_SLAB_MAX_COLS) || \
    !defined(CSM_SLAB_MAX_THREADS) || !defined(CSM_SLAB_SCRATCH)
#error "softmax_columns.cu needs -DCSM_COLUMNS_THREADS, -DCSM_COLUMNS_BLOCKS_PER_SM, -DCSM_SLAB_MAX_COLS, -DCSM_SLAB_MAX_THREADS and -DCSM_SLAB_SCRATCH from the loader"
#endif

namespace csm {

[[maybe_unused]] constexpr int COLUMN_BATCH = 4;  // steps each thread loads before using any

// Each of this thread's V columns' (m, d) over its steps k0 + lane, k0 + lane + lanes, ... < k1,
// from xo (the thread's first column at step 0), in batches of B steps; S: the state (MD<C>, or
// any type with its identity() and push_pack<Ep>).
template <class Ld, class Ep, typename T, int V, int B = COLUMN_BATCH, typename S>
__device__ inline void column_states(const Ld& ld, const T* xo, const StripLane& at, long long k0, long long k1,
                                     long long xsn, S (&s)[V]) {
    using C = compute_t<T>;
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = S::identity();
    for (long long k = k0 + at.lane; k < k1; k += B * at.lanes) {
        Pack<T, V> p[B];
        load_steps<T, V>(xo, k, at.lanes, k1, xsn, at.left, neg_inf<compute_t<T>>(), p);
        C w[V][B];  // column j at the batch's steps
        pack_columns<Ld>(ld, p, w);
#pragma unroll
        for (int j = 0; j < V; ++j) s[j].template push_pack<Ep>(w[j]);  // one rescale check per column per batch
    }
}

// The same steps read again and written, Ep's outputs with each column's m and constant, to yo.
template <class Ld, class Ep, typename T, int V, int B = COLUMN_BATCH, typename C>
__device__ inline void column_writes(const Ld& ld, const T* xo, T* yo, const StripLane& at, long long k0, long long k1,
                                     long long xsn, long long ysn, const C (&m)[V], const C (&consts)[V]) {
    for (long long k = k0 + at.lane; k < k1; k += B * at.lanes) {
        Pack<T, V> p[B];
        load_steps<T, V>(xo, k, at.lanes, k1, xsn, at.left, neg_inf<compute_t<T>>(), p);
#pragma unroll
        for (int b = 0; b < B; ++b) {
            const long long kb = k + b * at.lanes;
            if (kb >= k1) break;
            C v[V];
            unpack(p[b], v);
            ld.load(v);
#pragma unroll
            for (int j = 0; j < V; ++j) v[j] = Ep::template apply<false>(v[j], m[j], m[j], consts[j]);
            store_row_pack<T, V>(yo + kb * ysn, 0, at.left, v);
        }
    }
}

template <class Ld, class Ep, typename T, int V, typename C>
__device__ inline void columns_read(const Ld& ld, const T* x, long long xso, long long xsn,
                                    const StripLane& at, long long k0, long long k1, long long c,
                                    long long chunks, int width, double* line_part,
                                    double* line_stats, unsigned* line_count, MD<C>* red, int* flag) {
    MD<C> s[V];
    column_states<Ld, Ep, T, V>(ld, x + at.o * xso + at.col, at, k0, k1, xsn, s);
    // Merge over the step lanes, in lane order, column by column; lane 0 writes the partials.
    const int cols = width * V;
    double* chunk_part = line_part + 2LL * c * cols;
#pragma unroll
    for (int j = 0; j < V; ++j) {
        red[threadIdx.x] = s[j];
        __syncthreads();
        if (at.lane == 0) {
            for (int l = 1; l < at.lanes; ++l) s[j].merge(red[l * width + at.pack]);
            put_md(chunk_part + 2 * (at.pack * V + j), s[j]);
        }
        __syncthreads();
    }
    if (!chunk_done(line_count, chunks, flag, at.lane == 0)) return;
    for (int col = threadIdx.x; col < cols; col += blockDim.x) {  // the strip's merge, in chunk order
        MD<C> r = MD<C>::identity();
        for (long long k = 0; k < chunks; ++k) r.merge(get_md<C>(line_part + 2 * (k * cols + col)));
        put_md(line_stats + 2 * col, r);
    }
    line_merged(line_count);
}

template <class Ld, class Ep, typename T, int V, typename C>
__device__ inline void columns_write(const Ld& ld, const T* x, T* y, long long xso, long long xsn, long long yso,
                                     long long ysn, const StripLane& at, long long k0, long long k1,
                                     long long chunks, const double* line_stats,
                                     const unsigned* line_count) {
    wait_count(line_count, unsigned(chunks + 1));  // chunks counted, then merged
    C m[V], k[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
        const MD<C> s = get_md<C>(line_stats + 2 * (at.pack * V + j));
        m[j] = s.m;
        k[j] = Ep::constant(s.m, s.d);
    }
    column_writes<Ld, Ep, T, V>(ld, x + at.o * xso + at.col, y + at.o * yso + at.col, at, k0, k1, xsn, ysn, m, k);
}

// Blocks of at most COLUMNS_MAX_THREADS threads, `width` (a power of two) dividing the block,
// CSM_COLUMNS_BLOCKS_PER_SM of them resident an SM by the bounds.
[[maybe_unused]] constexpr int COLUMNS_MAX_THREADS = CSM_COLUMNS_THREADS;

template <class Ld, class Ep, typename T, int V>
__global__ void __launch_bounds__(COLUMNS_MAX_THREADS, CSM_COLUMNS_BLOCKS_PER_SM)
    columns(const T* x, T* y, void* work, long long outer, long long n, long long inner,
                    long long xso, long long xsn, long long yso, long long ysn, long long chunk,
                    long long chunks, long long per_group, int width, const Ld ld) {
    using C = compute_t<T>;
    __shared__ MD<C> red[COLUMNS_MAX_THREADS];
    __shared__ unsigned long long slots[2];
    __shared__ int flag;
    unsigned turn = 0;
    const long long strips = (inner + (long long)width * V - 1) / ((long long)width * V);
    const long long lines = outer * strips, cols = (long long)width * V;
    const Schedule plan{lines, chunks, per_group, (lines + per_group - 1) / per_group};
    const Workspace ws(work, lines, cols);
    for (unsigned long long t = hand_over(prefetch_ticket(ws.ticket), slots, turn); t < plan.tickets();) {
        const unsigned long long next = prefetch_ticket(ws.ticket);
        long long line, c;
        bool write;
        if (plan.item(t, line, c, write)) {
            const StripLane at(line, strips, inner, width, V);
            const long long k0 = c * chunk, k1 = min(n, k0 + chunk);
            if (write)
                columns_write<Ld, Ep, T, V, C>(ld, x, y, xso, xsn, yso, ysn, at, k0, k1, chunks,
                                       ws.stats + 2 * line * cols, ws.count + line);
            else
                columns_read<Ld, Ep, T, V, C>(ld, x, xso, xsn, at, k0, k1, c, chunks, width,
                                      ws.part + 2 * line * chunks * cols, ws.stats + 2 * line * cols,
                                      ws.count + line, red, &flag);
        }
        t = hand_over(next, slots, turn);
    }
}

// ---- The strided axis held on chip ("slab", sm_90 and newer): a strip of `width` packs
// (width * V <= SLAB_MAX_COLS columns) of one o over all n steps is a line, cut over the CL
// blocks of a cluster (block `rank` holds steps rank * per, ..., in its shared memory as bits):
// one read and one write per element. Thread (p, l) of a block owns pack p at the block's steps
// l, l + lanes, ... Per column: each warp's max and its sum of exp against that max (shuffles
// only), the warps' pairs merged, the blocks' pairs sent to each other (Mail) and merged once,
// then the write walk. Clusters take lines c, c + clusters, ... Blocks of a power-of-two number
// of warps (the warps' merge takes a group of lanes a warp).

#if __CUDA_ARCH__ >= 900  // __cluster_dims__ is an error before sm_90
[[maybe_unused]] constexpr int SLAB_MAX_COLS = CSM_SLAB_MAX_COLS;  // columns per strip, at most

// This thread's part of a block's slab: pack `pack` at steps lane, lane + lanes, ... < count.
template <typename T, int V> struct SlabPart {
    T* s;
    int pack, lane, lanes, width, count;
    __device__ T* at(int k) const { return s + ((long long)k * width + pack) * V; }
    // The pack at step k: src is the pack's element at the block's first step, `left` elements
    // of the pack are inside the inner axis (at least 1).
    __device__ void load(const T* src, long long xsn, int k, long long left) const {
        stage_pack<T, V>(at(k), src + k * xsn, left);
    }
    // Each of the pack's V columns: its largest element as in memory at this thread's steps in
    // [k0, k1) (k0 a multiple of lanes), into m (which holds -inf or earlier steps' maxima; fmax
    // semantics). Half types compare pairs as they are (one HMNMX2 per two columns a step, no
    // conversions).
    __device__ void max(float (&m)[V], int k0, int k1) const {
        if constexpr (sizeof(T) == 2 && V >= 2) {
            using T2 = typename Traits<T>::T2;
            T2 top[V / 2], w[V / 2];
#pragma unroll
            for (int j = 0; j < V / 2; ++j) top[j] = Traits<T>::pair(m[2 * j], m[2 * j + 1]);
            for (int k = k0 + lane; k < k1; k += lanes) {
                const Pack<T, V> p = load_pack<T, V>(at(k));
                memcpy(w, p.v, sizeof w);
#pragma unroll
                for (int j = 0; j < V / 2; ++j) top[j] = __hmax2(top[j], w[j]);
            }
#pragma unroll
            for (int j = 0; j < V / 2; ++j) m[2 * j] = __low2float(top[j]), m[2 * j + 1] = __high2float(top[j]);
        } else {
            for (int k = k0 + lane; k < k1; k += lanes) {
                float v[V];
                unpack(load_pack<T, V>(at(k)), v);
#pragma unroll
                for (int j = 0; j < V; ++j) m[j] = fmax(m[j], v[j]);
            }
        }
    }
};

// Each of this thread's V column values reduced over the warp's lanes of its pack (the lanes of
// one threadIdx.x % width; width divides 32) in a fixed shuffle tree; every lane gets its pack's
// results.
template <int V, typename Op>
__device__ inline void warp_columns_reduce(float (&v)[V], int width, Op op) {
#pragma unroll
    for (int j = 0; j < V; ++j)
        for (int o = 16; o >= width; o >>= 1) v[j] = op(v[j], __shfl_xor_sync(0xffffffffu, v[j], o));
}

// Per column c < cols, the (m, d) float pairs of `nb` sources at pairs[2 * (b * cols + c)]
// merged on an aligned group of G lanes (G a power of two, nb <= G), lane b taking source b's
// pair: the largest m, each source's term d * exp(m - M) at once, then the terms added in a
// fixed shuffle tree (floats; every lane of the group gets the same bits). Whole warps take
// part, lanes past the last column idle; f(c, b, M, D) runs on each lane of a column's group.
template <typename F>
__device__ inline void merge_column_pairs(const float* pairs, int nb, int G, int cols, F f) {
    for (int base = threadIdx.x & ~31; base < G * cols; base += blockDim.x) {
        const int pair = base + (threadIdx.x & 31), c = pair / G, b = pair % G;
        const bool on = pair < G * cols;
        float mb = neg_inf<float>(), db = 0;
        if (on && b < nb) {
            mb = pairs[2 * (b * cols + c)];
            db = pairs[2 * (b * cols + c) + 1];
        }
        const float top = group_reduce(mb, G, MaxOp());
        const float sum = group_reduce(sum_at(mb, db, top), G, SumOp());
        if (on) f(c, b, top, sum);
    }
}

// A line's column pairs merged over the block's warps, then over the cluster's CL blocks in
// round k of `mail`: on entry m[j] and d[j] are the warp's max of column pack * V + j and its sum
// of exp against that max (on every lane of the pack); on return m[j] is the column's max and
// consts[j] Ep's constant of it, the same bits on every block. The warps' pairs are merged per column
// (lane w of a column's group takes warp w's pair) and sent to every block of the cluster (lane w
// to blocks w, w + warps, ...); then column c merges the blocks' pairs in the same shuffle tree
// on every block. `recv`: two rounds of [RB][cols] (m, d) float pairs, RB at least the cluster's
// blocks and the block's warps: round k receives the blocks' pairs while the other holds the
// warps' (no peer sends into it before this block has sent round k's pairs, which it does only
// after reading its warps'). `fin`: [cols] pairs, read by every thread after the last barrier
// here.
template <class Ep, int CL, int V>
__device__ inline void cluster_columns(float (&m)[V], const float (&d)[V], float (&consts)[V], int pack,
                                       int width, int cols, int rank, int k, int RB,
                                       const Mail<CL>& mail, float* recv, float* fin) {
    float* round = recv + (k & 1) * 2 * RB * cols;
    float* own = recv + (~k & 1) * 2 * RB * cols;
    const int warps = blockDim.x >> 5;
    if ((threadIdx.x & 31) < width)
#pragma unroll
        for (int j = 0; j < V; ++j) {
            own[2 * ((threadIdx.x >> 5) * cols + pack * V + j)] = m[j];
            own[2 * ((threadIdx.x >> 5) * cols + pack * V + j) + 1] = d[j];
        }
    if (threadIdx.x == 0) mail.expect(k, CL * cols * 8);
    __syncthreads();
    merge_column_pairs(own, warps, warps, cols, [&](int c, int w, float top, float sum) {
        for (int b = w; b < CL; b += warps) mail.send(k, b, round + 2 * (rank * cols + c), top, sum);
    });
    mail.wait(k);  // the blocks' pairs of this line
    merge_column_pairs(round, CL, CL, cols, [&](int c, int b, float top, float sum) {
        if (b == 0) {
            fin[2 * c] = top;
            fin[2 * c + 1] = Ep::constant(top, sum);
        }
    });
    __syncthreads();
#pragma unroll
    for (int j = 0; j < V; ++j) m[j] = fin[2 * (pack * V + j)], consts[j] = fin[2 * (pack * V + j) + 1];
}

[[maybe_unused]] constexpr int SLAB_MAX_THREADS = CSM_SLAB_MAX_THREADS;
[[maybe_unused]] constexpr int SLAB_MAX_WARPS = SLAB_MAX_THREADS / 32;
// Dynamic shared memory ahead of the slab: two barriers of the blocks' exchange (Mail), per
// column the merged (m, k) (SLAB_SCRATCH bytes); then cluster_columns' two rounds of column
// pairs, each [max(CL, SLAB_MAX_WARPS)][cols] (m, d) floats (16 * max(CL, SLAB_MAX_WARPS) * cols
// bytes).
[[maybe_unused]] constexpr int SLAB_SCRATCH = CSM_SLAB_SCRATCH;
static_assert(SLAB_SCRATCH >= 16 + SLAB_MAX_COLS * 2 * 4, "SLAB_SCRATCH holds the barriers and a pair per column");
// A line's copies in groups, each group's max walked as soon as it lands: 4 beat 1 and 8 [kernels-11].
[[maybe_unused]] constexpr int SLAB_COPY_GROUPS = 4;

// At most 64 registers a thread: 4 blocks of 256 threads per SM.
template <class Ld, class Ep, typename T, int V, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(SLAB_MAX_THREADS, 4)
    slab(const T* x, T* y, long long outer, long long n, long long inner, long long xso,
                 long long xsn, long long yso, long long ysn, int width, const Ld ld) {
    static_assert(sizeof(compute_t<T>) == 4, "slab: float compute types");
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int RB = CL > SLAB_MAX_WARPS ? CL : SLAB_MAX_WARPS;  // pairs' rows of a round
    const Mail<CL> mail{reinterpret_cast<unsigned long long*>(smem)};
    float* fin = reinterpret_cast<float*>(smem + 16);  // [SLAB_MAX_COLS][2]
    float* recv = reinterpret_cast<float*>(smem + SLAB_SCRATCH);  // [2][RB][cols][2]
    const int rank = int(cluster_rank<CL>());
    const long long per = (n + CL - 1) / CL, k0 = rank * per;
    const int cols = width * V;
    const SlabPart<T, V> part{reinterpret_cast<T*>(smem + SLAB_SCRATCH + 16 * RB * cols),
                              int(threadIdx.x % width), int(threadIdx.x / width),
                              int(blockDim.x / width), width, int(max(0LL, min(n, k0 + per) - k0))};
    // Steps of a copy group: this thread's steps cut in SLAB_COPY_GROUPS, times lanes.
    const int q = ((part.count + part.lanes - 1) / part.lanes + SLAB_COPY_GROUPS - 1) / SLAB_COPY_GROUPS * part.lanes;
    const long long strips = (inner + cols - 1) / cols, lines = outer * strips;
    // Line -> offset of this thread's pack at the block's first step, and its elements inside
    // the inner axis (<= 0: the pack is past the end of the axis, nothing to do).
    auto offset = [&](long long line, long long so, long long sn) {
        return line / strips * so + k0 * sn + (line % strips) * cols + (long long)part.pack * V;
    };
    auto inside = [&](long long line) { return inner - ((line % strips) * cols + (long long)part.pack * V); };
    mail.open();
    int k = 0;  // lines done
    for (long long line = blockIdx.x / CL; line < lines; line += gridDim.x / CL, ++k) {
        const long long left = inside(line);
        if (left > 0) {  // one DRAM read per element, in SLAB_COPY_GROUPS groups of q steps
            const T* src = x + offset(line, xso, xsn);
#pragma unroll
            for (int g = 0; g < SLAB_COPY_GROUPS; ++g) {
                for (int s = g * q + part.lane; s < min(part.count, (g + 1) * q); s += part.lanes) part.load(src, xsn, s, left);
                copy_commit();
            }
        }
        if (k == 0) mail.opened();  // while the first line loads
        float m[V], d[V], v[V];
#pragma unroll
        for (int j = 0; j < V; ++j) m[j] = neg_inf<float>(), d[j] = 0;
        if (left > 0)
#pragma unroll
            for (int g = 0; g < SLAB_COPY_GROUPS; ++g) {  // each group's max as soon as it lands
                copy_wait_pending(SLAB_COPY_GROUPS - 1 - g);
                part.max(m, g * q, min(part.count, (g + 1) * q));
            }
        ld.load(m);  // the maxima as loaded (Ld's load is monotone)
        warp_columns_reduce(m, width, MaxOp());  // the warp's maxima
        if (left > 0)
            for (int s = part.lane; s < part.count; s += part.lanes) {
                unpack(load_pack<T, V>(part.at(s)), v);
                ld.load(v);
#pragma unroll
                for (int j = 0; j < V; ++j) d[j] += fast_exp(v[j] - Ep::ref(sum_base(m[j])));
            }
        warp_columns_reduce(d, width, SumOp());
        float c[V];
        cluster_columns<Ep>(m, d, c, part.pack, width, cols, rank, k, RB, mail, recv, fin);
        if (left > 0) {
            T* dst = y + offset(line, yso, ysn);
            for (int s = part.lane; s < part.count; s += part.lanes) {
                unpack(load_pack<T, V>(part.at(s)), v);
                ld.load(v);
#pragma unroll
                for (int j = 0; j < V; ++j) v[j] = Ep::template apply<false>(v[j], m[j], m[j], c[j]);
                store_row_pack<T, V>(dst + s * ysn, 0, left, v);
            }
        }
        // fin is written again only after the next line's first barrier; the slab places are
        // each walked by one thread.
    }
    if (k == 0) mail.opened();  // no line: still leave the cluster barrier
    mail.close();  // past the last line's barrier after its waits
}
#endif

}  // namespace csm
