// Shared device code for every kernel family: compute-type traits, vector loads and stores,
// the online (m, d) state with its merge, warp / block reductions, work schedules and the
// cluster exchange. The operations (what a family loads and writes) are in ops.cuh.
//
// The Python loader pastes the text of every `#include "X.cuh"` of kernels/ in its place
// (recursively, each header once), so an edit here changes the source string and with it CuPy's
// kernel cache key. Values shared with Python come as -D options (CSM_*): each file that uses
// one stops with #error where it is missing.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#if !defined(CSM_WALK_BATCH)
#error "common.cuh needs -DCSM_WALK_BATCH from the loader"
#endif

namespace csm {

// ---- compute types: half and bfloat16 are computed in float, float in float, double in double.
// Elements move through memory as their bit patterns (B), so that packs of them are plain
// integer words: a struct of __half / __nv_bfloat16 may be copied in 2-byte pieces [kernels-12].
template <typename T> struct Traits;
template <> struct Traits<float> {
    using C = float;
    using B = unsigned int;
    __device__ static float in(B b) { return __uint_as_float(b); }
    __device__ static B out(float v) { return __float_as_uint(v); }
};
template <> struct Traits<double> {
    using C = double;
    using B = unsigned long long;
    __device__ static double in(B b) { return __longlong_as_double((long long)b); }
    __device__ static B out(double v) { return (B)__double_as_longlong(v); }
};
template <> struct Traits<__half> {
    using C = float;
    using B = unsigned short;
    using T2 = __half2;  // two elements in one register
    __device__ static __half2 pair(float lo, float hi) { return __floats2half2_rn(lo, hi); }
    __device__ static float in(B b) { return __half2float(__ushort_as_half(b)); }
    __device__ static void in_pair(unsigned w, float& lo, float& hi) {  // two elements in a word
        __half2 h;
        memcpy(&h, &w, sizeof h);
        const float2 f = __half22float2(h);
        lo = f.x;
        hi = f.y;
    }
    __device__ static B out(float v) { return __half_as_ushort(__float2half_rn(v)); }
};
template <> struct Traits<__nv_bfloat16> {
    using C = float;
    using B = unsigned short;
    using T2 = __nv_bfloat162;
    __device__ static __nv_bfloat162 pair(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
    __device__ static float in(B b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
    __device__ static void in_pair(unsigned w, float& lo, float& hi) {  // one instruction each
        lo = __uint_as_float(w << 16);
        hi = __uint_as_float(w & 0xffff0000u);
    }
    __device__ static B out(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
};
template <typename T> using compute_t = typename Traits<T>::C;

// Sums that run over many elements (online chunks, block partials) accumulate in double: a
// float32 row of 1e8 elements then keeps its normaliser within 1e-6 of a float64 reference.
using acc_t = double;

// exp for the hot loops. float: ex2.approx of (x - m) * log2(e), 3 instructions (FADD, FMUL,
// MUFU.EX2). Relative error about 2^-22 + |x - m| * 2^-23; an output above the float32 atol
// (1e-7) has x - m > -16, so at most 2e-6 against the 1e-5 bound. double: the accurate exp.
__device__ inline float fast_exp(float t) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(t * 1.4426950408889634f));
    return r;
}
__device__ inline double fast_exp(double t) { return exp(t); }

// a * b rounded, never contracted with a later add into a fused multiply-add.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// exp(x - m) for every element of a slice whose max is m, as 2^(x * log2(e) - s) with one
// shift s = m * log2(e) rounded once per slice: FFMA and MUFU.EX2, one instruction fewer than
// fast_exp(x - m). The rounding of s, r = m * log2(e) - s, multiplies every term of the slice
// by the same 2^r, so it cancels between the slice's sum and its writes (which must use the same
// s); what remains per term is 2^-22 (ex2.approx) + |x - m| * 2^-24 (the FFMA's rounding), as
// fast_exp's. shift_ok(m): |m| <= 2^23, so |s| < 2^24 and |r| <= 1/2 (larger |m| would give
// 2^r past the float range: at |m| = 1e10, |r| up to 512). Other slices (|m| large, +-inf or
// NaN) take fast_exp(x - m), whose special cases are those of SciPy. double: never shifted.
__device__ inline bool shift_ok(float m) { return fabsf(m) <= 8388608.0f; }
__device__ inline bool shift_ok(double) { return false; }
__device__ inline float shift_of(float m) { return m * 1.4426950408889634f; }
__device__ inline double shift_of(double m) { return m; }
// r = m * log2(e) - shift_of(m), exact (one FMA gives a product's rounding error exactly): a
// caller whose sum did not use the same shift multiplies exp_shifted's terms by 2^-r (shift_fix).
__device__ inline float shift_rounding(float m) { return fmaf(m, 1.4426950408889634f, -shift_of(m)); }
__device__ inline double shift_rounding(double) { return 0.0; }
__device__ inline float exp_shifted(float x, float s) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(fmaf(x, 1.4426950408889634f, -s)));
    return r;
}
__device__ inline double exp_shifted(double x, double s) { return fast_exp(x - s); }
// exp(x - m) for an element of a slice whose max is m: SHIFTED, by exp_shifted against the
// slice's shift s = shift_of(m) (the slice's m passes shift_ok); else fast_exp(x - m).
template <bool SHIFTED, typename C> __device__ inline C exp_by(C x, C m, C s) {
    return SHIFTED ? exp_shifted(x, s) : fast_exp(x - m);
}
// 2^-r, r = shift_rounding(m), where m passes shift_ok (else 1): a sum or a scale of exp_shifted's
// terms against m times this is one of exp(x - m) (to ex2.approx's 2^-22), for a caller whose
// sum and writes do not share the shift.
template <typename C> __device__ inline C shift_fix(C m) {
    return shift_ok(m) ? exp_shifted(C(0), shift_rounding(m)) : C(1);
}

