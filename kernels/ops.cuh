// Operations: what a kernel family loads and what it writes. Every __global__ kernel takes a load
// functor type Ld and an epilogue op type Ep as its first two template parameters; a new
// operation is a new pair of these, not a new kernel.
//
// Load (Ld): a value passed to every kernel as its last argument (kernels/common.cuh's helpers
// take it by reference); `void load(C (&v)[V]) const`, called on each pack's values in the
// compute type where a kernel has just converted the pack from memory (unpack, unpack_word); it
// may transform them in place. The reductions (max, sum of exp) and the writes see what it
// leaves. Every load keeps -inf, the kernels' padding, as -inf; those that the kernels taking a
// maximum on packs' bits run (Staged::max by pack_max, the slab's half pairs: Plain, Scaled) are
// monotone non-decreasing, so that maximum is then loaded as one value (`one`). `BITS`: true
// where load leaves the values as they are.
//
// Epilogue (Ep): per slice, from the slice's max m and its sum d of exp(x - ref(m)):
//   TERMS                             the kernels that hold a slice on chip keep its terms
//                                     exp(x - m) in place of x (registers, flat, the block and
//                                     cluster kernels of double); else they keep x
//   SHIFTS                            sums may take exp_shifted (their constant then comes
//                                     through shifted_writes where writes are not shifted alike)
//   C ref(C m)                        what a slice's terms are taken against, given its max
//   C term(C x, C m)                  one element's term in a running (m, d) state (MD)
//   C constant(C m, D d)              the slice's constant k (D: the kernel's sum type); its
//                                     bits are never all 0 (the online kernel's release word)
//   C shifted_writes(C m, C k)        k for writes whose exps are by exp_shifted against m
//                                     where the slice's sum was not (shift_fix)
//   C apply<SHIFTED>(C x, C m, C s, const C& k)   an element's output from its loaded value x
//                                     (SHIFTED: exps by exp_shifted against s = shift_of(m))
//   C apply_term(C e, C k)            the same from its term e = exp(x - m) (TERMS only)
#pragma once
#include "common.cuh"

