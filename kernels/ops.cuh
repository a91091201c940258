// Operations: what a kernel family loads and what it writes. Every __global__ kernel takes a load
// functor type Ld and an epilogue op type Ep as its first two template parameters; a new
// operation is a new pair of these, not a new kernel.
//
// Load (Ld): `static void load(C (&v)[V])`, called on each pack's values in the compute type
// where a kernel has just converted the pack from memory (unpack, unpack_word); it may transform
// them in place. The reductions (max, sum of exp) and the writes see what it leaves.
// `BITS`: true where load leaves the values as they are; the maxima taken on packs' bits
// (Staged::max by pack_max, the slab's half pairs) require it.
//
// Epilogue (Ep): per slice, from the slice's max m and its sum d of exp(x - m):
//   C constant(C m, D d)              the slice's constant k (D: the kernel's sum type)
//   C shifted_writes(C m, C k)        k for writes whose exps are by exp_shifted against m
//                                     where the slice's sum was not (shift_fix)
//   C apply<SHIFTED>(C x, C m, C s, const C& k)   an element's output from its loaded value x
//                                     (SHIFTED: exps by exp_shifted against s = shift_of(m))
//   C apply_term(C e, C k)            the same from its term e = exp(x - m), where a kernel keeps
//                                     the terms of its sum in place of x (registers, flat, and
//                                     the block and cluster kernels of double)
#pragma once
#include "common.cuh"

namespace csm {

// x as it is in memory.
struct Plain {
    static constexpr bool BITS = true;
    template <int V, typename C> __device__ static void load(C (&)[V]) {}
};

// y = exp(x - m) / d, as e * (1 / d) (scale_of).
struct Softmax {
    template <typename C, typename D> __device__ static C constant(C, D d) { return scale_of(d, C()); }
    template <typename C> __device__ static C shifted_writes(C m, C k) { return k * shift_fix(m); }
    // k by reference: read after the exp, which keeps the columns kernels' PTX (dev/ptx_diff.py).
    template <bool SHIFTED, typename C> __device__ static C apply(C x, C m, C s, const C& k) {
        return exp_by<SHIFTED>(x, m, s) * k;
    }
    template <typename C> __device__ static C apply_term(C e, C k) { return e * k; }
};

}  // namespace csm