// with_shift(ok, f): f(Shift<true>()) where ok (every slice at hand passes shift_ok), else
// f(Shift<false>()); f reads the choice at compile time as decltype(shifted)::value.
template <bool SHIFTED> struct Shift { static constexpr bool value = SHIFTED; };
template <typename F> __device__ inline decltype(auto) with_shift(bool ok, F&& f) {
    if (ok) return f(Shift<true>());
    return f(Shift<false>());
}

template <typename C> __device__ inline C neg_inf();
template <> __device__ inline float neg_inf<float>() { return -__int_as_float(0x7f800000); }
template <> __device__ inline double neg_inf<double>() { return -__longlong_as_double(0x7ff0000000000000LL); }

// exp(x - m) for one element, with -inf entries contributing exactly 0 even when m is -inf
// (needed where m is a running max that may still be -inf). NaN or +inf anywhere make the
// slice's sum NaN, so the whole slice comes out NaN (as SciPy). Where m is the final max, plain
// fast_exp(x - m) gives the same answers: a slice whose max is -inf is all NaN anyway.
template <typename C> __device__ inline C term(C x, C m) {
    return x == neg_inf<C>() ? C(0) : fast_exp(x - m);
}

// The max that a slice's sum of exp(x - max) is taken against: m, or 0 where m is -inf, so that
// a slice of only -inf sums to exactly 0 (exp(-inf - -inf) would be NaN) and adds (-inf, 0) to
// any merge.
template <typename C> __device__ inline C sum_base(C m) { return m == neg_inf<C>() ? C(0) : m; }

// y = e / d written as e * (1/d). For a slice of all -inf: e = 0, 1/d = inf, y = NaN (as SciPy).
// Float results take MUFU.RCP alone (rcp.approx.ftz, at most 1 ulp off), also of a double sum
// (rounded to float first: 1.8e-7 relative in all): a double division per row and lane costs
// about as much as the rest of the work on a short half-type row, and the correctly rounded
// __frcp_rn adds a fix-up and a slow-path branch. d is at least 1 (the max's own term), 0 or
// NaN, so flushing subnormals changes nothing.
__device__ inline float scale_of(float d, float) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
    return r;
}
__device__ inline float scale_of(acc_t d, float) { return scale_of(float(d), 0.0f); }
__device__ inline double scale_of(acc_t d, double) { return 1.0 / d; }

// ---- 16-byte (or narrower) vector access. V elements of T, aligned to V * sizeof(T).
template <typename T, int V> struct alignas(sizeof(T) * V) Pack { typename Traits<T>::B v[V]; };

