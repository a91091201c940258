// Fused softmax: the row is held on chip, so each element is read once and written once
// (2 * itemsize bytes of DRAM traffic per element, the floor for any softmax).
//
//   kernel (after Ld, Ep)      holds on chip                      passes over memory  used for
//   registers<T, V, P, R, W>   rows in registers                  1 read, 1 write     rows to 1024 lanes * P * V
//   short_spans<T, V, P, R, W> short rows in registers            1 read, 1 write     short rows off 16 bytes
//   flat<T, E, W>              a warp's run of rows, shared mem   1 read, 1 write     the same, back to back
//   tiles<T, V, R>             a warp's tile of rows, shared mem  1 read, 1 write     short rows
//   block<T, V>                a row, a block's shared memory     1 read, 1 write     rows to the opt-in limit
//   cluster<T, V, CL>          a row, CL blocks' shared memory    1 read, 1 write     rows to CL blocks' (sm_90)
//   spill<T, V, CL>            a row's first packs, CL blocks'    rest read twice     longer rows (sm_90)
//   grid<T, V>                 chunks of rows, every block's      1 read, 1 write     few rows, any GPU
//
// registers: W lanes (a power of two up to 32) share a short row, each holding P packs of V
// elements, R rows per lane group at once (several rows per warp when W < 32); R = W = 0 marks
// wide rows, a row a block of `width` lanes (a multiple of 32 up to 1024) that reduce through
// shared memory. short_spans: registers' short rows in the 16-byte packs of their aligned spans.
// flat: each warp stages a run of rows by 16-byte copies, works each row with W lanes of E values
// and stores the run by 16-byte stores. tiles: each warp stages R rows per lane group by
// asynchronous copies before reducing any. block: the row staged by asynchronous copies, then
// walked three times on chip (max, sum of exp, write). cluster: the blocks merge their slices'
// (max, sum) pairs through distributed shared memory, each writes its slice. spill: a cluster
// block holds its slice's first `held` packs and reads the rest twice (with the held packs in
// flight, then for the writes). grid: chunks of `chunk` elements over every block (all resident:
// a cooperative launch), each held from its read to its write; a block holds `ahead + lag`
// chunks, rows up to (lag + 1) chunks per resident block.
//
// Here m is the row's final max, so plain exp(x - Ep::ref(m)) already follows SciPy: padding and
// -inf entries give 0, and the special rows come out as ops.cuh says (softmax: a row whose max
// is -inf, +inf or whose sum is NaN all NaN).
//
// Rows are `cols` contiguous elements; row r starts at x + r * ldx (y + r * ldy). V is chosen
// by the dispatcher so that every row start is V-aligned; the last pack of a row may be partial.
// Or, packs of 16 bytes where x's and y's rows lie alike about 16-byte boundaries but are not on
// them: the short and wide rows in registers and the block, cluster and spill kernels walk each
// row in the packs of its aligned span (kernels/common.cuh, head_of).
// x may equal y (in place): every element is read before it is written, by the same thread, so
// the pointers are not declared __restrict__.
#include "common.cuh"
#include "ops.cuh"

#if !defined(CSM_FUSED_SCRATCH) || !defined(CSM_SPILL_THREADS) || !defined(CSM_SHORT_ROWS_THREADS) || \
    !defined(CSM_FLAT_THREADS)
#error "softmax_fused.cu needs -DCSM_FUSED_SCRATCH, -DCSM_SPILL_THREADS, -DCSM_SHORT_ROWS_THREADS and -DCSM_FLAT_THREADS from the loader"
#endif

