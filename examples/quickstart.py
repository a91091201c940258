"""Quickstart: softmax of a batch of scores on the GPU, or on the host where there is none.

    python examples/quickstart.py
"""

import numpy as np

import cusoftmax
from cusoftmax._arrays import no_gpu_reason


def gpu_module():
    """CuPy when a CUDA device is usable, else None with the reason printed."""
    reason = no_gpu_reason()
    if reason is None:
        import cupy

        return cupy
    print(f"{reason[0].upper()}{reason[1:]}.")
    print("Computing on the host with NumPy instead: same results, same API.\n")
    return None


def main():
    scores = np.random.default_rng(0).standard_normal((4096, 1000)).astype(np.float32) * 3
    xp = gpu_module() or np
    x = xp.asarray(scores)

    p = cusoftmax.softmax(x, axis=-1)  # a CuPy array in, a CuPy array out (NumPy likewise)
    where = f"on {xp.cuda.runtime.getDeviceProperties(0)['name'].decode()}" if xp is not np else "on the host"
    print(f"softmax of {x.shape} {x.dtype} {where}: {type(p).__module__}.{type(p).__name__}")

    p_host = p.get() if xp is not np else p
    print("rows sum to 1:", np.allclose(p_host.sum(axis=-1, dtype=np.float64), 1.0, atol=1e-5))
    print("largest probability in row 0:", float(p_host[0].max()), "at column", int(p_host[0].argmax()))

    # Any axis, tuples of axes, and the edge cases SciPy documents.
    print("over axis 0:", cusoftmax.softmax(x, axis=0).shape)
    special = xp.asarray([[0.0, -np.inf, np.log(3.0)], [1.0, np.nan, 2.0]])
    print("with -inf and NaN:\n", cusoftmax.softmax(special, axis=1))


if __name__ == "__main__":
    main()
