"""Every example runs to the end (on the GPU where there is one, else on the host)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script):
    if script.name == "torch_autograd.py":
        pytest.importorskip("torch")  # the torch extra
    if script.name == "dask_softmax.py":
        pytest.importorskip("dask")  # the dask extra
    if script.name == "jax_jit.py":
        pytest.importorskip("jax")  # the jax extra
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip()


def test_the_dask_example_needs_only_its_extra():
    """`pip install ".[dask]" && python examples/dask_softmax.py` works: the example imports
    nothing past NumPy, Dask and the library (CuPy and dask_cuda only where a GPU cluster is
    tried, inside a try)."""
    import ast

    tree = ast.parse((ROOT / "examples" / "dask_softmax.py").read_text())
    top = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    top |= {n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert top <= {"contextlib", "dask", "numpy", "cusoftmax"}, top
