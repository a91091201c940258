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
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip()
