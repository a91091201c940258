"""README's code runs as written and prints what its comments say (the host parts; the CuPy
lines run where there is a GPU)."""

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import numpy as np
import pytest

from _support import GPU_REASON

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_readme_code_runs_and_prints_its_comments():
    assert len(BLOCKS) >= 3
    first = BLOCKS[0]
    host, _, gpu = first.partition("import cupy")
    printed = io.StringIO()
    scope = {}
    with contextlib.redirect_stdout(printed):
        exec(host, scope)
    shown = [line[2:] for line in host.splitlines() if line.startswith("# ")]
    assert printed.getvalue().splitlines() == shown
    if GPU_REASON is None:
        exec("import cupy" + gpu, scope)
    for block in BLOCKS[1:]:
        if "dask" in block:
            pytest.importorskip("dask.array")
        if "import jax" in block:
            if importlib.util.find_spec("jax") is None:  # the jax extra
                continue
            exec(block, scope)
            # the gradient of -sum(t * log_softmax(x)): softmax(x) * sum(t) - t
            want = scope["cusoftmax"].softmax(scope["x"]) - np.eye(4, 1000)
            assert np.allclose(np.asarray(scope["dx"]), want, atol=1e-6)
            continue
        exec(block, scope)
    assert scope["pd"].shape == (4, 1000) and scope["values"].shape == (4, 5)