namespace csm {

// exp(v - m[r]) in place for RR rows of P packs, and each row's sum d[r]; SHIFTED: by
// exp_shifted (every m[r] passes shift_ok).
template <bool SHIFTED, int RR, int P, int V, typename C>
__device__ inline void exp_rows(C (&v)[RR][P][V], const C (&m)[RR], C (&d)[RR]) {
#pragma unroll
    for (int r = 0; r < RR; ++r) {
        const C s = shift_of(m[r]);
        d[r] = 0;
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
            for (int j = 0; j < V; ++j) {
                v[r][p][j] = exp_by<SHIFTED>(v[r][p][j], m[r], s);
                d[r] += v[r][p][j];
            }
    }
}

// Each row's sum d[r] for RR rows of P packs: Ep's terms in place of v (exp_rows; SHIFTED: by
// exp_shifted, every m[r] passes shift_ok) where Ep::TERMS, else exp(v - Ep::ref(m[r])) with v
// kept.
template <class Ep, bool SHIFTED, int RR, int P, int V, typename C>
__device__ inline void sum_rows(C (&v)[RR][P][V], const C (&m)[RR], C (&d)[RR]) {
    if constexpr (Ep::TERMS) {
        exp_rows<SHIFTED>(v, m, d);
    } else {
#pragma unroll
        for (int r = 0; r < RR; ++r) {
            const C base = Ep::ref(m[r]);
            d[r] = 0;
#pragma unroll
            for (int p = 0; p < P; ++p)
#pragma unroll
                for (int j = 0; j < V; ++j) d[r] += fast_exp(v[r][p][j] - base);
        }
    }
}

// A pack's outputs at the places a masking load left out (Ld::MASKS; bit j of `out()`: element
// j): Ep::masked() there where the row's max m is not finite (a row left out whole, or holding
// +inf) or its constant k is NaN (a row holding NaN, which the max passes over); elsewhere their
// -inf already gave it.
template <class Ld, class Ep, int V, typename C, class Out> __device__ inline void masked_writes(C (&v)[V], C m, C k, Out&& out) {
    if constexpr (Ld::MASKS) {
        if (!(fabs(m) < -neg_inf<C>()) || k != k) {
            const unsigned left = out();
#pragma unroll
            for (int j = 0; j < V; ++j)
                if (left >> j & 1) v[j] = Ep::template masked<C>();
        }
    }
}

// Rows of up to 32 lanes (W of them, known at compile time so the shuffles unroll), R rows per
// lane group per iteration, blocks of up to CSM_SHORT_ROWS_THREADS threads. The loop runs per
// warp, not per row: every lane runs the same iterations, so the shuffles stay converged. A group
// takes R rows per iteration (rows g, g + groups, ...), all loads issued first, and loads the
// next iteration's packs, as bits, before working on this one's, so loads stay in flight while
// it computes.
// SPAN: rows in the 16-byte packs of their aligned spans (head_of), W * P * V >= cols + V - 1;
// a row's head is taken from x's row for the loads and from y's (the same) for the stores.
template <class Ld, class Ep, typename T, int V, int P, int R, int W, bool SPAN = false>
__device__ inline void short_rows(const Ld& ld, const T* x, T* y, long long rows, int cols, long long ldx,
                                  long long ldy) {
    using C = compute_t<T>;
    const int sub = threadIdx.x & (W - 1);
    constexpr int groups = 32 / W;  // rows per warp per iteration (times R)
    const int group = (threadIdx.x & 31) / W;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const long long stride = ((long long)gridDim.x * blockDim.x) / 32 * groups * R;
    // Row r of an iteration from row `first` (a row past the end: the last row again, loaded but
    // never written) and its head in x.
    auto row_of = [&](long long first, int r) { return min(first + (long long)r * groups + group, rows - 1); };
    auto head_in = [&](long long row) { return SPAN ? head_of(x + row * ldx) : 0; };
    auto load = [&](long long first, word_t<T, V>(&raw)[R][P], side_t<Ld, V>(&side)[R][P]) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const long long row = row_of(first, r);
            const int head = head_in(row), end = head + cols;
            const T* xr = x + row * ldx - head;
            const bool whole = SPAN && span_whole<T>(row, rows, ldx);
            const unsigned char* mr = mask_row(ld, row);
#pragma unroll
            for (int p = 0; p < P; ++p) {
                const int c = (p * W + sub) * V;
                raw[r][p] = SPAN ? load_span_word<T, V>(xr, c, end, head, whole)
                                 : load_row_word<T, V>(xr, c, end, neg_inf<C>());
                side[r][p] = fetch_side<Ld, V>(ld, mr, c - head, cols);
            }
        }
    };
    word_t<T, V> raw[R][P];  // as words: see load_row_word
    side_t<Ld, V> side[R][P];
    long long first = warp * groups * R;
    if (first < rows) load(first, raw, side);
    static_assert(P * V <= 32, "a row's left-out bits in a word a lane");
    for (; first < rows; first += stride) {
        C v[R][P][V], m[R], d[R];
        unsigned out[R] = {};  // left out by the load: bit p * V + j of pack p's element j
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int head = head_in(row_of(first, r));
#pragma unroll
            for (int p = 0; p < P; ++p) {
                unpack_word<T, V>(raw[r][p], v[r][p]);
                out[r] |= load_side(ld, v[r][p], side[r][p]) << (p * V);
                if constexpr (SPAN) mask_span<V>(v[r][p], (p * W + sub) * V, head, head + cols);
            }
        }
        load(first + stride, raw, side);  // past the end: the last row again, unused
#pragma unroll
        for (int r = 0; r < R; ++r) {
            m[r] = neg_inf<C>();
#pragma unroll
            for (int p = 0; p < P; ++p)
#pragma unroll
                for (int j = 0; j < V; ++j) m[r] = fmax(m[r], v[r][p][j]);
        }
        lanes_reduce_rows<W>(m, MaxOp());
        // exp in place and the sums: at most 32 terms per lane, then a tree over at most 32
        // lanes, so a float sum stays far inside 1e-5. Padding (-inf) gives 0.
        bool shifted = true;
#pragma unroll
        for (int r = 0; r < R; ++r) shifted = shifted && shift_ok(m[r]);
        with_shift(Ep::SHIFTS && shifted, [&](auto sh) { sum_rows<Ep, decltype(sh)::value>(v, m, d); });
        lanes_reduce_rows<W>(d, SumOp());
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const long long row = first + (long long)r * groups + group;
            if (row >= rows) break;
            const C k = Ep::constant(m[r], d[r]);
            const int head = SPAN ? head_of(y + row * ldy) : 0, end = head + cols;
            T* yr = y + row * ldy - head;
#pragma unroll
            for (int p = 0; p < P; ++p) {
#pragma unroll
                for (int j = 0; j < V; ++j) v[r][p][j] = apply_kept<Ep>(v[r][p][j], m[r], k);
                masked_writes<Ld, Ep>(v[r][p], m[r], k, [&] { return out[r] >> (p * V); });
                store_row_pack<T, V, SPAN>(yr, (p * W + sub) * V, end, v[r][p], head);
            }
        }
    }
}

