"""cusoftmax: a fast, exact softmax family for GPU arrays (CuPy, PyTorch, JAX, Numba) and NumPy."""

from ._api import log_softmax, log_softmax_vjp, logsumexp, softmax, softmax_topk, softmax_vjp

__all__ = ["softmax", "log_softmax", "logsumexp", "softmax_vjp", "log_softmax_vjp",
           "softmax_topk"]
__version__ = "0.1.0"
