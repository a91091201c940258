"""cusoftmax: a fast, exact softmax family for GPU arrays (CuPy, PyTorch, JAX, Numba) and NumPy."""

from ._api import softmax
from ._family import log_softmax, log_softmax_vjp, logsumexp, softmax_vjp
from ._topk import softmax_topk

__all__ = ["softmax", "log_softmax", "logsumexp", "softmax_vjp", "log_softmax_vjp",
           "softmax_topk"]
__version__ = "0.1.0"