// Rows of more than 32 lanes: a row a block (lanes = blockDim.x, a multiple of 32), rows
// blockIdx.x, blockIdx.x + gridDim.x, ...; lane t holds packs t, t + lanes, ... (P of them); the
// two reductions meet at one barrier each. SPAN: rows in their aligned spans' 16-byte packs
// (lanes * P * V >= cols + V - 1), whose edge packs half types read whole and float32 by
// elements (whole ones spill at its 32 registers) [kernels-2].
template <class Ld, class Ep, typename T, int V, int P, bool SPAN>
__device__ inline void wide_rows(const Ld& ld, const T* x, T* y, long long rows, int cols, long long ldx,
                                 long long ldy) {
    using C = compute_t<T>;
    constexpr bool WHOLE = SPAN && sizeof(T) == 2;
    __shared__ C scratch[2][32];
    const int lanes = int(blockDim.x), t = int(threadIdx.x);
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const int head = SPAN ? head_of(x + row * ldx) : 0, end = head + cols;
        const T* xr = x + row * ldx - head;
        const bool whole = WHOLE && span_whole<T>(row, rows, ldx);
        C v[1][P][V], m[1], d[1];
        const unsigned char* mr = mask_row(ld, row);
        word_t<T, V> raw[P];
        side_t<Ld, V> side[P];
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const int c = (p * lanes + t) * V;
            raw[p] = WHOLE ? load_span_word<T, V>(xr, c, end, head, whole)
                           : load_row_word<T, V, SPAN>(xr, c, end, neg_inf<C>(), head);
            side[p] = fetch_side<Ld, V>(ld, mr, c - head, cols);
        }
#pragma unroll
        for (int p = 0; p < P; ++p) {
            unpack_word<T, V>(raw[p], v[0][p]);
            load_side(ld, v[0][p], side[p]);
            if constexpr (WHOLE) mask_span<V>(v[0][p], (p * lanes + t) * V, head, end);
        }
        C mine = neg_inf<C>();
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
            for (int j = 0; j < V; ++j) mine = fmax(mine, v[0][p][j]);
        m[0] = block_reduce_once(mine, scratch[0], MaxOp());
        // At most 16 terms per lane, then trees over at most 1024 lanes: a float sum stays far
        // inside 1e-5. Padding (-inf) gives 0.
        with_shift(Ep::SHIFTS && shift_ok(m[0]), [&](auto sh) { sum_rows<Ep, decltype(sh)::value>(v, m, d); });
        const C k = Ep::constant(m[0], block_reduce_once(d[0], scratch[1], SumOp()));
        T* yr = y + row * ldy - head;
#pragma unroll
        for (int p = 0; p < P; ++p) {
#pragma unroll
            for (int j = 0; j < V; ++j) v[0][p][j] = apply_kept<Ep>(v[0][p][j], m[0], k);
            masked_writes<Ld, Ep>(v[0][p], m[0], k, [&] {  // fetched again: registers are few here
                return left_out<Ld, V>(ld, mask_row(ld, row), (p * lanes + t) * V - head, cols);
            });
            store_row_pack<T, V, SPAN>(yr, (p * lanes + t) * V, end, v[0][p], head);
        }
    }
}

// Blocks of wide rows resident an SM by their bounds: two of 1024 threads (at most 32 registers
// a thread) for 16-byte packs of types of up to 4 bytes, 16 values a thread, else one: fewer
// registers spill [kernels-3]. A masking load's rows hold 32 values a thread [registers-13].
template <typename T, int V, int P> constexpr int WIDE_BLOCKS = sizeof(T) < 8 && sizeof(T) * V == 16 && P * V <= 16 ? 2 : 1;

// Wide rows of 16-byte packs walk rows in their spans (aligned rows: head 0), but half types'
// aligned rows take the plain path by a branch per launch: faster there, slower for float32 [kernels-4].
template <typename T> constexpr bool WIDE_PLAIN = sizeof(T) == 2;

// R >= 1: short rows (short_rows), W lanes a row, blocks of up to CSM_SHORT_ROWS_THREADS threads.
// R = 0 (W = 0): wide rows (wide_rows), `width` lanes a row and a block, at most 1024 (rows of at
// most 1024 * P * V elements, so column offsets fit an int). Short rows state no blocks an SM (0):
// ptxas lays out their code better than with an explicit 1 [kernels-5].
template <class Ld, class Ep, typename T, int V, int P, int R, int W>
__global__ void __launch_bounds__(R ? CSM_SHORT_ROWS_THREADS : 1024, R ? 0 : WIDE_BLOCKS<T, V, P>)
    registers(const T* x, T* y, long long rows, int cols, long long ldx, long long ldy,
                      int width, const Ld ld) {
    static_assert((R == 0) == (W == 0), "short rows name their lanes, wide rows take `width`");
    if constexpr (R == 0) {
        if (int(blockDim.x) != width) __trap();  // a row a block
        if constexpr (SPANS<T, V> && WIDE_PLAIN<T>) {
            if (in_spans(x, y, ldx, ldy)) return wide_rows<Ld, Ep, T, V, P, true>(ld, x, y, rows, cols, ldx, ldy);
            return wide_rows<Ld, Ep, T, V, P, false>(ld, x, y, rows, cols, ldx, ldy);
        }
        if (SPANS<T, V> && !rows_alike(x, y, ldx, ldy)) __trap();
        wide_rows<Ld, Ep, T, V, P, SPANS<T, V>>(ld, x, y, rows, cols, ldx, ldy);
    } else {
        short_rows<Ld, Ep, T, V, P, R, W>(ld, x, y, rows, cols, ldx, ldy);
    }
}