// One store instruction for a whole pack to global memory. Written as PTX because the compiler
// otherwise merges the whole-pack branch of store_row_pack into its element-wise tail branch
// and issues 2- or 4-byte stores (seen in the PTX of every kernel's write loop).
__device__ inline void st_global(void* p, uint4 w) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w) : "memory");
}
__device__ inline void st_global(void* p, uint4 w, unsigned long long pol) {  // under an L2 policy
    asm volatile("st.global.L2::cache_hint.v4.b32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w), "l"(pol) : "memory");
}
__device__ inline void st_global(void* p, uint2 w, unsigned long long pol) {
    asm volatile("st.global.L2::cache_hint.v2.b32 [%0], {%1, %2}, %3;" ::"l"(p), "r"(w.x), "r"(w.y), "l"(pol) : "memory");
}
__device__ inline void st_global(void* p, unsigned int w, unsigned long long pol) {
    asm volatile("st.global.L2::cache_hint.b32 [%0], %1, %2;" ::"l"(p), "r"(w), "l"(pol) : "memory");
}
__device__ inline void st_global(void* p, unsigned short w, unsigned long long pol) {
    asm volatile("st.global.L2::cache_hint.b16 [%0], %1, %2;" ::"l"(p), "h"(w), "l"(pol) : "memory");
}
__device__ inline void st_global(void* p, uint2 w) {
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w.x), "r"(w.y) : "memory");
}
__device__ inline void st_global(void* p, unsigned int w) {
    asm volatile("st.global.b32 [%0], %1;" ::"l"(p), "r"(w) : "memory");
}
__device__ inline void st_global(void* p, unsigned short w) {
    asm volatile("st.global.b16 [%0], %1;" ::"l"(p), "h"(w) : "memory");
}
// ---- L2 eviction priorities of a two-pass kernel's accesses (sm_80 and newer; earlier GPUs
// take them as plain accesses). A chunk's first read marks its lines evict-last, so that they
// outlast lines read or written once; its second read (their last use) asks evict-first for
// them, so that they are not the last to go after the kernel; its output goes out evict-first
// [kernels-9].
enum class L2 { normal, last, first };
template <L2 H> __device__ inline unsigned long long l2_policy() {
    unsigned long long p = 0;
#if __CUDA_ARCH__ >= 800
    if constexpr (H == L2::last)
        asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    else if constexpr (H == L2::first)
        asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
    return p;
}
// A global load of one word under an L2 policy from l2_policy<H>() (sm_80 and newer), and
// ld_global, which takes it for H other than normal and a plain load otherwise.
__device__ inline uint4 ld_hinted(const uint4* p, unsigned long long pol) {
    uint4 w;
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w) : "l"(p), "l"(pol));
    return w;
}
__device__ inline uint2 ld_hinted(const uint2* p, unsigned long long pol) {
    uint2 w;
    asm volatile("ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(w.x), "=r"(w.y) : "l"(p), "l"(pol));
    return w;
}
__device__ inline unsigned ld_hinted(const unsigned* p, unsigned long long pol) {
    unsigned w;
    asm volatile("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(w) : "l"(p), "l"(pol));
    return w;
}
__device__ inline unsigned short ld_hinted(const unsigned short* p, unsigned long long pol) {
    unsigned short w;
    asm volatile("ld.global.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(w) : "l"(p), "l"(pol));
    return w;
}
template <L2 H, typename W> __device__ inline W ld_global(const W* p, unsigned long long pol) {
#if __CUDA_ARCH__ >= 800
    if constexpr (H != L2::normal) return ld_hinted(p, pol);
#endif
    return *p;
}

template <int Bytes> struct Word;
template <> struct Word<2> { using type = unsigned short; };
template <> struct Word<4> { using type = unsigned int; };
template <> struct Word<8> { using type = uint2; };
template <> struct Word<16> { using type = uint4; };
template <typename T, int V, L2 H = L2::normal>
__device__ inline void store_pack_global(T* p, const Pack<T, V>& v, unsigned long long pol = 0) {
    typename Word<sizeof(T) * V>::type w;
    memcpy(&w, &v, sizeof w);
#if __CUDA_ARCH__ >= 800
    if constexpr (H != L2::normal) {
        st_global(p, w, pol);
        return;
    }
#endif
    st_global(p, w);
}

// The largest element of a pack, in the compute type (fmax semantics: NaN is ignored unless
// all are NaN). Half types compare pairs as they are (one HMNMX2 per two elements, no
// conversions), then convert the last pair.
template <typename T, int V> __device__ inline compute_t<T> pack_max(const Pack<T, V>& p) {
    if constexpr (sizeof(T) == 2 && V >= 2) {
        using T2 = typename Traits<T>::T2;
        T2 w[V / 2];
        memcpy(w, p.v, sizeof w);
#pragma unroll
        for (int n = V / 2; n > 1; n /= 2)
#pragma unroll
            for (int j = 0; j < n / 2; ++j) w[j] = __hmax2(w[j], w[j + n / 2]);
        return fmax(__low2float(w[0]), __high2float(w[0]));
    } else {
        compute_t<T> m = Traits<T>::in(p.v[0]);
#pragma unroll
        for (int j = 1; j < V; ++j) m = fmax(m, Traits<T>::in(p.v[j]));
        return m;
    }
}

// V values of the compute type rounded to a pack of T; half types convert two per instruction.
template <typename T, int V, typename C> __device__ inline Pack<T, V> pack_out(const C (&in)[V]) {
    Pack<T, V> p;
    if constexpr (sizeof(T) == 2 && V >= 2) {
#pragma unroll
        for (int j = 0; j < V; j += 2) {
            const typename Traits<T>::T2 h = Traits<T>::pair(in[j], in[j + 1]);
            memcpy(&p.v[j], &h, sizeof h);
        }
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) p.v[j] = Traits<T>::out(in[j]);
    }
    return p;
}

// Asynchronous copy of one pack from global to shared memory (sm_80+, packs of 4, 8 or 16
// bytes): the bytes in flight hold no registers, so a block can have its whole slice of a row
// in flight at once. 16-byte copies bypass L1 (streaming data). The issuing thread sees the
// data after copy_wait().
template <int BYTES> __device__ inline void copy_async(void* dst, const void* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(src), "n"(BYTES) : "memory");
}
__device__ inline void copy_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// Copies committed in groups: copy_commit() closes the thread's group; copy_wait_pending(n)
// waits until at most its n newest groups (n < 8) are still in flight.
__device__ inline void copy_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ inline void copy_wait_pending(int n) {
    switch (n) {
        case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
        case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
        case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
        case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
        case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
        case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
        case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
        default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
    }
}

// After a block published a chunk's partial (by thread 0, or by threads that each fenced their
// writes and then met at a barrier): counts it; true, on every thread, where that made the
// line's chunks all counted (this block then merges the line). `flag`: shared.
__device__ inline bool count_chunk(unsigned* count, long long chunks, int* flag) {
    if (threadIdx.x == 0) {
        __threadfence();  // the partial before the count
        *flag = atomicAdd(count, 1u) == unsigned(chunks - 1);
    }
    __syncthreads();
    const bool last = *flag;
    if (last) __threadfence();  // the other blocks' partials are seen after their counts
    __syncthreads();  // flag is written again only after this
    return last;
}

// Blocks of THREADS an SM for __launch_bounds__ that leave a thread 64 registers (half of 2048
// threads resident), 128 for double: the reduce and vjp kernels (their double exp, log and
// log1p spilled at 64, ptxas sm_90).
template <typename T, int THREADS> constexpr int HALF_RESIDENT = 2048 / THREADS / (sizeof(T) == 8 ? 4 : 2);

// B packs of V columns (the same V columns at B steps of a strided axis) as Ld loads them,
// column by column: w[j][b] is column j at step b.
template <class Ld, int B, typename T, int V, typename C>
__device__ inline void pack_columns(const Ld& ld, const Pack<T, V> (&p)[B], C (&w)[V][B]) {
#pragma unroll
    for (int b = 0; b < B; ++b) {
        C v[V];
        unpack(p[b], v);
        ld.load(v);
#pragma unroll
        for (int j = 0; j < V; ++j) w[j][b] = v[j];
    }
}

template <typename T, int V> __device__ inline Pack<T, V> load_pack(const T* p) {
    return *reinterpret_cast<const Pack<T, V>*>(p);
}
template <typename T, int V> __device__ inline void store_pack(T* p, const Pack<T, V>& v) {
    *reinterpret_cast<Pack<T, V>*>(p) = v;
}

// ---- the online softmax state (Milakov & Gimelshein): running max m and sum d of exp(x - m).
// The identity is (-inf, 0). Merging rescales each side by exp(m_side - m) unless m_side already
// is the new max, so two -inf maxima never produce exp(-inf - -inf) = NaN.

// The sum d of a pair (m, d) against a max `top` >= m: d as it is where m is the top (also where
// both are -inf: d is 0 or NaN), else d * exp(m - top).
template <typename C> __device__ inline acc_t sum_at(C m, acc_t d, C top) {
    return m == top ? d : d * exp(acc_t(m) - acc_t(top));
}
// The same in float (MUFU.EX2), for a few float sums merged at once (a slab's column pairs).
__device__ inline float sum_at(float m, float d, float top) { return m == top ? d : d * fast_exp(m - top); }

template <typename C> struct MD {
    C m;
    acc_t d;
    __device__ static MD identity() { return {neg_inf<C>(), 0.0}; }
    // Adds V elements: m' = max(m, v), d' = d * exp(m - m') + sum Ep::term(v, m') (exp(v - m')
    // but for the special cases of ops.cuh), one rescale per pack. fmax ignores NaN, so m is
    // never NaN; a NaN element makes d NaN instead.
    template <class Ep, int V> __device__ void push_pack(const C (&v)[V]) {
        C pm = v[0];
#pragma unroll
        for (int j = 1; j < V; ++j) pm = fmax(pm, v[j]);
        const C mn = fmax(m, pm);
        if (mn != m) { d *= exp(acc_t(m) - acc_t(mn)); m = mn; }
        C s = 0;
#pragma unroll
        for (int j = 0; j < V; ++j) s += Ep::term(v[j], m);
        d += acc_t(s);
    }
    __device__ void merge(const MD& o) {
        const C mn = fmax(m, o.m);
        const acc_t a = sum_at(m, d, mn), b = sum_at(o.m, o.d, mn);
        m = mn;
        d = a + b;
    }
};

// ---- reductions. Fixed shapes and orders: the same input gives bitwise the same result.
struct MaxOp { template <typename R> __device__ R operator()(R a, R b) const { return fmax(a, b); } };
struct SumOp { template <typename R> __device__ R operator()(R a, R b) const { return a + b; } };

template <typename R, typename Op>
__device__ inline R group_reduce(R v, int width, Op op) {  // over aligned groups of `width` lanes
    for (int o = width / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide reduce. `scratch` holds at least 32 R in shared memory. Every thread folds the
// per-warp values in warp order, so all threads get the same bits. One barrier: no thread may
// write `scratch` again until every thread has passed a later barrier (a caller alternating two
// scratch areas has that from its other reduction's barrier).
template <typename R, typename Op>
__device__ inline R block_reduce_once(R v, R* scratch, Op op) {
    v = group_reduce(v, 32, op);
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    R r = scratch[0];
    for (int w = 1; w < int(blockDim.x >> 5); ++w) r = op(r, scratch[w]);
    return r;
}
// The same, with a second barrier so that the caller may reuse scratch at once.
template <typename R, typename Op>
__device__ inline R block_reduce(R v, R* scratch, Op op) {
    const R r = block_reduce_once(v, scratch, op);
    __syncthreads();
    return r;
}

// Reduce over aligned groups of W lanes (a power of two up to 32), RR values (rows) per lane
// at once, by shuffles: the rows' shuffles of one level issued together so that their
// latencies overlap.
template <int W, int RR, typename R, typename Op>
__device__ inline void lanes_reduce_rows(R (&v)[RR], Op op) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1)
#pragma unroll
        for (int r = 0; r < RR; ++r) v[r] = op(v[r], __shfl_xor_sync(0xffffffffu, v[r], o));
}

// The (m, d) of each aligned group of `width` lanes (a power of two up to 32), every lane getting
// its group's: the largest m, then the sum of each lane's d rescaled to it, by shuffle trees (a
// fixed order: the same bits wherever the same states meet).
template <typename C> __device__ inline MD<C> group_merge(const MD<C>& s, int width) {
    const C m = group_reduce(s.m, width, MaxOp());
    return {m, group_reduce(sum_at(s.m, s.d, m), width, SumOp())};
}

// Block-wide merge of per-thread states: the block's max M, then the sum of every thread's d
// rescaled to M (one exp per thread, none where the thread's m already is M). Four barriers,
// fixed orders: every thread gets the same bits. `scratch` holds 32 acc_t.
template <typename C>
__device__ inline MD<C> block_merge(MD<C> s, acc_t* scratch) {
    const C m = block_reduce(s.m, reinterpret_cast<C*>(scratch), MaxOp());
    const acc_t d = block_reduce(sum_at(s.m, s.d, m), scratch, SumOp());
    return {m, d};
}

template <typename T> __device__ inline const typename Traits<T>::B* bits(const T* p) {
    return reinterpret_cast<const typename Traits<T>::B*>(p);
}
template <typename T> __device__ inline typename Traits<T>::B* bits(T* p) {
    return reinterpret_cast<typename Traits<T>::B*>(p);
}

// The type I itself, in a parameter that takes no part in deducing I.
template <typename I> struct Same { using type = I; };

// ---- rows in the packs of their aligned spans. A row that starts `head` elements past a 16-byte
// boundary (head_of) is walked from that boundary: its span's 16-byte packs, with the row's
// elements at columns head to head + cols - 1 (SPAN below: columns under `lo` lie outside, as
// those past the end). Every pack but the first and the last is whole, so rows of any length
// take 16-byte accesses where x's and y's rows lie alike about 16-byte boundaries (rows_alike).
template <typename T> __device__ inline int head_of(const T* row) {
    return int(reinterpret_cast<unsigned long long>(row) % 16 / sizeof(T));
}
template <typename T>
__device__ inline bool rows_alike(const T* x, const T* y, long long ldx, long long ldy) {
    return (reinterpret_cast<unsigned long long>(y) - reinterpret_cast<unsigned long long>(x)) % 16 == 0 &&
           (ldx - ldy) * (long long)sizeof(T) % 16 == 0;
}
// Packs of V elements may walk rows in their spans where they are of 16 bytes (SPANS). in_spans:
// whether they do, some row of x being off a 16-byte boundary; then a row's span may have V - 1
// elements more than the row (the policy sizes shared memory alike), and x's and y's rows must
// lie alike (the launcher's precondition; else a trap). Other rows take the plain paths.
template <typename T, int V> constexpr bool SPANS = sizeof(T) * V == 16;
template <typename T>
__device__ inline bool in_spans(const T* x, const T* y, long long ldx, long long ldy) {
    if (head_of(x) == 0 && ldx * (long long)sizeof(T) % 16 == 0) return false;
    if (!rows_alike(x, y, ldx, ldy)) __trap();
    return true;
}

// Loads the pack at column c of a row of `cols` elements as one word: one vector load when the
// whole pack is inside the row, element loads for the pack that straddles the end, the bits of
// `fill` past it (SPAN: and before column `lo`). Offsets in the type of `cols` (int where a row is
// known to be short: 32-bit compares). Kept as a word, a half-type pack stays in its load's
// registers; as V elements it is cut into 16-bit pieces and glued again where the branches meet.
template <typename T, int V> using word_t = typename Word<sizeof(T) * V>::type;
template <typename T, int V, bool SPAN = false, typename I, typename C>
__device__ inline word_t<T, V> load_row_word(const T* row, typename Same<I>::type c, I cols, C fill,
                                             typename Same<I>::type lo = 0) {
    if ((!SPAN || c >= lo) && c + V <= cols) return *reinterpret_cast<const word_t<T, V>*>(row + c);
    Pack<T, V> p;
#pragma unroll
    for (int j = 0; j < V; ++j)
        p.v[j] = ((!SPAN || c + j >= lo) && c + j < cols) ? bits(row)[c + j] : Traits<T>::out(fill);
    word_t<T, V> w;
    memcpy(&w, &p, sizeof w);
    return w;
}

// Span rows may read their first and last packs whole: the 16-byte pack around a row's edge is
// one access, the neighbours' bytes in it included, and the elements outside the row become
// -inf where the pack is unpacked (mask_span), not in the load's branch, so that no lane waits
// there for its data. Such a pack holds one of the row's elements, and where rows lie 16 bytes
// or more apart, every byte of it lies between x's lowest element's 16-byte boundary and x's
// highest element, but for the highest row's last pack, which may pass the end of x's
// allocation: that row, and every row of rows closer than 16 bytes, take element loads there
// (load_row_word). Packs past the row load nothing.
template <typename T> __device__ inline bool span_whole(long long row, long long rows, long long ldx) {
    return (ldx > 0 ? ldx : -ldx) * (long long)sizeof(T) >= 16 && row != (ldx > 0 ? rows - 1 : 0);
}
template <typename T, int V>
__device__ inline word_t<T, V> load_span_word(const T* row, int c, int end, int head, bool whole) {
    if (c >= end) return load_row_word<T, V>(row, 0, 0, neg_inf<compute_t<T>>());  // -inf, no load
    if (whole) return *reinterpret_cast<const word_t<T, V>*>(row + c);
    return load_row_word<T, V, true>(row, c, end, neg_inf<compute_t<T>>(), head);
}
template <int V, typename C> __device__ inline void mask_span(C (&v)[V], int c, int head, int end) {
    if (c < end && (c < head || c + V > end)) {  // a pack past the row is -inf already
#pragma unroll
        for (int j = 0; j < V; ++j)
            if (c + j < head || c + j >= end) v[j] = neg_inf<C>();
    }
}

// The same as a pack.
template <typename T, int V, bool SPAN = false, typename I, typename C>
__device__ inline Pack<T, V> load_row_bits(const T* row, typename Same<I>::type c, I cols, C fill,
                                           typename Same<I>::type lo = 0) {
    const word_t<T, V> w = load_row_word<T, V, SPAN>(row, c, cols, fill, lo);
    Pack<T, V> p;
    memcpy(&p, &w, sizeof p);
    return p;
}

// A pack (as a word) converted to the compute type; half types two elements per 4-byte word
// (a bfloat16 pair takes a shift and a mask, where element-wise it takes two instructions per
// element).
template <typename T, int V, typename C>
__device__ inline void unpack_word(const word_t<T, V>& w, C (&out)[V]) {
    if constexpr (sizeof(T) == 2 && V >= 2) {
        unsigned u[V / 2];
        memcpy(u, &w, sizeof u);
#pragma unroll
        for (int j = 0; j < V / 2; ++j) Traits<T>::in_pair(u[j], out[2 * j], out[2 * j + 1]);
    } else {
        typename Traits<T>::B b[V];
        memcpy(b, &w, sizeof b);
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] = Traits<T>::in(b[j]);
    }
}

