"""NumPy implementation for host arrays: the same semantics as the kernels, no GPU needed."""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, axes: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Softmax of ``x`` over ``axes`` in ``dtype`` (float64 and longdouble computed in their
    own type, the rest in float32, sums in float64 or wider). NaN or +inf in a slice, or a slice
    of all -inf, give NaN there."""
    compute = dtype if dtype in (np.float64, np.longdouble) else np.float32
    xc = np.asarray(x, dtype=compute)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        e = np.exp(xc - np.max(xc, axis=axes, keepdims=True))
        d = np.sum(e, axis=axes, keepdims=True, dtype=np.promote_types(compute, np.float64))
        return np.asarray(e * (1.0 / d).astype(compute)).astype(dtype, copy=False)