// Short rows (as registers' R >= 1) in the 16-byte packs of their aligned spans: launched by the
// policy only for rows off 16-byte boundaries whose x and y rows lie alike (a trap otherwise), so
// aligned short rows keep registers' code. `width`: the registers kernel's arguments (W is the
// lanes).
template <class Ld, class Ep, typename T, int V, int P, int R, int W>
__global__ void __launch_bounds__(CSM_SHORT_ROWS_THREADS, 0)
    short_spans(const T* x, T* y, long long rows, int cols, long long ldx, long long ldy,
                        int width, const Ld ld) {
    static_assert(SPANS<T, V> && R >= 1 && W >= 1, "short rows in 16-byte packs");
    if (width != W || !rows_alike(x, y, ldx, ldy)) __trap();
    short_rows<Ld, Ep, T, V, P, R, W, true>(ld, x, y, rows, cols, ldx, ldy);
}

// A slice of a row staged in shared memory as bits, walked by one thread: its packs are
// first, first + stride, ... below count. Whole packs arrive by asynchronous copies (all of the
// thread's in flight at once, holding no registers), the pack that straddles the row end by
// loads, -inf past it. Each thread walks exactly the packs it staged, so after copy_wait() it
// needs no barrier. Three walks on chip follow: max, sum of exp, write. SPAN: the slice is one
// of a row's aligned span, whose elements before column `lo` of the slice are not the row's
// (-inf, not written). Ld: the values' load; Ep: the writes' op. A masking load (Ld::MASKS)
// stages the slice's keep bytes after its packs (load_keep; element c of the slice is the row's
// column c - lo); the max walk makes the values it leaves out -inf in shared memory, so the
// later walks take the values as they are.
template <class Ld, class Ep, typename T, int V, bool SPAN = false> struct Staged {
    using C = compute_t<T>;
    T* s;
    int first, stride, count;
    long long lo = 0;

    // x: the slice's first element in global memory; left: row elements from there on.
    __device__ void load(const T* x, long long left) const {
        if constexpr (SPAN) {
            // The whole packs' copies first, then the packs that straddle the row's start or
            // end (at most two a row): their element loads are waited for, and would hold back
            // the copies issued after them.
            for (int k = first; k < count; k += stride) {
                const long long c = (long long)k * V;
                if (lo <= c && c + V <= left) copy_async<sizeof(T) * V>(s + c, x + c);
            }
            for (int k = first; k < count; k += stride) {
                const long long c = (long long)k * V;
                if (lo > c || c + V > left) stage_pack<T, V, SPAN>(s + c, x + c, left - c, lo - c);
            }
        } else {
            for (int k = first; k < count; k += stride) {
                const long long c = (long long)k * V;
                stage_pack<T, V>(s + c, x + c, left - c);
            }
        }
    }
    // MASKS: the row's keep bytes beside the packs, `r` the row's mask of `cols` columns.
    __device__ void load_keep(const Ld& ld, const unsigned char* r, long long cols) const {
        if constexpr (Ld::MASKS)
            for (int k = first; k < count; k += stride) ld.template stage<V>(keep(k), r, (long long)k * V - lo, cols);
    }
    // The maximum of the packs' bits, loaded (Ld's load is monotone); MASKS: of the packs as Ld
    // loads them, stored back where it left some out.
    __device__ C max(const Ld& ld) const {
        C m = neg_inf<C>();
        if constexpr (Ld::MASKS) {
            for (int k = first; k < count; k += stride) {
                Pack<T, V> p = load_pack<T, V>(s + k * V);
                if (Ld::apply_bits(p, keep_word(k))) store_pack<T, V>(s + k * V, p);
                m = fmax(m, pack_max<T, V>(p));
            }
            return m;
        } else {
            for (int k = first; k < count; k += stride) m = fmax(m, pack_max<T, V>(load_pack<T, V>(s + k * V)));
            return one(ld, m);
        }
    }
    // The slice's sum of exp(x - Ep::ref(m)), and its writes, Ep's outputs with constant k.
    // SHIFT: by exp_shifted where shift_ok and Ep::SHIFTS, which is exact only where the slice's
    // sum and writes use the same m (or the writes' constant is Ep::shifted_writes).
    template <bool SHIFT> __device__ C sum(const Ld& ld, C m) const {
        const C base = Ep::ref(m);
        return with_shift(SHIFT && Ep::SHIFTS && shift_ok(base), [&](auto sh) { return sum_by<decltype(sh)::value>(ld, base); });
    }
    template <bool SHIFT> __device__ void write(const Ld& ld, T* y, long long left, C m, C k) const {
        with_shift(SHIFT && Ep::SHIFTS && shift_ok(m), [&](auto sh) { write_by<decltype(sh)::value>(ld, y, left, m, k); });
    }

    // Double keeps each term of its sum, exp(x - m), in place of x (sum_kept), and its writes
    // take the kept terms (write_kept): one exp of double an element (some twenty FP64
    // instructions) in place of two [kernels-6]. The same bits as sum<false> and, where the
    // constant is that of m, write<false>.
    __device__ C sum_kept(const Ld& ld, C m) const {
        static_assert(sizeof(T) == sizeof(C), "kept terms are stored exactly, in the compute type");
        static_assert(Ep::TERMS, "the writes take the terms");
        C part = 0;
        each(ld, [&](int k, C(&v)[V]) {
#pragma unroll
            for (int j = 0; j < V; ++j) {
                v[j] = fast_exp(v[j] - m);
                part += v[j];
            }
            store_pack<T, V>(s + k * V, pack_out<T, V>(v));
        });
        return part;
    }
    // m, k: the row's max and constant (masked_writes).
    __device__ void write_kept(T* y, long long left, C c, C m, C k) const {
        each(Plain(), [&](int p, C(&v)[V]) {  // terms, loaded already
#pragma unroll
            for (int j = 0; j < V; ++j) v[j] = Ep::apply_term(v[j], c);
            masked_writes<Ld, Ep>(v, m, k, [&] { return left_at(p); });
            store_row_pack<T, V, SPAN>(y, (long long)p * V, left, v, lo);
        });
    }

  private:
    // MASKS: pack k's keep bytes, and the bits of the elements they leave out.
    __device__ unsigned char* keep(int k) const { return reinterpret_cast<unsigned char*>(s + (long long)count * V) + k * V; }
    __device__ typename Bytes<V>::type keep_word(int k) const { return *reinterpret_cast<const typename Bytes<V>::type*>(keep(k)); }
    __device__ unsigned left_at(int k) const {
        if constexpr (Ld::MASKS)
            return Ld::template left_out<V>(keep_word(k));
        else
            return 0;
    }
    // f(k, v) for each of this thread's packs k, v its values in the compute type as L loads them
    // (MASKS: as the max walk left them).
    template <class L, typename F> __device__ void each(const L& ld, F&& f) const {
        for (int k = first; k < count; k += stride) {
            C v[V];
            unpack(load_pack<T, V>(s + k * V), v);
            if constexpr (!L::MASKS) ld.load(v);
            f(k, v);
        }
    }
    template <bool SHIFTED> __device__ C sum_by(const Ld& ld, C m) const {
        const C shift = shift_of(m);
        C part = 0;
        each(ld, [&](int, C(&v)[V]) {
#pragma unroll
            for (int j = 0; j < V; ++j) part += exp_by<SHIFTED>(v[j], m, shift);
        });
        return part;
    }
    template <bool SHIFTED> __device__ void write_by(const Ld& ld, T* y, long long left, C m, C c) const {
        const C shift = shift_of(m);
        each(ld, [&](int k, C(&v)[V]) {
            finish<Ep, SHIFTED>(v, m, shift, c);
            masked_writes<Ld, Ep>(v, m, c, [&] { return left_at(k); });
            store_row_pack<T, V, SPAN>(y, (long long)k * V, left, v, lo);
        });
    }
};