// A pack converted to the compute type.
template <typename T, int V, typename C>
__device__ inline void unpack(const Pack<T, V>& p, C (&out)[V]) {
    word_t<T, V> w;
    memcpy(&w, &p, sizeof w);
    unpack_word<T, V>(w, out);
}

// Stages the pack at `src` in shared memory at `dst`, the data's elements being those of the
// pack from `lo` (SPAN; else 0) to `left` - 1: an asynchronous copy when the whole pack is
// inside (packs of 4 bytes or more), else element loads with `fill` (-inf) outside, stored at once.
template <typename T, int V, bool SPAN = false>
__device__ inline void stage_pack(T* dst, const T* src, long long left, long long lo = 0,
                                  compute_t<T> fill = neg_inf<compute_t<T>>()) {
    constexpr int PB = sizeof(T) * V;  // bytes per pack
    if constexpr (PB >= 4) {
        if ((!SPAN || lo <= 0) && left >= V) {
            copy_async<PB>(dst, src);
            return;
        }
    }
    store_pack<T, V>(dst, load_row_bits<T, V, SPAN>(src, 0LL, left, fill, lo));
}

// Stores a pack at column c of a row of `cols` elements: one vector store when it is whole
// inside, else element stores of those inside (SPAN: from column `lo` on).
template <typename T, int V, bool SPAN = false, typename I, typename C>
__device__ inline void store_row_pack(T* row, typename Same<I>::type c, I cols, const C (&in)[V],
                                      typename Same<I>::type lo = 0) {
    if ((!SPAN || c >= lo) && c + V <= cols) {
        store_pack_global<T, V>(row + c, pack_out<T, V>(in));
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j)
            if ((!SPAN || c + j >= lo) && c + j < cols) bits(row)[c + j] = Traits<T>::out(in[j]);
    }
}

