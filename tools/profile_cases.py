"""One call of cusoftmax per case, for a profiler: `ncu ... python3 tools/profile_cases.py`.

Cases are 'dtype:rows:cols:axis' arguments (default: one per kernel family at 2**26 elements)."""

import sys

import cupy
import numpy as np

import cusoftmax

DEFAULT = ["float32:1048576:64:-1", "bfloat16:65536:1024:-1", "bfloat16:16384:4096:-1",
           "float32:2048:32768:-1", "bfloat16:256:262144:-1", "bfloat16:4096:16384:0"]


def main(cases):
    for case in cases:
        name, rows, cols, axis = case.split(":")
        dtype = np.dtype(name) if name != "bfloat16" else np.dtype(__import__("ml_dtypes").bfloat16)
        x = (cupy.random.default_rng(0).standard_normal((int(rows), int(cols)), dtype=cupy.float32) * 3).astype(dtype)
        cusoftmax.softmax(x, axis=int(axis))
        cupy.cuda.Device().synchronize()
        print("ran", case, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT)