// Short rows staged in shared memory: `width` lanes (a power of two <= 32) share a row, and a
// warp stages R rows per lane group (32 / width groups) in its own part of the dynamic shared
// memory before any is reduced, so the whole tile of rows is in flight at once without holding
// registers. Shuffles only; the loop runs per warp, so they stay converged.
template <class Ld, class Ep, typename T, int V, int R>
__global__ void tiles(const T* x, T* y, long long rows, long long cols, long long ldx,
                              long long ldy, int width, const Ld ld) {
    using C = compute_t<T>;
    extern __shared__ __align__(16) unsigned char smem[];
    const int packs = int((cols + V - 1) / V);
    const int lane = threadIdx.x & 31, sub = lane & (width - 1);
    const int groups = 32 / width, group = lane / width;
    T* tile = reinterpret_cast<T*>(smem) + (long long)(threadIdx.x >> 5) * groups * R * packs * V;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long first = warp * groups * R; first < rows; first += warps * groups * R) {
        // Row r of this lane group's R; a row past the end stages nothing (count 0).
        auto row_of = [&](int r) { return first + (long long)r * groups + group; };
        auto staged = [&](int r) {
            return Staged<Ld, Ep, T, V>{tile + (group * R + r) * packs * V, sub, width, row_of(r) < rows ? packs : 0};
        };
        // Not unrolled: the copies hold no registers, so unrolling would only add them.
#pragma unroll 1
        for (int r = 0; r < R; ++r) staged(r).load(x + min(row_of(r), rows - 1) * ldx, cols);
        copy_wait();
#pragma unroll 1
        for (int r = 0; r < R; ++r) {
            const Staged<Ld, Ep, T, V> st = staged(r);
            const C m = group_reduce(st.max(ld), width, MaxOp());
            // At most 32 terms per lane and 5 shuffle levels: a float sum stays far inside 1e-5.
            const C d = group_reduce(st.template sum<true>(ld, m), width, SumOp());
            st.template write<true>(ld, y + min(row_of(r), rows - 1) * ldy, cols, m, Ep::constant(m, d));
        }
    }
}

