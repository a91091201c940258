"""PyTorch and JAX arrays go in and come back in their own framework, without a copy (DLPack).

    python examples/interop.py

Each part runs where that framework is installed and sees a CUDA GPU; others are skipped.
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import cusoftmax


def torch_part():
    try:
        import torch
    except ImportError:
        return print("PyTorch: not installed, skipped")
    if not torch.cuda.is_available():
        return print("PyTorch: no CUDA device, skipped")
    logits = torch.randn(8, 50_000, device="cuda", dtype=torch.bfloat16)
    probs = cusoftmax.softmax(logits, axis=-1)  # a torch.Tensor on the same device
    err = (probs.float() - torch.softmax(logits.float(), dim=-1)).abs().max().item()
    print(f"PyTorch: {type(probs).__name__} {probs.dtype} on {probs.device}, max diff to torch {err:.1e}")
    cusoftmax.softmax(logits, axis=-1, out=logits)  # in place, on the tensor's own memory
    print("PyTorch: in place, rows sum to", logits.float().sum(dim=-1)[:3].tolist())


def jax_part():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return print("JAX: not installed, skipped")
    if jax.devices()[0].platform != "gpu":
        return print("JAX: no GPU backend, skipped")
    x = jax.random.normal(jax.random.key(0), (16, 4096), dtype=jnp.float32)
    y = cusoftmax.softmax(x, axis=0)  # a jax.Array; JAX arrays are immutable, so no out=
    err = float(jnp.abs(y - jax.nn.softmax(x, axis=0)).max())
    print(f"JAX: {type(y).__name__} {y.dtype}, max diff to jax.nn.softmax {err:.1e}")


if __name__ == "__main__":
    torch_part()
    jax_part()