// ---- a run of global memory walked by a whole block in batches (online chunks, cluster spills).
// Calls f(c, v, whole) for each of this thread's packs of the `n` elements at xr (n < 2^31:
// 32-bit offsets), in a block of exactly THREADS threads (pack p of the run is thread p % THREADS's):
// c the pack's offset, v its values as Ld loads them, `whole` true where the pack is inside (a
// constant at each call, so an inlined f tests it at compile time). WALK_BATCH packs are loaded
// before any is used; a batch wholly inside the run (every batch but the last) loads and stores
// without a bound test per pack.
template <class Ld, int THREADS, typename T, int V, L2 H = L2::normal, typename F>
__device__ inline void walk_run(const Ld& ld, const T* xr, int n, F&& f) {
    using C = compute_t<T>;
    constexpr int WALK_BATCH = CSM_WALK_BATCH;  // packs in flight a thread [kernels-1]
    constexpr int STEP = THREADS * V;
    const unsigned long long pol = l2_policy<H>();
    int c0 = int(threadIdx.x) * V;
    for (; c0 + (WALK_BATCH - 1) * STEP + V <= n; c0 += WALK_BATCH * STEP) {
        word_t<T, V> w[WALK_BATCH];
#pragma unroll
        for (int b = 0; b < WALK_BATCH; ++b)
            w[b] = ld_global<H>(reinterpret_cast<const word_t<T, V>*>(xr + c0 + b * STEP), pol);
#pragma unroll
        for (int b = 0; b < WALK_BATCH; ++b) {
            C v[V];
            unpack_word<T, V>(w[b], v);
            ld.load(v);
            f(c0 + b * STEP, v, true);
        }
    }
    if (c0 < n) {  // the run's last, partial batch: -inf past its end
        word_t<T, V> w[WALK_BATCH];
#pragma unroll
        for (int b = 0; b < WALK_BATCH; ++b) w[b] = load_row_word<T, V>(xr, c0 + b * STEP, n, neg_inf<C>());
#pragma unroll
        for (int b = 0; b < WALK_BATCH; ++b) {
            C v[V];
            unpack_word<T, V>(w[b], v);
            ld.load(v);
            f(c0 + b * STEP, v, false);
        }
    }
}

