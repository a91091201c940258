"""Softmax over an axis cut into several Dask chunks: on a GPU cluster, or on the host.

    pip install ".[cuda12,dask-cuda]" && python examples/dask_softmax.py   (a GPU cluster)
    pip install ".[dask]" && python examples/dask_softmax.py               (no GPU)

With a usable GPU and dask_cuda installed: a dask_cuda.LocalCUDACluster (one worker per GPU of
this host) and a Dask array of CuPy chunks. Elsewhere: NumPy chunks on Dask's local threaded
scheduler. Either way each chunk gives the (max, sum) state of its part of every row, the states
merge in a tree, and each chunk is normalised from its rows' merged state; nothing runs until
compute().
"""

import contextlib

import dask
import dask.array as da
import numpy as np

import cusoftmax


def gpu_cluster(stack):
    """cupy, with a LocalCUDACluster and its client entered on `stack` (the default scheduler
    until the stack closes); or None with the reason printed."""
    try:
        import cupy
        from dask_cuda import LocalCUDACluster
        from distributed import Client

        gpus = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no CuPy, no driver, no device, no dask_cuda
        print(f"No GPU cluster ({type(e).__name__}: {e}).")
        print("NumPy chunks on Dask's local threaded scheduler instead: same results, same API.\n")
        return None
    print(f"LocalCUDACluster: one worker for each of this host's {gpus} GPU(s).")
    stack.enter_context(Client(stack.enter_context(LocalCUDACluster())))
    return cupy


def main():
    scores = np.random.default_rng(0).standard_normal((64, 100_000)).astype(np.float32) * 3
    with contextlib.ExitStack() as stack:
        cupy = gpu_cluster(stack)
        x = da.from_array(scores, chunks=(32, 25_000))  # 4 chunks along the softmax axis
        if cupy is not None:
            x = x.map_blocks(cupy.asarray)  # each chunk moves to its worker's GPU
        else:
            stack.enter_context(dask.config.set(scheduler="threads"))
        p = cusoftmax.softmax(x, axis=1)  # lazy: a graph of tasks, nothing computed yet
        lse = cusoftmax.logsumexp(x, axis=1)
        chunk = type(p._meta)
        print(f"softmax of {x.shape} {x.dtype} in {x.numblocks} chunks: {len(p.__dask_graph__())}"
              f" tasks, result chunks of {chunk.__module__}.{chunk.__name__}")
        p, lse = dask.compute(p, lse)
    if cupy is not None:
        p, lse = cupy.asnumpy(p), cupy.asnumpy(lse)

    x64 = scores.astype(np.float64)  # the float64 reference: one call on the whole array
    ref, ref_lse = cusoftmax.softmax(x64, axis=1), cusoftmax.logsumexp(x64, axis=1)
    within = bool(np.all(np.abs(p - ref) <= 1e-7 + 1e-5 * np.abs(ref)))  # float32's bound
    print(f"against one float64 call: softmax within float32's bound (1e-5 relative + 1e-7): {within}; "
          f"logsumexp off by {float(np.max(np.abs(lse - ref_lse))):.1e} at most")
    print("rows sum to 1:", np.allclose(p.sum(axis=1, dtype=np.float64), 1.0, atol=1e-5))
    assert within and np.allclose(lse, ref_lse, rtol=1e-6, atol=0)


if __name__ == "__main__":
    main()
