// normalize<Ld, Ep, T, V>: Ep's outputs of rows of n contiguous elements (row r at x + r * ldx,
// y + r * ldy) from each row's given max m and constant k (a state merged elsewhere: Dask's
// chunks of a row, cusoftmax/_dask.py), one read and one write; blocks take (row, piece) items
// t, t + gridDim.x, ... of `piece` elements.
#include "common.cuh"
#include "ops.cuh"

#if !defined(CSM_NORMALIZE_THREADS)
#error "normalize.cu needs -DCSM_NORMALIZE_THREADS from the loader"
#endif

namespace csm {

[[maybe_unused]] constexpr int NORMALIZE_THREADS = CSM_NORMALIZE_THREADS;  // threads a block: walk_run's steps

// mk: row r's m and k at mk[2r], mk[2r + 1], in the compute type (m as Ld loads x: the max of
// the loaded values). `piece`: a multiple of the walk's step (NORMALIZE_THREADS * V), below 2^31.
template <class Ld, class Ep, typename T, int V>
__global__ void __launch_bounds__(NORMALIZE_THREADS)
    normalize(const T* x, const compute_t<T>* mk, T* y, long long rows, long long n, long long ldx,
              long long ldy, long long piece, const Ld ld) {
    using C = compute_t<T>;
    if (blockDim.x != NORMALIZE_THREADS) __trap();
    const long long pieces = (n + piece - 1) / piece;
    for (long long t = blockIdx.x; t < rows * pieces; t += gridDim.x) {
        const long long row = t / pieces, begin = t % pieces * piece;
        const C m = mk[2 * row], k = mk[2 * row + 1];
        write_run<Ld, Ep, false, NORMALIZE_THREADS, T, V>(ld, x + row * ldx + begin, y + row * ldy + begin,
                                                          int(min(piece, n - begin)), m, k);
    }
}

}  // namespace csm
