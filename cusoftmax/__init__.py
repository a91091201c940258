"""cusoftmax: a fast, exact softmax for GPU arrays (CuPy, PyTorch, JAX, Numba) and NumPy."""

from ._api import softmax

__all__ = ["softmax"]
__version__ = "0.1.0"
