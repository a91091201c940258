"""Every kernel instantiation the dispatcher can emit, for every fused operation, compiles with
NVRTC for sm_80 and sm_90 (the probes in dev/probes/ have their own compile test there, outside
the default run).

Runs without a GPU: NVRTC needs no device. Skips only where NVRTC itself is missing."""

import re

import numpy as np
import pytest

from cusoftmax import _kernels, planning

cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
nvrtc = cupy.cuda.nvrtc


def _include_dir():
    pathfinder = pytest.importorskip("cuda.pathfinder")
    found = pathfinder.find_nvidia_header_directory("cudart")
    if found is None:
        pytest.skip("CUDA runtime headers not found (install the cuda12 or cuda13 extra)")
    return found


def _expressions(filename, arch):
    """Every expression the library can launch from `filename`."""
    for kernel, dtype_name, template, ops in _kernels.instantiations(clusters=arch >= "90"):
        if _kernels.FILES[kernel] == filename:
            yield _kernels.name_expression(kernel, dtype_name, template, ops)


def _compiles(text, filename, exprs, arch, extra=()):
    """Every expression of `exprs` compiles from `text` for sm_`arch` (NVRTC options `extra`
    besides the library's) without a warning."""
    try:
        nvrtc.getVersion()
    except Exception as e:
        pytest.skip(f"NVRTC is not loadable: {e}")
    assert exprs
    options = (*_kernels.options(), f"-arch=sm_{arch}", f"-I{_include_dir()}",
               "--device-as-default-execution-space", *extra)
    prog = nvrtc.createProgram(text, filename, (), ())
    try:
        for e in exprs:
            nvrtc.addNameExpression(prog, e)
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError:
            pytest.fail(nvrtc.getProgramLog(prog))
        log = nvrtc.getProgramLog(prog).strip()
        assert "warning" not in log.lower(), log
        for e in exprs:
            assert nvrtc.getLoweredName(prog, e).startswith("_Z")
        assert len(nvrtc.getCUBIN(prog)) > 0
    finally:
        nvrtc.destroyProgram(prog)


@pytest.mark.parametrize("arch", ["80", "90"])
@pytest.mark.parametrize("filename", sorted(set(_kernels.FILES.values())))
def test_every_instantiation_compiles(filename, arch):
    _compiles(_kernels.source(filename), filename, list(_expressions(filename, arch)), arch)


def test_header_edit_changes_the_source():
    """CuPy keys its cache on the source string: every header's text must be inside it."""
    folder = _kernels.kernel_dir()
    local = re.compile(r'^#include "[^"]+"[^\n]*$', re.M)
    headers = [local.sub("", path.read_text()) for path in sorted(folder.glob("*.cuh"))]
    assert len(headers) >= 2
    for filename in set(_kernels.FILES.values()):
        text = _kernels.source(filename)
        assert all(h in text for h in headers) and not local.search(text), filename
