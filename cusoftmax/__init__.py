"""cusoftmax: a fast, exact softmax family for GPU arrays (CuPy, PyTorch, JAX, Numba) and NumPy."""

import sys

from ._api import (log_softmax, log_softmax_vjp, logsumexp, segment_log_softmax,
                   segment_log_softmax_vjp, segment_logsumexp, segment_softmax,
                   segment_softmax_vjp, softmax, softmax_topk, softmax_vjp)
from . import _ops

if "torch" in sys.modules:  # torch.ops.cusoftmax.* now; else with the first tensor passed
    from . import _torch  # noqa: F401

__all__ = list(_ops.NAMES)  # every op declared in _ops, in its order
__version__ = "0.1.0"
