"""PyTorch, JAX and Numba CUDA arrays go in and come back in their own framework, zero-copy."""

import numpy as np
import pytest

import cusoftmax
from cusoftmax._accuracy import violations
from _support import assert_softmax, reference, requires_gpu

pytestmark = requires_gpu


def _cuda_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    return torch


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_torch(dtype):
    torch = _cuda_torch()
    dt = getattr(torch, dtype)
    x = (torch.randn(33, 300, device="cuda") * 4).to(dt)
    y = cusoftmax.softmax(x, axis=1)
    assert isinstance(y, torch.Tensor) and y.device == x.device and y.dtype == dt
    ref = reference(x.double().cpu().numpy(), 1)  # the bf16/f16 values are exact in float64
    msg = violations(y.double().cpu().numpy(), ref, dtype)
    assert msg is None, msg


def test_torch_in_place_is_zero_copy():
    torch = _cuda_torch()
    x = torch.randn(8, 1000, device="cuda")
    ref = torch.softmax(x.double(), dim=-1)
    ptr = x.data_ptr()
    assert cusoftmax.softmax(x, out=x) is x
    assert x.data_ptr() == ptr
    assert torch.allclose(x.double(), ref, rtol=1e-5, atol=1e-7)


def test_torch_cpu_tensor_stays_on_the_host():
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 9)
    y = cusoftmax.softmax(x)
    assert isinstance(y, torch.Tensor) and y.device.type == "cpu"
    assert_softmax(y.numpy(), x.numpy(), -1)


def test_jax():
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX has no GPU backend")
    import jax.numpy as jnp

    x = jax.device_put(jnp.asarray(np.random.default_rng(0).standard_normal((16, 257)), jnp.float32), gpu)
    y = cusoftmax.softmax(x, axis=-1)
    assert isinstance(y, jax.Array) and y.dtype == jnp.float32
    assert_softmax(np.asarray(y), np.asarray(x), -1)
    xb = x.astype(jnp.bfloat16)
    yb = cusoftmax.softmax(xb, axis=0)
    assert isinstance(yb, jax.Array) and yb.dtype == jnp.bfloat16
    with pytest.raises(TypeError, match="immutable"):
        cusoftmax.softmax(x, out=x)


def test_numba():
    cuda = pytest.importorskip("numba.cuda")
    if not cuda.is_available():
        pytest.skip("Numba sees no CUDA device")
    host = np.random.default_rng(1).standard_normal((10, 70))
    x = cuda.to_device(host)
    y = cusoftmax.softmax(x)
    assert cuda.is_cuda_array(y) and type(y).__module__.startswith("numba")
    assert_softmax(y.copy_to_host(), host, -1)
