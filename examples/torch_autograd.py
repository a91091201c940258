"""A small classifier trained through cusoftmax's torch operators, eager and under
torch.compile: the loss is an NLL of cusoftmax.log_softmax, so the backward pass runs the
family's VJP (on the GPU where torch sees one, else on the host).

    pip install ".[cuda13,torch]" && python examples/torch_autograd.py
"""

import torch

import cusoftmax

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
classes, features, n = 10, 32, 4096
centers = torch.randn(classes, features, device=device) * 2
labels = torch.randint(0, classes, (n,), device=device)
data = centers[labels] + torch.randn(n, features, device=device)


def loss_of(model, x, y):
    return torch.nn.functional.nll_loss(cusoftmax.log_softmax(model(x), axis=-1), y)


def train(step_fn, model, steps=60):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(steps):
        opt.zero_grad()
        loss = step_fn(model, data, labels)
        loss.backward()
        opt.step()
    return loss.item()


# Without a GPU: compiled by aot_eager (traced forward and backward, no C++ toolchain needed).
backend = "inductor" if device == "cuda" else "aot_eager"
for name, fn in (("eager", loss_of), ("compiled", torch.compile(loss_of, fullgraph=True,
                                                                 backend=backend))):
    model = torch.nn.Linear(features, classes).to(device)
    final = train(fn, model)
    with torch.no_grad():
        accuracy = (model(data).argmax(-1) == labels).float().mean().item()
    print(f"{name} on {device}: loss {final:.3f}, accuracy {accuracy:.3f}")
    assert accuracy > 0.9, accuracy
