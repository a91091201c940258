// Softmax over a strided axis, without a transposing copy, in one launch.
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
//               writes exp(x - m) / d.
//
// DRAM traffic: 1 read + 1 write per element when a group stays in L2 between the passes,
// 2 reads + 1 write otherwise, plus 16 bytes of partials per chunk per column.
#include "common.cuh"

namespace csm {

constexpr int COLUMN_BATCH = 4;  // steps each thread loads before using any

// This thread's packs at steps k, k + S, ... (COLUMN_BATCH of them, as bits; steps past k1,
// the end of its chunk, load -inf); `left` elements of the pack are inside the inner axis.
template <typename T, int V>
__device__ inline void load_steps(const T* xo, long long k, long long S, long long k1, long long xsn,
                                  long long left, Pack<T, V> (&p)[COLUMN_BATCH]) {
#pragma unroll
    for (int b = 0; b < COLUMN_BATCH; ++b) {
        const long long kb = k + b * S;
        p[b] = load_row_bits<T, V>(xo + (kb < k1 ? kb : 0) * xsn, 0, kb < k1 ? left : 0, neg_inf<compute_t<T>>());
    }
}

// Where a thread works: its pack of the strip, its step lane, its first column and the elements
// of its pack inside the inner axis.
struct StripLane {
    int pack, lane, lanes;
    long long strip, o, col, left;
    __device__ StripLane(long long line, long long strips, long long inner, int width, int V) {
        pack = threadIdx.x % width;
        lane = threadIdx.x / width;
        lanes = blockDim.x / width;
        o = line / strips;
        strip = line % strips;
        col = (strip * width + pack) * V;
        left = inner - col;
    }
};

template <typename T, int V, typename C>
__device__ inline void columns_read(const T* x, long long xso, long long xsn,
                                    const StripLane& at, long long k0, long long k1, long long c,
                                    long long chunks, int width, double* line_part,
                                    double* line_stats, unsigned* line_count, MD<C>* red, int* flag) {
    MD<C> s[V];
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = MD<C>::identity();
    const T* xo = x + at.o * xso + at.col;
    for (long long k = k0 + at.lane; k < k1; k += COLUMN_BATCH * at.lanes) {
        Pack<T, V> p[COLUMN_BATCH];
        load_steps<T, V>(xo, k, at.lanes, k1, xsn, at.left, p);
#pragma unroll
        for (int j = 0; j < V; ++j) {  // one rescale check per column per batch
            C w[COLUMN_BATCH];
#pragma unroll
            for (int b = 0; b < COLUMN_BATCH; ++b) w[b] = Traits<T>::in(p[b].v[j]);
            s[j].push_pack(w);
        }
    }
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

template <typename T, int V, typename C>
__device__ inline void columns_write(const T* x, T* y, long long xso, long long xsn, long long yso,
                                     long long ysn, const StripLane& at, long long k0, long long k1,
                                     long long chunks, const double* line_stats,
                                     const unsigned* line_count) {
    wait_count(line_count, unsigned(chunks + 1));  // chunks counted, then merged
    C m[V], scale[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
        const MD<C> s = get_md<C>(line_stats + 2 * (at.pack * V + j));
        m[j] = s.m;
        scale[j] = scale_of(s.d, C());
    }
    const T* xo = x + at.o * xso + at.col;
    T* yo = y + at.o * yso + at.col;
    for (long long k = k0 + at.lane; k < k1; k += COLUMN_BATCH * at.lanes) {
        Pack<T, V> p[COLUMN_BATCH];
        load_steps<T, V>(xo, k, at.lanes, k1, xsn, at.left, p);
#pragma unroll
        for (int b = 0; b < COLUMN_BATCH; ++b) {
            const long long kb = k + b * at.lanes;
            if (kb >= k1) break;
            C v[V];
            unpack(p[b], v);
#pragma unroll
            for (int j = 0; j < V; ++j) v[j] = fast_exp(v[j] - m[j]) * scale[j];
            store_row_pack<T, V>(yo + kb * ysn, 0, at.left, v);
        }
    }
}

// Blocks of at most COLUMNS_MAX_THREADS threads, `width` (a power of two) dividing the block.
constexpr int COLUMNS_MAX_THREADS = 256;

template <typename T, int V>
__global__ void __launch_bounds__(COLUMNS_MAX_THREADS, 3)
    softmax_columns(const T* x, T* y, void* work, long long outer, long long n, long long inner,
                    long long xso, long long xsn, long long yso, long long ysn, long long chunk,
                    long long chunks, long long per_group, int width) {
    using C = compute_t<T>;
    __shared__ MD<C> red[COLUMNS_MAX_THREADS];
    __shared__ unsigned long long slot;
    __shared__ int flag;
    const long long strips = (inner + (long long)width * V - 1) / ((long long)width * V);
    const long long lines = outer * strips, cols = (long long)width * V;
    const Schedule plan{lines, chunks, per_group, (lines + per_group - 1) / per_group};
    const Workspace ws(work, lines, cols);
    for (unsigned long long t = hand_over(prefetch_ticket(ws.ticket), &slot); t < plan.tickets();) {
        const unsigned long long next = prefetch_ticket(ws.ticket);
        long long line, c;
        bool write;
        if (plan.item(t, line, c, write)) {
            const StripLane at(line, strips, inner, width, V);
            const long long k0 = c * chunk, k1 = min(n, k0 + chunk);
            if (write)
                columns_write<T, V, C>(x, y, xso, xsn, yso, ysn, at, k0, k1, chunks,
                                       ws.stats + 2 * line * cols, ws.count + line);
            else
                columns_read<T, V, C>(x, xso, xsn, at, k0, k1, c, chunks, width,
                                      ws.part + 2 * line * chunks * cols, ws.stats + 2 * line * cols,
                                      ws.count + line, red, &flag);
        }
        t = hand_over(next, &slot);
    }
}

}  // namespace csm
