"""What the axis-0 kernels' access pattern allows: a plain copy of a C-contiguous float32 matrix
(n x inner) walked as the slab walks it, a block taking a strip of W bytes of each row over `per`
rows (block r of a line's CL blocks), 16-byte loads, 4 in flight a thread, each stored at the same
place in y. Timed as the benchmark times (L2 flushed by a 256 MiB write, CUDA events, median of
30), against a device-to-device copy of the same bytes. Run on a GPU: `python3
dev/probes/strided_copy_probe.py` (run s20-9 in docs/history/benchmarks-log.md)."""

import cupy
import numpy as np

src = r'''
extern "C" __global__ void strip_copy(const float4* x, float4* y, long long n, long long inner4, int w4, int CL) {
    const long long line = blockIdx.x / CL, rank = blockIdx.x % CL;
    const long long strips = inner4 / w4, per = (n + CL - 1) / CL;
    const long long strip = line % strips, o = line / strips;
    const int pack = threadIdx.x % w4, lane = threadIdx.x / w4, lanes = blockDim.x / w4;
    const long long k0 = rank * per, k1 = min(n, k0 + per);
    const float4* xs = x + strip * w4 + pack;
    float4* ys = y + strip * w4 + pack;
    for (long long k = k0 + lane; k < k1; k += 4 * lanes) {
        float4 v[4];
        #pragma unroll
        for (int b = 0; b < 4; ++b) { long long kb = k + b * lanes; if (kb < k1) v[b] = __ldcs(xs + kb * inner4); }
        #pragma unroll
        for (int b = 0; b < 4; ++b) { long long kb = k + b * lanes; if (kb < k1) __stcs(ys + kb * inner4, v[b]); }
    }
}
'''
k = cupy.RawKernel(src, "strip_copy")
flush = cupy.empty(2**28, dtype=cupy.uint8)
s, e = cupy.cuda.Event(), cupy.cuda.Event()
def timed(op, n=30):
    ts = []
    for _ in range(n):
        flush.fill(1)
        s.record(); op(); e.record(); e.synchronize()
        ts.append(cupy.cuda.get_elapsed_time(s, e) * 1e3)
    return float(np.median(ts))
for n, inner in ((4096, 16384), (16384, 4096)):
    x = cupy.random.random((n, inner), dtype=cupy.float32); y = cupy.empty_like(x)
    cp = timed(lambda: y.data.copy_from_device_async(x.data, x.nbytes))
    print(f"{n}x{inner} float32: memcpy {cp:.1f} us")
    for wbytes in (64, 128, 256, 1024):
        w4 = wbytes // 16
        for CL, threads in ((8, 256), (16, 256), (4, 256), (1, 256)):
            strips = inner // (w4 * 4)
            per = (n + CL - 1) // CL
            if per * wbytes > 227 * 1024 and CL > 1: continue
            grid = strips * CL
            t = timed(lambda: k((grid,), (threads,), (x, y, np.int64(n), np.int64(inner // 4), np.int32(w4), np.int32(CL))))
            ok = bool(cupy.array_equal(x, y)) if (wbytes, CL) == (128, 8) else None
            print(f"  strip {wbytes:4d} B, {CL:2d} blocks a line ({per} rows, {per*wbytes//1024} KiB each): {t:7.1f} us = {cp/t:.3f} of memcpy" + ("" if ok is None else f" (exact: {ok})"))