// Short rows that lie back to back in x and in y (row r at r * cols; ldx = ldy = cols, or a
// single row), x's and y's alike about 16-byte boundaries, rows off them: a warp's `tile`
// consecutive rows are one run of memory, staged whole. The warp copies the run's 16-byte packs
// into its part of the dynamic shared memory (asynchronous copies; element loads for a pack
// that passes either end of x, so nothing outside x is read), works each row from there with W
// lanes (a power of two up to 32; E elements a lane in registers, W * E >= cols; 32 / W rows at
// a time), writes the results over the staged elements, and stores the run's packs: the whole
// ones by 16-byte stores, the first and last, which the neighbouring runs share, element by
// element. The bytes of the neighbours' rows in those two packs are read (whole copies) but
// never used or written, so x may equal y. `tile`: a multiple of 32 / W.
template <class Ld, class Ep, typename T, int E, int W>
__global__ void __launch_bounds__(CSM_FLAT_THREADS) flat(const T* x, T* y, long long rows, int cols, long long ldx,
                                                         long long ldy, int tile, const Ld ld) {
    using C = compute_t<T>;
    constexpr int Q = 16 / sizeof(T);  // elements a 16-byte pack
    extern __shared__ __align__(16) unsigned char smem[];
    if ((rows > 1 && (ldx != cols || ldy != cols)) || !rows_alike(x, y, ldx, ldy) || tile % (32 / W)) __trap();
    const int lane = threadIdx.x & 31, sub = lane & (W - 1), group = lane / W;
    const int cap = (tile * cols + 2 * Q - 2) / Q;  // packs of a warp's run, at most
    T* s = reinterpret_cast<T*>(smem) + (long long)(threadIdx.x >> 5) * cap * Q;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const long long total = rows * cols;
    for (long long r0 = warp * tile; r0 < rows; r0 += warps * tile) {
        const int n = int(min((long long)tile, rows - r0));  // rows of this run
        const long long a = r0 * cols, b = a + (long long)n * cols;  // the run: x[a], ..., x[b - 1]
        const int head = head_of(x + a);
        const long long base = a - head;  // the run's first 16-byte boundary
        const int packs = int((b - base + Q - 1) / Q);
        for (int k = lane; k < packs; k += 32) {
            const long long c = base + (long long)k * Q;
            stage_pack<T, Q, true>(s + k * Q, x + c, total - c, -c);
        }
        copy_wait();
        __syncwarp();
        for (int i0 = 0; i0 < n; i0 += 32 / W) {
            const int i = i0 + group;  // past n: -inf throughout, nothing written
            T* row = s + head + i * cols;
            C v[1][E][1], m[1] = {neg_inf<C>()}, d[1];  // one row of E packs of one (exp_rows)
#pragma unroll
            for (int j = 0; j < E; ++j) {
                const int c = sub + j * W;
                v[0][j][0] = i < n && c < cols ? Traits<T>::in(bits(row)[c]) : neg_inf<C>();
                ld.load(v[0][j]);
                m[0] = fmax(m[0], v[0][j][0]);
            }
            lanes_reduce_rows<W>(m, MaxOp());
            // At most 32 terms per lane and 5 shuffle levels: a float sum stays far inside 1e-5.
            with_shift(Ep::SHIFTS && shift_ok(m[0]), [&](auto sh) { sum_rows<Ep, decltype(sh)::value>(v, m, d); });
            lanes_reduce_rows<W>(d, SumOp());
            const C k = Ep::constant(m[0], d[0]);
#pragma unroll
            for (int j = 0; j < E; ++j) {
                const int c = sub + j * W;
                if (i < n && c < cols) bits(row)[c] = Traits<T>::out(apply_kept<Ep>(v[0][j][0], m[0], k));
            }
        }
        __syncwarp();
        for (int k = lane; k < packs; k += 32) {
            const long long c = base + (long long)k * Q;
            if (c >= a && c + Q <= b) {
                store_pack_global<T, Q>(y + c, load_pack<T, Q>(s + k * Q));
            } else {
#pragma unroll
                for (int j = 0; j < Q; ++j)
                    if (c + j >= a && c + j < b) bits(y)[c + j] = bits(s)[k * Q + j];
            }
        }
        __syncwarp();  // the stores' reads of the run before the next run's copies
    }
}

// Dynamic shared memory of the block and cluster kernels: FUSED_SCRATCH bytes (32 acc_t of
// reduction scratch, 2 for the cluster's merged pair, 2 x 16 x 2 that the cluster's blocks send
// each other, 2 barriers that count them), then the block's slice of the row (its packs, as
// bits), then, for a masking load, the slice's keep bytes (a byte an element).
[[maybe_unused]] constexpr int FUSED_SCRATCH = CSM_FUSED_SCRATCH;
static_assert(FUSED_SCRATCH >= (32 + 2 + 2 * 16 * 2) * sizeof(acc_t) + 2 * 8, "FUSED_SCRATCH holds scratch, pairs and barriers");

// A cluster block with a spill: blocks of exactly SPILL_THREADS threads (walk_run's steps), two
// an SM (at most 64 registers a thread).
[[maybe_unused]] constexpr int SPILL_THREADS = CSM_SPILL_THREADS;

// exp(base - m): what turns a block's kept terms exp(x - base) (base = sum_base(mine), mine the
// block's max) into exp(x - m) for the row's max m; 0 where the block held only -inf (its terms
// are 0, and stay 0 unless the scale is inf or NaN, which makes the row NaN anyway).
template <typename C> __device__ inline C kept_fix(C mine, C base, C m) {
    return mine == neg_inf<C>() ? C(0) : fast_exp(base - m);
}