namespace csm {

// Loads that know the element's place run in the kernels of planning.LOAD_KERNELS only.
// MASKS: `row_at(row)` is row's mask r; `fetch<V>(r, col, cols)`, issued with the pack's load,
// the keep bytes of the pack from column col (0 outside [0, cols)); `stage<V>(dst, r, col,
// cols)` the same into shared memory, for kernels that stage their packs; `apply(v, w)` makes
// -inf the elements whose byte is 0 and returns their bits (`left_out<V>(w)`); there, in a row
// whose max is not finite, the kernel writes Ep::masked() (elsewhere their -inf gives it already).
template <class Ld> __device__ inline const unsigned char* mask_row(const Ld& ld, long long row) {
    if constexpr (Ld::MASKS)
        return ld.row_at(row);
    else
        return nullptr;
}

// An unsigned integer of V bytes.
template <int V> struct Bytes;
template <> struct Bytes<1> { using type = unsigned char; };
template <> struct Bytes<2> { using type = unsigned short; };
template <> struct Bytes<4> { using type = unsigned; };
template <> struct Bytes<8> { using type = unsigned long long; };

// What a load fetches beside a pack of V elements: the keep bytes (MASKS), else nothing.
struct NoSide {};
template <bool MASKS, int V> struct Side { using type = typename Bytes<V>::type; };
template <int V> struct Side<false, V> { using type = NoSide; };
template <class Ld, int V> using side_t = typename Side<Ld::MASKS, V>::type;
template <class Ld, int V>
__device__ inline side_t<Ld, V> fetch_side(const Ld& ld, const unsigned char* r, long long col, long long cols) {
    if constexpr (Ld::MASKS)
        return ld.template fetch<V>(r, col, cols);
    else
        return {};
}
// The bits of the elements of a pack that Ld leaves out (as load_side returns them).
template <class Ld, int V>
__device__ inline unsigned left_out(const Ld& ld, const unsigned char* r, long long col, long long cols) {
    if constexpr (Ld::MASKS)
        return Ld::template left_out<V>(ld.template fetch<V>(r, col, cols));
    else
        return 0;
}
// The pack v as Ld loads it, given what fetch_side fetched beside it: the bits of the elements
// it left out (none but for MASKS).
template <class Ld, int V, typename C> __device__ inline unsigned load_side(const Ld& ld, C (&v)[V], side_t<Ld, V> w) {
    if constexpr (Ld::MASKS) {
        return ld.apply(v, w);
    } else {
        ld.load(v);
        return 0;
    }
}

// x as it is in memory.
struct Plain {
    static constexpr bool BITS = true, MASKS = false;
    template <int V, typename C> __device__ void load(C (&)[V]) const {}
};

// x where a bool mask is true, -inf (left out) elsewhere: mask element of (row, col) at
// m + (row / rdiv) * msr + col * msc (bytes): a mask broadcast over the rows in runs of rdiv
// (a padding mask of (batch, 1, ..., 1, n) over (batch, heads, ..., n)), or one a row (rdiv 1).
struct Masked {
    static constexpr bool BITS = false, MASKS = true;
    const unsigned char* m;
    long long rdiv, msr, msc;
    // The row's mask: no division for a mask of one row or one a row; 32-bit where both fit.
    __device__ const unsigned char* row_at(long long row) const {
        if (msr == 0) return m;
        const long long q = rdiv == 1 ? row
                            : (row | rdiv) >> 32 == 0 ? (long long)(unsigned(row) / unsigned(rdiv))
                                                      : row / rdiv;
        return m + q * msr;
    }
    // The pack's V keep bytes lie together, inside the row and V-aligned: one load takes them.
    template <int V> __device__ bool in_one(const unsigned char* r, long long col, long long cols) const {
        return msc == 1 && col >= 0 && col + V <= cols && reinterpret_cast<unsigned long long>(r + col) % V == 0;
    }
    // The pack's V keep bytes in one load where in_one, else one by one.
    template <int V> __device__ typename Bytes<V>::type fetch(const unsigned char* r, long long col, long long cols) const {
        using W = typename Bytes<V>::type;
        if (in_one<V>(r, col, cols))
            return *reinterpret_cast<const W*>(r + col);
        W w = 0;
#pragma unroll
        for (int j = 0; j < V; ++j)
            if (col + j >= 0 && col + j < cols && r[(col + j) * msc]) w |= W(1) << (8 * j);
        return w;
    }
    // fetch's bytes at dst (V-aligned shared memory): one asynchronous copy where fetch takes one
    // load of 4 bytes or more, so they arrive with the pack's own copy.
    template <int V> __device__ void stage(unsigned char* dst, const unsigned char* r, long long col, long long cols) const {
        if constexpr (V >= 4)
            if (in_one<V>(r, col, cols)) {
                copy_async<V>(dst, r + col);
                return;
            }
        *reinterpret_cast<typename Bytes<V>::type*>(dst) = fetch<V>(r, col, cols);
    }
    template <int V, typename W> __device__ static unsigned left_out(W w) {
        unsigned out = 0;
#pragma unroll
        for (int j = 0; j < V; ++j) out |= unsigned(((w >> (8 * j)) & 0xff) == 0) << j;
        return out;
    }
    // The pack p in memory's form with the elements that w leaves out set to -inf's bits; true
    // where it left any out. Four keep bytes a compare (0xff where a byte is 0), each spread over
    // its element's bits by a byte permutation, then one select a 32-bit word.
    template <typename T, int V, typename W> __device__ static bool apply_bits(Pack<T, V>& p, W w) {
        constexpr int N = sizeof(T) * V / 4, E = sizeof(T);  // words, bytes an element
        if constexpr (N == 0) {
            compute_t<T> v[V];
            unpack(p, v);
            const unsigned out = Masked().apply(v, w);
            if (out) p = pack_out<T, V>(v);
            return out;
        } else {
            Pack<T, V> low;  // -inf's bits in every element
#pragma unroll
            for (int j = 0; j < V; ++j) low.v[j] = Traits<T>::out(neg_inf<compute_t<T>>());
            unsigned u[N], f[N], any = 0;
            memcpy(u, &p, sizeof u);
            memcpy(f, &low, sizeof f);
#pragma unroll
            for (int i = 0; i < N; ++i) {
                const int e = i * 4 / E;  // the word's first element; its keep byte's place in z:
                const unsigned z = __vcmpeq4(unsigned((unsigned long long)w >> (8 * (e & ~3))), 0u);
                const unsigned b = e & 3, spread = E == 2 ? (b ? 0x3322u : 0x1100u) : b * 0x1111u;
                const unsigned out = __byte_perm(z, 0u, spread);
                u[i] = (u[i] & ~out) | (f[i] & out);
                any |= out;
            }
            memcpy(&p, u, sizeof u);
            return any != 0;
        }
    }
    template <int V, typename C, typename W> __device__ unsigned apply(C (&v)[V], W w) const {
        unsigned out = 0;
#pragma unroll
        for (int j = 0; j < V; ++j)
            if (!((w >> (8 * j)) & 0xff)) {
                v[j] = neg_inf<C>();
                out |= 1u << j;
            }
        return out;
    }
};

// s * x in the compute type, for a finite s > 0 (the launcher passes s's bits): as composed,
// (x in C) * C(s), rounded (a product the compiler may not fuse into a later add). Monotone, and
// -inf stays -inf; other scales are computed apart.
struct Scaled {
    static constexpr bool BITS = false, MASKS = false;
    double s;
    template <int V, typename C> __device__ void load(C (&v)[V]) const {
        const C f = C(s);
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = mul_rn(v[j], f);
    }
};

// One value as Ld loads it.
template <class Ld, typename C> __device__ inline C one(const Ld& ld, C x) {
    C v[1] = {x};
    ld.load(v);
    return v[0];
}

// y = exp(x - m) / d, as e * (1 / d) (scale_of). A slice holding NaN or +inf, or all -inf, is
// all NaN (d is NaN), as SciPy's softmax.
struct Softmax {
    static constexpr bool TERMS = true, SHIFTS = true;
    template <typename C> __device__ static C masked() { return C(0); }
    template <typename C> __device__ static C ref(C m) { return m; }
    template <typename C> __device__ static C term(C x, C m) { return csm::term(x, m); }
    template <typename C, typename D> __device__ static C constant(C, D d) { return scale_of(d, C()); }
    template <typename C> __device__ static C shifted_writes(C m, C k) { return k * shift_fix(m); }
    // k by reference: read after the exp, which keeps the columns kernels' PTX (dev/ptx_diff.py).
    template <bool SHIFTED, typename C> __device__ static C apply(C x, C m, C s, const C& k) {
        return exp_by<SHIFTED>(x, m, s) * k;
    }
    template <typename C> __device__ static C apply_term(C e, C k) { return e * k; }
};

// log(d) of a softmax sum d. Float sums (rows of a warp's lanes, paid by each lane of a row):
// MUFU's logarithm, 2 instructions where logf takes some 40, within 2^-21.4 absolute for d in
// [0.5, 2] and 3 ulp beyond (CUDA's __logf); -inf, +inf and NaN for d of 0, +inf and NaN.
// Double sums: log.
__device__ inline float log_of_sum(float d) { return __logf(d); }
__device__ inline double log_of_sum(double d) { return log(d); }

// y = (x - m) - log(d). The max's own entry is -log(d), exact to d's rounding and log_of_sum's
// (float sums of a few terms: 6e-8, and 3.6e-7; double sums: 1.1e-16), which float types' atol of
// 1e-6 covers; float64's bound asks for log1p of the other terms' sum, kept apart from the max's
// 1, which no kernel keeps (float64 log_softmax is computed apart, see cusoftmax/_family.py).
// Special values as SciPy's log_softmax (x - m' - log(sum(exp(x - m'))), m' the max where
// finite, else 0): terms against ref(m), 0 where m is +inf, so d is +inf there, or NaN where the
// slice also holds NaN; the +inf entries then give NaN and the others -inf (inf - m - k), a NaN
// slice all NaN, and a slice of only -inf all NaN (x - m is). Sums are never shifted: their
// logarithm would need the shift's rounding taken off.
struct LogSoftmax {
    static constexpr bool TERMS = false, SHIFTS = false;
    template <typename C> __device__ static C masked() { return neg_inf<C>(); }
    template <typename C> __device__ static C ref(C m) { return m == -neg_inf<C>() ? C(0) : m; }
    template <typename C> __device__ static C term(C x, C m) {
        return x == neg_inf<C>() ? C(0) : fast_exp(x - ref(m));
    }
    // -0.0 for a zero logarithm (d = 1): the same outputs, nonzero bits.
    template <typename C, typename D> __device__ static C constant(C, D d) {
        const C k = C(log_of_sum(d));
        return k == C(0) ? -C(0) : k;
    }
    template <typename C> __device__ static C shifted_writes(C, C k) { return k; }
    template <bool SHIFTED, typename C> __device__ static C apply(C x, C m, C, const C& k) {
        return (x - m) - k;
    }
};

// Reductions (reduce.cu) take an op with `void put<T>(void* y, long long i, C m, acc_t c,
// acc_t s)`: slice i's output from its max m, the count c of its elements equal to m and the sum
// s of exp(x - m) over the others.

// log(c + s) for a slice's count c >= 1 of max terms and sum s >= 0 (or NaN) of the others,
// to log1p(s)'s relative accuracy where c is 1, however small s is. Double: log(c) +
// log1p(s / c). Float: below 1/32 the series to s^4 / 4 (the rest under 6e-9), else MUFU's
// logarithm (absolute error about 4e-7, inside float types' bounds): some 10 instructions, not 80.
__device__ inline float log_sum(float c, float s) {
    if (c == 1.0f && s < 0.03125f) return s * (1.0f - s * (0.5f - s * (1.0f / 3.0f - s * 0.25f)));
    return __logf(c + s);
}
__device__ inline double log_sum(double c, double s) { return log(c) + log1p(s / c); }

// log(sum(exp(x))) = m + log_sum(c, s) as element i of y, of x's type. As SciPy's logsumexp: a
// slice holding NaN gives NaN (s is NaN), +inf gives +inf (m), all -inf gives -inf.
struct LogSumExp {
    template <typename T, typename C> __device__ static void put(void* y, long long i, C m, acc_t c, acc_t s) {
        bits(static_cast<T*>(y))[i] = Traits<T>::out(m + log_sum(C(c), C(s)));
    }
};

// The state itself, three doubles a slice (m, c, s) at y[3i]: a partial that a caller merges
// with others of the same slices (cusoftmax/_composed.py's State; m is one of x's values). A
// slice of only -inf counts the kernel's -inf padding in c too: its state is (-inf, c >= 1, 0),
// whose sum is 0 whatever c is.
struct SliceState {
    template <typename T, typename C> __device__ static void put(void* y, long long i, C m, acc_t c, acc_t s) {
        double* p = static_cast<double*>(y) + 3 * i;
        p[0] = double(m);
        p[1] = c;
        p[2] = s;
    }
};

// Backward passes (vjp.cu) take an op with `C term(C y, C g)`, whose sum over a slice is s,
// and `C out(C y, C g, C s)`, an element's dx from its y, its dy (g) and the slice's s.

// softmax's: dx = y * (dy - sum(y * dy)).
struct SoftmaxVjp {
    template <typename C> __device__ static C term(C y, C g) { return y * g; }
    template <typename C> __device__ static C out(C y, C g, C s) { return y * (g - s); }
};

// log_softmax's, y its output: dx = dy - exp(y) * sum(dy).
struct LogSoftmaxVjp {
    template <typename C> __device__ static C term(C, C g) { return g; }
    template <typename C> __device__ static C out(C y, C g, C s) { return g - fast_exp(y) * s; }
};

// An element's output from what a kernel kept of it: its term (Ep::TERMS) or its value.
template <class Ep, typename C> __device__ inline C apply_kept(C v, C m, C k) {
    if constexpr (Ep::TERMS)
        return Ep::apply_term(v, k);
    else
        return Ep::template apply<false>(v, m, m, k);
}

}  // namespace csm