// A pack of the compute type stored at column c of a run of n elements at yr: `whole` (the pack
// is inside the run) as one store under the L2 priority STORE (pol from l2_policy<STORE>()),
// else element by element up to the run's end.
template <typename T, int V, L2 STORE = L2::normal, typename C>
__device__ inline void store_run_pack(T* yr, int c, int n, const C (&v)[V], bool whole,
                                      unsigned long long pol = 0) {
    if (whole)
        store_pack_global<T, V, STORE>(yr + c, pack_out<T, V>(v), pol);
    else
        store_row_pack<T, V>(yr, c, n, v);
}

// A pack's values x in place: the op's outputs Ep::apply (SHIFTED: exps by exp_shifted against
// s = shift_of(m)) with the slice's constant k.
template <class Ep, bool SHIFTED, int V, typename C> __device__ inline void finish(C (&v)[V], C m, C s, C k) {
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = Ep::template apply<SHIFTED>(v[j], m, s, k);
}

// The op's outputs for the run's packs, stored at yr (SHIFTED: by exp_shifted, m passes
// shift_ok); loads and whole-pack stores under the L2 priorities LOAD and STORE.
template <class Ld, class Ep, bool SHIFTED, int THREADS, typename T, int V, L2 LOAD = L2::normal,
          L2 STORE = L2::normal, typename C>
__device__ inline void write_run(const Ld& ld, const T* xr, T* yr, int n, C m, C k) {
    const C s = shift_of(m);
    const unsigned long long pol = l2_policy<STORE>();
    walk_run<Ld, THREADS, T, V, LOAD>(ld, xr, n, [&](int c, C(&v)[V], bool whole) {
        finish<Ep, SHIFTED>(v, m, s, k);
        store_run_pack<T, V, STORE>(yr, c, n, v, whole, pol);
    });
}

// ---- two-pass work in one launch: line-by-line partials, then the writes, in L2-sized groups.
// A "line" is what one softmax normaliser covers (a row, or a strip of columns); it is cut into
// `chunks` chunks, and a block works on one (line, chunk) item at a time. Pass 1 ("read" items)
// writes each chunk's partials and counts the chunk; pass 2 ("write" items) waits for the
// line's statistics, merged in a fixed order from its partials (by the write item itself, or by
// the read item that completed the line), reads its chunk again and writes it. Lines are taken
// `per_group` at a time, and the read items of group g + 1 are handed out before the write
// items of group g: the larger the groups (in waves of items), the more rarely a write item
// waits; the smaller (in bytes), the likelier its second read comes from L2. Blocks take items
// from an atomic ticket counter, so an item is only ever taken by a running block after every
// item it waits for was taken: any grid size, and any residency, completes.
struct Schedule {
    long long lines, chunks, per_group, groups;  // groups = ceil(lines / per_group)

