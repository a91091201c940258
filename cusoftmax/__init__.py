"""cusoftmax: a fast, exact softmax family for GPU arrays (CuPy, PyTorch, JAX, Numba) and NumPy."""

import sys

from ._api import (log_softmax, log_softmax_vjp, logsumexp, segment_log_softmax,
                   segment_log_softmax_vjp, segment_logsumexp, segment_softmax,
                   segment_softmax_vjp, softmax, softmax_topk, softmax_vjp)

if "torch" in sys.modules:  # torch.ops.cusoftmax.* now; else with the first tensor passed
    from . import _torch  # noqa: F401

__all__ = ["softmax", "log_softmax", "logsumexp", "softmax_vjp", "log_softmax_vjp",
           "softmax_topk", "segment_softmax", "segment_log_softmax", "segment_logsumexp",
           "segment_softmax_vjp", "segment_log_softmax_vjp"]  # _ops.NAMES (tests/test_ops.py)
__version__ = "0.1.0"
