"""Tensors past 2**31 elements (int32 offsets would wrap) and the accuracy of very long rows.

Marked `large`: they need several GB of GPU memory and skip with the reason where it is missing.
On the H200 they all run."""

import numpy as np
import pytest

import cusoftmax
from _support import BF16, requires_gpu, to_host

cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
pytestmark = [requires_gpu, pytest.mark.large]


def need_gib(gib):
    free = cupy.cuda.Device().mem_info[0]
    if free < gib * 2**30:
        pytest.skip(f"needs {gib} GiB of free GPU memory, {free / 2**30:.1f} GiB free")


def row_stats(row):
    """float64 max and sum of exp(x - max) of one huge row, in slices."""
    step = 2**27
    m = max(float(row[i : i + step].max()) for i in range(0, row.size, step))
    d = sum(float(cupy.exp(row[i : i + step].astype(cupy.float64) - m).sum())
            for i in range(0, row.size, step))
    return m, d


def check_samples(x_row, y_row, m, d, rtol, atol):
    n = x_row.size
    idx = np.unique(np.concatenate([np.arange(1000), np.arange(n - 1000, n),
                                    np.random.default_rng(0).integers(0, n, 2000)]))
    xs = to_host(x_row[cupy.asarray(idx)]).astype(np.float64)
    ys = to_host(y_row[cupy.asarray(idx)]).astype(np.float64)
    ref = np.exp(xs - m) / d
    assert np.all(np.abs(ys - ref) <= atol + rtol * ref), np.max(np.abs(ys - ref) / ref)


@pytest.mark.skipif(BF16 is None, reason="ml_dtypes is not installed")
def test_one_row_longer_than_int32():
    need_gib(24)
    n = 2**31 + 17
    x = cupy.random.default_rng(1).standard_normal(n, dtype=cupy.float32).astype(BF16)
    y = cusoftmax.softmax(x)
    m, d = row_stats(x)
    check_samples(x, y, m, d, 8e-3, 1e-6)
    total = sum(float(y[i : i + 2**27].astype(cupy.float64).sum()) for i in range(0, n, 2**27))
    assert abs(total - 1.0) < 8e-3


@pytest.mark.skipif(BF16 is None, reason="ml_dtypes is not installed")
@pytest.mark.parametrize("method", [None, "online", "cluster", "grid"])
def test_many_rows_past_int32(method):
    if method == "cluster" and int(cupy.cuda.Device().compute_capability) < 90:
        pytest.skip("thread-block clusters need compute capability 9.0")
    need_gib(24)
    rows, cols = 65537, 32768  # 2**31 + 32768 elements
    x = cupy.random.default_rng(2).standard_normal((rows, cols), dtype=cupy.float32).astype(BF16)
    y = cusoftmax.softmax(x, method=method)
    for r in (0, 1, 40000, rows - 2, rows - 1):  # rows whose offsets pass 2**31
        m, d = row_stats(x[r])
        check_samples(x[r], y[r], m, d, 8e-3, 1e-6)
    sums = cupy.concatenate([y[i : i + 4096].astype(cupy.float32).sum(axis=1)
                             for i in range(0, rows, 4096)])
    assert float(cupy.abs(sums - 1).max()) < 8e-3


def test_normaliser_of_1e8_float32_row():
    need_gib(4)
    n = 10**8
    x = cupy.random.default_rng(3).standard_normal(n, dtype=cupy.float32) * 3
    y = cusoftmax.softmax(x)
    m, d = row_stats(x)
    check_samples(x, y, m, d, 1e-5, 1e-7)
    total = float(y.astype(cupy.float64).sum())
    assert abs(total - 1.0) < 1e-6, total - 1.0