    // Tickets: 2 * groups segments of per_group * chunks items (the last group's segments are
    // padded; padding items are skipped). Segment order: R0, R1, W0, R2, W1, ..., W(groups-1).
    __device__ unsigned long long tickets() const {
        return 2ull * (unsigned long long)(groups * per_group * chunks);
    }
    // Ticket t -> (line, chunk, write?); false for a padding item. Write items walk a line's
    // chunks last first: the most recently read is the likeliest still in L2.
    __device__ bool item(unsigned long long t, long long& line, long long& chunk, bool& write) const {
        const long long seg_items = per_group * chunks;
        const long long k = (long long)(t / seg_items), i = (long long)(t % seg_items);
        long long g;
        if (k == 0) { g = 0; write = false; }
        else if (k == 2 * groups - 1) { g = groups - 1; write = true; }
        else if (k & 1) { g = (k + 1) / 2; write = false; }
        else { g = k / 2 - 1; write = true; }
        line = g * per_group + i / chunks;
        chunk = i % chunks;
        if (write) chunk = chunks - 1 - chunk;
        return line < lines;
    }
};

// The workspace, carved from one buffer whose head (the second value of the plan's workspace(),
// cusoftmax/planning) the caller zeroes before the launch: the ticket counter, per line the
// count of its chunks done (the columns kernel: plus 1 once the line is merged), then `width`
// (m, d) statistics per line (the merged lines; the online kernel's, zeroed too, hold its
// publish_norm word) and `width` partials per (line, chunk).
struct Workspace {
    unsigned long long* ticket;
    unsigned* count;
    double* stats;  // [line][width][2]
    double* part;   // [line][chunk][width][2]
    __device__ Workspace(void* base, long long lines, long long width) {
        char* p = static_cast<char*>(base);
        ticket = reinterpret_cast<unsigned long long*>(p);
        count = reinterpret_cast<unsigned*>(p + 8);
        stats = reinterpret_cast<double*>(p + 8 + (4 * lines + 7) / 8 * 8);
        part = stats + 2 * lines * width;
    }
};

// A strided axis in strips (the columns kernels): a line is a strip of `width` packs (width * V
// columns) of one o; thread (pack, lane) of a block owns pack `pack` at steps lane, lane + lanes,
// ... of an item's chunk; `left` elements of its pack are inside the inner axis (<= 0: none).
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

// This thread's packs at steps k, k + S, ... (B of them, as bits) from xo, its pack at step 0;
// steps past k1 (its chunk's end) and elements past `left` load `fill`.
template <typename T, int V, int B, typename C>
__device__ inline void load_steps(const T* xo, long long k, long long S, long long k1, long long xsn,
                                  long long left, C fill, Pack<T, V> (&p)[B]) {
#pragma unroll
    for (int b = 0; b < B; ++b) {
        const long long kb = k + b * S;
        p[b] = load_row_bits<T, V>(xo + (kb < k1 ? kb : 0) * xsn, 0, kb < k1 ? left : 0, fill);
    }
}

// Tickets: thread 0 fetches the block's next ticket while the block works on the current item
// (prefetch_ticket, whose result is used only at the hand-over), then hands it (with anything
// else thread 0 has to tell) to every thread through one of two slots in turn (`turn` counts the
// hand-overs): one barrier, as a slot is written again only after the next hand-over's barrier,
// which every thread reaches after it read the slot.
__device__ inline unsigned long long prefetch_ticket(unsigned long long* counter) {
    return threadIdx.x == 0 ? atomicAdd(counter, 1ull) : 0ull;
}
template <typename H> __device__ inline H hand_over(H next, H (&slots)[2], unsigned& turn) {
    H& slot = slots[turn++ & 1];
    if (threadIdx.x == 0) slot = next;
    __syncthreads();
    return slot;
}

__device__ inline unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ inline unsigned long long load_acquire(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// After this block wrote a chunk's partials (`wrote`: this thread wrote some): counts the chunk;
// true (for the whole block) when it was the line's last, so this block merges the line.
// `flag`: one int of shared memory. Only writers fence: a fence waits for all of the thread's
// earlier stores (in a write item, its whole chunk's).
__device__ inline bool chunk_done(unsigned* count, long long chunks, int* flag, bool wrote) {
    if (wrote) __threadfence();  // the partials before the count
    __syncthreads();
    if (threadIdx.x == 0) *flag = atomicAdd(count, 1u) == unsigned(chunks - 1);
    __syncthreads();
    const bool last = *flag;
    if (last) __threadfence();  // every other block's partials are seen after this (rare)
    return last;
}

// After the merging block wrote a line's statistics (every thread may have): releases the
// line's write items.
__device__ inline void line_merged(unsigned* count) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(count, 1u);
}

// The calling thread polls `count` with acquire loads until it reaches `target`.
__device__ inline void spin_until(const unsigned* count, unsigned target) {
    while (load_acquire(count) < target) __nanosleep(100);
}
// Waits until `count` reaches `target`: thread `poller` polls (spin_until), then a barrier hands
// the ordering to the block.
__device__ inline void wait_count(const unsigned* count, unsigned target, unsigned poller = 0) {
    if (threadIdx.x == poller) spin_until(count, target);
    __syncthreads();
}

// (m, d) pairs in the workspace: written and read through L2 (other blocks read them).
template <typename C> __device__ inline void put_md(double* p, const MD<C>& s) {
    __stcg(p, double(s.m));
    __stcg(p + 1, s.d);
}
template <typename C> __device__ inline MD<C> get_md(const double* p) {
    return MD<C>{C(__ldcg(p)), __ldcg(p + 1)};
}
// This thread's merge of the pairs of chunks threadIdx.x, threadIdx.x + stride, ... of the
// `chunks` at `part` (the block's threads: stride), in that order.
template <typename C> __device__ inline MD<C> strided_pairs(const double* part, long long chunks, long long stride) {
    MD<C> s = MD<C>::identity();
    for (long long k = threadIdx.x; k < chunks; k += stride) s.merge(get_md<C>(part + 2 * k));
    return s;
}
// The (m, d) of a line from the pairs of its `chunks` chunks at `part` (once all are counted):
// strided over the threads, then the block merge, a fixed order, so every block that merges the
// same line gets the same bits.
template <typename C> __device__ inline MD<C> merge_chunks(const double* part, long long chunks, acc_t* scratch) {
    return block_merge(strided_pairs<C>(part, chunks, blockDim.x), scratch);
}
// The calling thread publishes a pair and counts it: the count's value before (a caller that
// drops it does not wait for the atomic).
template <typename C> __device__ inline unsigned publish_md(double* p, const MD<C>& s, unsigned* count) {
    put_md(p, s);
    __threadfence();  // the pair before the count
    return atomicAdd(count, 1u);
}
// Thread 0 publishes this block's (m, d) of a chunk (or a line's merged pair) and counts it,
// without waiting for the count.
template <typename C> __device__ inline void publish_chunk(double* p, const MD<C>& s, unsigned* count) {
    if (threadIdx.x == 0) publish_md(p, s, count);
}

