"""The probes' kernels compile with NVRTC for sm_90 (they need clusters or bulk copies): they are
built on kernels/softmax_columns.cu and the shared header, so they keep compiling as those
change. Not in the default test run (pytest's testpaths is tests/); run it on its own:
`python -m pytest dev/probes/test_probes.py` (no GPU needed, NVRTC only)."""

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT)]  # the probes import axis0_cases and cusoftmax

_spec = importlib.util.spec_from_file_location("_compile_checks", ROOT / "tests" / "test_compile.py")
_checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_checks)  # skips this module where CuPy is missing


@pytest.mark.parametrize("name", ["reread_probe", "team_probe"])
def test_axis0_probe_compiles(name):
    """The axis-0 probes' kernels compile without a warning."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    # 177: the slab's constants, declared but unused by the probes' kernels
    assert _checks._compile(probe.source(), f"{name}.cu", list(probe.instantiations().values()),
                            "90", ("-diag-suppress=177",)) == ""