// Rows first, first + step, ... with this block holding slice `rank` of CL of each row's packs.
// A block reduces its slice to (max, sum of exp against that max); a cluster merges the blocks'
// pairs once a row, sent to each other (Mail: no cluster barrier a row). SPILL: the block holds
// the first `held` packs of its slice on chip; the rest (its spill, fewer than 2^31 elements) is
// read from global memory while the held packs load, as a running (m, d), and read again for its
// writes. SPAN: rows in the 16-byte packs of their aligned spans (in_spans), cut as rows of
// cols + V - 1 elements.
template <class Ld, class Ep, typename T, int V, int CL, int SPILL, bool SPAN>
__device__ inline void fused_rows_in(const Ld& ld, const T* x, T* y, long long rows, long long cols, long long ldx,
                                     long long ldy, long long first, long long step, int rank, int held) {
    static_assert(CL <= 16, "FUSED_SCRATCH receives pairs from up to 16 blocks");
    static_assert(!(Ld::MASKS && SPILL), "a spill's packs are not staged with their keep bytes");
    using C = compute_t<T>;
    extern __shared__ __align__(16) unsigned char smem[];
    acc_t* scratch = reinterpret_cast<acc_t*>(smem);
    C* cscratch = reinterpret_cast<C*>(smem);
    const Mail<CL> mail{reinterpret_cast<unsigned long long*>(scratch + 98)};
    const long long packs = (cols + (SPAN ? V - 1 : 0) + V - 1) / V;
    const int per = int((packs + CL - 1) / CL);
    const long long k0 = (long long)rank * per;
    const int mine = int(max(0LL, min(packs, k0 + per) - k0));  // the slice's packs in the row
    const int kept = SPILL ? min(mine, held) : mine;  // packs held on chip
    // Elements of each row from this slice on (SPAN: of its span, head more), and of its spill.
    auto spill_of = [&](long long left) {
        return SPILL ? int(max(0LL, min(left, (long long)mine * V) - (long long)kept * V)) : 0;
    };
    const long long left0 = cols - k0 * V;
    const int spill0 = spill_of(left0);
    const Staged<Ld, Ep, T, V, SPAN> st0{reinterpret_cast<T*>(smem + FUSED_SCRATCH), int(threadIdx.x),
                                 int(blockDim.x), kept};
    if constexpr (CL > 1) mail.open();
    int k = 0;  // rows done
    for (long long row = first; row < rows; row += step, ++k) {
        const long long head = SPAN ? head_of(x + row * ldx) : 0;
        const long long left = SPAN ? left0 + head : left0;
        const int spill = SPAN ? spill_of(left) : spill0;
        Staged<Ld, Ep, T, V, SPAN> st = st0;
        st.lo = head - k0 * V;
        st.load(x + row * ldx + k0 * V - head, left);  // one DRAM read per element
        st.load_keep(ld, mask_row(ld, row), cols);
        if constexpr (CL > 1)
            if (k == 0) mail.opened();  // while the first row loads
        MD<C> sp = MD<C>::identity();
        const long long xs = row * ldx + (k0 + kept) * V - head;  // the spill's first element
        if constexpr (SPILL) walk_run<Ld, SPILL_THREADS, T, V>(ld, x + xs, spill, [&](int, C(&v)[V], bool) { sp.template push_pack<Ep>(v); });
        copy_wait();
        C m = block_reduce(SPILL ? fmax(st.max(ld), sp.m) : st.max(ld), cscratch, MaxOp());
        // At most ~120 terms per thread in float, then the trees in double. A slice of only
        // -inf sums against 0 (it adds (-inf, 0) to the cluster's merge). Without a spill, the
        // terms by exp_shifted against the block's max (faster; the spill kernel slower with
        // them) [kernels-7]: a cluster's block (whose writes take the cluster's max) turns its sum
        // into one of exp(x - m) by shift_fix.
        constexpr bool SHIFT = !SPILL && Ep::SHIFTS, KEEP = !SPILL && sizeof(C) == 8 && Ep::TERMS;  // KEEP: sum_kept
        const C mine_m = m, base = sum_base(m);
        C part;
        if constexpr (KEEP)
            part = st.sum_kept(ld, base);
        else
            part = st.template sum<SHIFT>(ld, base);
        acc_t dt = acc_t(CL > 1 && SHIFT ? part * shift_fix(base) : part);
        if constexpr (SPILL) dt += sum_at(sp.m, sp.d, m);
        acc_t d = block_reduce(dt, scratch, SumOp());
        if constexpr (CL > 1) {
            const MD<C> s = cluster_merge<CL>(m, d, mail, k, unsigned(rank), scratch + 34, scratch + 32);
            m = s.m;
            d = s.d;
        }
        // The held packs (SHIFT: by exp_shifted against m, Ep::shifted_writes in a cluster; a
        // lone block's shift cancels against its sum's).
        const C c = Ep::constant(m, d);
        if constexpr (KEEP)  // the kept terms exp(x - base) times exp(base - m): 1 where base is m
            st.write_kept(y + row * ldy + k0 * V - head, left, c * kept_fix(mine_m, base, m), m, c);
        else
            st.template write<SHIFT>(ld, y + row * ldy + k0 * V - head, left, m, CL > 1 && SHIFT ? Ep::shifted_writes(m, c) : c);
        if constexpr (SPILL)  // the spill read again
            write_run<Ld, Ep, false, SPILL_THREADS, T, V>(ld, x + xs, y + (row * ldy + (k0 + kept) * V - head), spill, m, c);
    }
    if constexpr (CL > 1) {
        if (k == 0) mail.opened();  // no row: still leave the cluster barrier
        mail.close();  // past cluster_merge's last barrier
    }
}

// fused_rows_in on the span path where the rows are off 16-byte boundaries, else on the plain one.
template <class Ld, class Ep, typename T, int V, int CL, int SPILL>
__device__ inline void fused_rows(const Ld& ld, const T* x, T* y, long long rows, long long cols, long long ldx,
                                  long long ldy, long long first, long long step, int rank, int held) {
    if constexpr (SPANS<T, V>)
        if (in_spans(x, y, ldx, ldy))
            return fused_rows_in<Ld, Ep, T, V, CL, SPILL, true>(ld, x, y, rows, cols, ldx, ldy, first, step, rank, held);
    fused_rows_in<Ld, Ep, T, V, CL, SPILL, false>(ld, x, y, rows, cols, ldx, ldy, first, step, rank, held);
}

