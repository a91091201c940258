"""A softmax classifier trained by a jitted step: the loss is a cross-entropy of
cusoftmax.log_softmax and jax.grad differentiates through it. On an NVIDIA GPU the jitted step
launches the family's kernels from the compiled program (a custom call); on JAX's CPU backend
the same step runs as XLA operations.

    pip install ".[cuda13,jax]" && python examples/jax_jit.py
"""

import jax
import jax.numpy as jnp
import numpy as np

import cusoftmax

rng = np.random.default_rng(0)
classes, features, n = 10, 32, 4096
centers = rng.normal(0, 2, (classes, features)).astype(np.float32)
labels = rng.integers(0, classes, n)
data = jnp.asarray(centers[labels] + rng.normal(0, 1, (n, features)).astype(np.float32))
targets = jax.nn.one_hot(labels, classes)


def loss(params, x, t):
    w, b = params
    return -jnp.mean(jnp.sum(t * cusoftmax.log_softmax(x @ w + b, axis=-1), axis=-1))


@jax.jit
def step(params, x, t, lr=0.5):
    value, grads = jax.value_and_grad(loss)(params, x, t)
    return [p - lr * g for p, g in zip(params, grads)], value


params = [jnp.zeros((features, classes)), jnp.zeros(classes)]
for _ in range(60):
    params, value = step(params, data, targets)
w, b = params
accuracy = float(jnp.mean(jnp.argmax(data @ w + b, axis=-1) == labels))
print(f"jitted on {jax.default_backend()}: loss {float(value):.3f}, accuracy {accuracy:.3f}")
lowered = step.lower(params, data, targets).as_text()
print("the family's kernels in the program:", "cusoftmax_launch" in lowered)
assert accuracy > 0.9, accuracy