// ---- thread-block clusters (sm_90 and newer). Templates, so that nothing of this reaches the
// PTX of a program that does not use it (the PTX below does not assemble before sm_90).
// This block's rank in its cluster.
template <int CL> __device__ inline unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// Barrier over every thread of the cluster, split, ordering no memory access: arrive before
// wait, and no thread of the cluster passes wait before every thread has arrived. (Its release
// form, like fence.acq_rel.cluster, compiles to MEMBAR.ALL.GPU, a wait for every outstanding
// memory access of the thread, seen in the SASS for sm_90: the exchange below needs neither.)
template <int CL> __device__ inline void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
template <int CL> __device__ inline void cluster_wait() {
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

// Block-uniform values exchanged over a cluster, round after round, without a cluster barrier
// per round: each block sends its values into every block's receive buffer by remote
// asynchronous stores (st.async), each completing its bytes on the receiver's transaction
// barrier, and a block reads its buffer once its barrier's phase completes. Rounds alternate
// between two barriers and two receive buffers (the caller's): a block sends round k + 1 only
// after it has read round k (program order), so no peer writes a buffer while it is read, and
// every block waits for all of its round's bytes before it goes on (or exits).
template <int CL> struct Mail {
    unsigned long long* bar;  // two transaction barriers in this block's shared memory

    static __device__ unsigned addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
    // The address in the shared memory of cluster block `rank` of what is at p in this block's.
    static __device__ unsigned remote(const void* p, unsigned rank) {
        unsigned r;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr(p)), "r"(rank));
        return r;
    }
    // Thread 0 sets up both barriers (one arrival a phase: its own `expect`); every thread then
    // arrives on the cluster barrier that `opened` waits for, so no block sends to a peer whose
    // barriers are not set up yet. Every thread calls both, open first.
    __device__ void open() const {
        if (threadIdx.x == 0) {
            for (int i = 0; i < 2; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(addr(bar + i)) : "memory");
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        cluster_arrive<CL>();
    }
    __device__ void opened() const { cluster_wait<CL>(); }
    // Once every thread of the block is past its last wait (so every round this block receives
    // is complete and no peer touches its shared memory again): thread 0 invalidates both
    // barriers, as PTX asks before an mbarrier's memory is used for anything else (here: by the
    // next block on the SM).
    __device__ void close() const {
        if (threadIdx.x == 0)
            for (int i = 0; i < 2; ++i) asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(addr(bar + i)) : "memory");
    }
    // Thread 0, once a round: the bytes this block receives in round k.
    __device__ void expect(int k, unsigned bytes) const {
        unsigned long long state;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                     : "=l"(state) : "r"(addr(bar + (k & 1))), "r"(bytes) : "memory");
    }
    // Sends a pair into the place of `slot` (this block's address of it) in block `rank`'s
    // shared memory, counted on that block's barrier of round k. slot aligned to the pair.
    __device__ void send(int k, unsigned rank, const void* slot, double a, double b) const {
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f64 [%0], {%1, %2}, [%3];"
                     ::"r"(remote(slot, rank)), "d"(a), "d"(b), "r"(remote(bar + (k & 1), rank)) : "memory");
    }
    __device__ void send(int k, unsigned rank, const void* slot, float a, float b) const {
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
                     ::"r"(remote(slot, rank)), "f"(a), "f"(b), "r"(remote(bar + (k & 1), rank)) : "memory");
    }
    // Waits until round k's bytes have all arrived; they are then seen by this thread.
    __device__ void wait(int k) const {
        unsigned done;
        do {
            asm volatile("{\n .reg .pred p;\n"
                         " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                         " selp.u32 %0, 1, 0, p;\n}"
                         : "=r"(done) : "r"(addr(bar + (k & 1))), "r"((k >> 1) & 1) : "memory");
        } while (!done);
    }
};

// Merges a block-uniform (m, d) over the CL blocks of the cluster in round k of `mail`, so
// every block gets the same bits: M = the largest m, D = the sum over blocks of d * exp(m - M)
// in a fixed shuffle tree (lane b of warp 0 takes block b's pair). `recv`: [2][CL][2] doubles
// (16-byte aligned) of this block's shared memory; `out`: two more for the broadcast.
template <int CL, typename C>
__device__ inline MD<C> cluster_merge(C m, acc_t d, const Mail<CL>& mail, int k, unsigned rank,
                                      double* recv, double* out) {
    static_assert(CL <= 32, "one lane of warp 0 per block");
    if (threadIdx.x < 32) {
        const unsigned b = threadIdx.x;
        double* round = recv + (k & 1) * 2 * CL;
        if (b == 0) mail.expect(k, CL * 16);
        if (b < CL) mail.send(k, b, round + 2 * rank, double(m), d);
        mail.wait(k);
        const C mb = b < CL ? C(round[2 * b]) : neg_inf<C>();
        const acc_t db = b < CL ? round[2 * b + 1] : 0.0;
        const MD<C> s = group_merge(MD<C>{mb, db}, 32);
        if (b == 0) {
            out[0] = double(s.m);
            out[1] = s.d;
        }
    }
    __syncthreads();
    const MD<C> r{C(out[0]), out[1]};
    __syncthreads();
    return r;
}

}  // namespace csm
