"""README's code runs as written and prints what its comments say (the host parts; the CuPy
lines run where there is a GPU)."""

import contextlib
import io
import re
from pathlib import Path

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
        exec(block, scope)
    assert scope["pd"].shape == (4, 1000) and scope["values"].shape == (4, 5)
