"""Kernel time of each segment launch (segment_tiles, segment_fold, segment_fixup) for the bench's
GPU cases, by CUDA events around each launch alone (no host rules in the interval), L2 flushed
first, beside a device copy of the bytes the call moves (x read, y written, the ids read). Prints
one line a case: us of each launch, their sum, and copy / sum.

    python dev/probes/segment_probe.py [dtype ...] [--ids offsets]
"""

import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402

from cusoftmax import _kernels, planning  # noqa: E402
from cusoftmax.bench import _dtype  # noqa: E402
from cusoftmax.bench.segment import GPU_EDGES, gpu_cases  # noqa: E402
from cusoftmax.planning import segment as plans  # noqa: E402


def timed(flush, fn, repeat=20):
    times = []
    for i in range(repeat + 3):
        flush.fill(0)
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        if i >= 3:
            times.append(cupy.cuda.get_elapsed_time(a, b) * 1e3)
    return statistics.median(times)


def main(argv):
    offsets = "--ids" in argv and argv[argv.index("--ids") + 1] == "offsets"
    dtypes = [a for a in argv if not a.startswith("--") and a != "offsets"] or ["float32", "bfloat16"]
    flush = cupy.empty(cupy.cuda.Device().attributes["L2CacheSize"], dtype=cupy.float32)
    tuning, device = planning.active(), cupy.cuda.Device().id
    rng = np.random.default_rng(0)
    for name, n, heads, lengths in gpu_cases(rng, GPU_EDGES):
        count = len(lengths)
        seg = cupy.asarray(np.concatenate(([0], np.cumsum(lengths))) if offsets
                           else np.repeat(np.arange(count), lengths))
        for dt in dtypes:
            dtype = _dtype(cupy, dt)
            x = cupy.asarray(rng.standard_normal((n, heads)).astype(np.float32)).astype(dtype)
            for op in ("segment_softmax", "segment_logsumexp", "segment_softmax_vjp"):
                p = plans.plan(op, n, heads, count, x.itemsize, seg.dtype, offsets, True, tuning)
                lse = op == "segment_logsumexp"
                y = cupy.empty((count, heads) if lse else (n, heads), dtype)
                work = cupy.empty(p.workspace, np.uint8)
                flag = cupy.zeros(1, np.int32)
                tiles = _kernels.bind(p.tiles, None, dtype.name, device, tuning)
                fold = _kernels.bind(p.fold, None, dtype.name, device, tuning)
                word = _kernels.load_word("Scaled", 1.0)
                # the fold and fixup read the order flag where their plans take it as an input
                folds = (flag, y, work) if p.fold.inputs else (y, work)
                got = {"tiles": timed(flush, lambda: tiles(x, x, seg, y, work, flag, load=word)),
                       "fold": timed(flush, lambda: fold(*folds))}
                if p.fixup is not None:
                    fixup = _kernels.bind(p.fixup, None, dtype.name, device, tuning)
                    fixes = (x, x, work, flag, y) if p.fixup.inputs == 4 else (x, x, work, y)
                    got["fixup"] = timed(flush, lambda: fixup(*fixes, load=word))
                assert int(flag[0]) == 0
                moved = x.nbytes * (3 if op.endswith("_vjp") else 1) + (0 if offsets else seg.nbytes) \
                    + (y.nbytes if not op.endswith("_vjp") else 0)
                buf = cupy.empty(moved // 2, np.uint8)
                dst = cupy.empty_like(buf)
                copy = timed(flush, lambda: cupy.cuda.runtime.memcpyAsync(
                    dst.data.ptr, buf.data.ptr, buf.nbytes, cupy.cuda.runtime.memcpyDeviceToDevice,
                    cupy.cuda.get_current_stream().ptr))
                total = sum(got.values())
                print(f"{op} {dt} {name} ({'offsets' if offsets else 'ids'}, {count} segments): "
                      + ", ".join(f"{k} {v:.1f}" for k, v in got.items())
                      + f", all {total:.1f} us; copy {copy:.1f} us, of copy {copy / total:.2f}",
                      flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
