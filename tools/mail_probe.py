"""The cluster exchange alone, to tell a fault of the exchange from one of a sanitizer tool:
`python3 tools/mail_probe.py CLUSTERS [SIZE] [MODE] [SMEM_KIB]` launches CLUSTERS clusters of
SIZE blocks (16 or 8; 256 threads and SMEM_KIB KiB of dynamic shared memory each, to set how many
share an SM). MODE `mail` (the default) runs three rounds of `cluster_merge` over `Mail` (remote
`st.async` stores counted on transaction barriers, kernels/common.cuh) on the pairs
(rank, 1 + rank), then closes the barriers as the kernels do; MODE `barrier` sends the same pairs
by plain remote stores and one cluster barrier (no transaction barrier). Every block's merged
pair is checked against the exact one. Run it under `compute-sanitizer --tool synccheck` at
several cluster counts."""

import sys

import cupy
import numpy as np

from cusoftmax import _kernels

THREADS = 256

SRC = r"""
#include "common.cuh"
namespace csm {
template <int CL>
__global__ void __cluster_dims__(CL, 1, 1) mail_probe(double* out, int mode) {
    __shared__ __align__(16) double recv[2 * 2 * CL], merged[2];
    __shared__ unsigned long long bars[2];
    const Mail<CL> mail{bars};
    const unsigned rank = cluster_rank<CL>();
    MD<float> s{0.0f, 0.0};
    if (mode == 0) {
        mail.open();
        mail.opened();
        for (int k = 0; k < 3; ++k)
            s = cluster_merge<CL>(float(rank), acc_t(1 + rank), mail, k, rank, recv, merged);
        mail.close();
    } else {
        if (threadIdx.x < CL) {  // thread b stores this block's pair into block b's recv
            const unsigned at = Mail<CL>::remote(recv + 2 * rank, threadIdx.x);
            asm volatile("st.shared::cluster.v2.f64 [%0], {%1, %2};" ::"r"(at), "d"(double(rank)), "d"(double(1 + rank)) : "memory");
        }
        asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
        asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
        s = MD<float>::identity();
        for (int b = 0; b < CL; ++b) s.merge(MD<float>{float(recv[2 * b]), recv[2 * b + 1]});
    }
    if (threadIdx.x == 0) {
        out[2 * blockIdx.x] = s.m;
        out[2 * blockIdx.x + 1] = s.d;
    }
}
template __global__ void mail_probe<8>(double*, int);
template __global__ void mail_probe<16>(double*, int);
}  // namespace csm
"""


def main(argv):
    clusters = int(argv[0])
    size = int(argv[1]) if len(argv) > 1 else 16
    mode = argv[2] if len(argv) > 2 else "mail"
    smem = int(argv[3]) * 1024 if len(argv) > 3 else 25 * 1024
    folder = _kernels.kernel_dir()
    code = _kernels.paste_includes(lambda name: SRC if name == "mail_probe.cu" else (folder / name).read_text(),
                                   "mail_probe.cu")
    expr = f"csm::mail_probe<{size}>"
    module = cupy.RawModule(code=code, options=_kernels.options(), name_expressions=(expr,))
    fn = module.get_function(expr)
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    if size > 8:
        from cupy_backends.cuda.api import driver

        driver.funcSetAttribute(fn.kernel.ptr, _kernels._NON_PORTABLE_CLUSTER, 1)
    out = cupy.full(2 * size * clusters, np.nan)
    fn((size * clusters,), (THREADS,), (out, np.int32(mode != "mail")), shared_mem=smem)
    got = out.get().reshape(-1, 2)
    top = size - 1
    want_d = sum((1 + b) * np.exp(np.float64(b - top)) for b in range(size))
    ok = np.all(got[:, 0] == top) and np.allclose(got[:, 1], want_d, rtol=1e-6)
    print(f"mail_probe: {clusters} clusters of {size}, {mode}, {smem // 1024} KiB: "
          f"{'ok' if ok else 'WRONG'} (m {got[0, 0]}, d {got[0, 1]:.9g}, want {want_d:.9g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