template <class Ld, class Ep, typename T, int V>
__global__ void block(const T* x, T* y, long long rows, long long cols, long long ldx, long long ldy,
                      const Ld ld) {
    fused_rows<Ld, Ep, T, V, 1, 0>(ld, x, y, rows, cols, ldx, ldy, blockIdx.x, gridDim.x, 0, 0);
}

#if __CUDA_ARCH__ >= 900  // __cluster_dims__ is an error before sm_90
template <class Ld, class Ep, typename T, int V, int CL>
__global__ void __cluster_dims__(CL, 1, 1)
    cluster(const T* x, T* y, long long rows, long long cols, long long ldx, long long ldy,
            const Ld ld) {
    fused_rows<Ld, Ep, T, V, CL, 0>(ld, x, y, rows, cols, ldx, ldy, blockIdx.x / CL, gridDim.x / CL,
                            cluster_rank<CL>(), 0);
}

// A kernel of its own: cluster with launch bounds of 1024 threads, two an SM, got 12 more
// instructions in its bfloat16 write loop from ptxas (one an SM: 39 registers instead of 32);
// without bounds, a spilling block may pass 64 registers and lose its SM's second block.
template <class Ld, class Ep, typename T, int V, int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(SPILL_THREADS, 2)
    spill(const T* x, T* y, long long rows, long long cols, long long ldx, long long ldy, int held,
          const Ld ld) {
    if (blockDim.x != SPILL_THREADS) __trap();  // walk_run steps by SPILL_THREADS packs
    fused_rows<Ld, Ep, T, V, CL, 1>(ld, x, y, rows, cols, ldx, ldy, blockIdx.x / CL, gridDim.x / CL,
                            cluster_rank<CL>(), held);
}
#endif

// Rows spread over the GPU, every element read once: all blocks resident at once (a
// cooperative launch), ticket t = (row t / chunks, chunk t % chunks), block b taking tickets b,
// b + gridDim.x, ... in turn, each into one of `ahead + lag` chunk slots of its shared memory.
// At its step i a block waits for ticket i's copy (issued `ahead` steps before), publishes the
// chunk's (m, d), then writes ticket i - lag from its slot once that row's chunks are all
// counted, and copies ticket i + ahead into the slot just written. A block waits only for a row
// `lag` steps behind its own newest publication; with chunks <= (lag + 1) * gridDim.x that row
// holds none of the block's own unpublished tickets, and every ticket of it is older than the
// oldest unpublished ticket anywhere, so every wait ends. The launcher checks that, ahead >= 1
// and at least two warps a block (warp 1 polls).
template <class Ld, class Ep, typename T, int V>
__global__ void __launch_bounds__(1024)
    grid(const T* x, T* y, void* work, long long rows, long long cols, long long ldx,
                 long long ldy, long long chunk, long long chunks, int ahead, int lag, const Ld ld) {
    using C = compute_t<T>;
    extern __shared__ __align__(16) unsigned char smem[];
    acc_t* scratch = reinterpret_cast<acc_t*>(smem);
    C* cscratch = reinterpret_cast<C*>(smem);
    T* const slots = reinterpret_cast<T*>(smem + FUSED_SCRATCH);
    const Workspace ws(work, rows, 1);
    const long long tickets = rows * chunks, step = gridDim.x;
    const long long mine = blockIdx.x < tickets ? (tickets - 1 - blockIdx.x) / step + 1 : 0;
    // Ticket i of this block: its row, its chunk's first element, and its slot as staged.
    struct Item {
        long long row, begin;
        Staged<Ld, Ep, T, V> st;
    };
    auto item = [&](long long i) {
        const long long t = blockIdx.x + i * step, row = t / chunks, begin = t % chunks * chunk;
        const int count = int((min(chunk, cols - begin) + V - 1) / V);
        return Item{row, begin, {slots + i % (ahead + lag) * chunk, int(threadIdx.x), int(blockDim.x), count}};
    };
    // A copy group per step, empty past the last ticket, so ticket i's group is always followed
    // by ahead - 1 others when it is waited for.
    auto load = [&](long long i) {
        if (i < mine) {
            const Item it = item(i);
            it.st.load(x + it.row * ldx + it.begin, cols - it.begin);
        }
        copy_commit();
    };
    for (int i = 0; i < ahead; ++i) load(i);
    for (long long i = 0; i < mine + lag; ++i) {
        copy_wait_pending(ahead - 1);  // this thread's copies of ticket i (it reads only those)
        if (i < mine) {
            const Item it = item(i);
            const C m = block_reduce(it.st.max(ld), cscratch, MaxOp());
            // The chunk's sum against its own max (a chunk of only -inf adds (-inf, 0)).
            const acc_t d = block_reduce(acc_t(it.st.template sum<false>(ld, sum_base(m))), scratch, SumOp());
            publish_chunk(ws.part + 2 * (it.row * chunks + it.begin / chunk), MD<C>{m, d}, ws.count + it.row);
        }
        if (i >= lag) {
            const Item it = item(i - lag);
            // Polled by warp 1, so the wait overlaps thread 0's publication (its fence).
            wait_count(ws.count + it.row, unsigned(chunks), 32);
            const MD<C> s = merge_chunks<C>(ws.part + 2 * it.row * chunks, chunks, scratch);
            it.st.template write<false>(ld, y + it.row * ldy + it.begin, cols - it.begin, s.m, Ep::constant(s.m, s.d));
        }
        load(i + ahead);  // into the slot of ticket i - lag, just written by the same threads
    }
}

}  // namespace csm
