"""The kernels compile with NVRTC for sm_80 and sm_90 without a warning (no GPU needed).

By default a covering set: for each kernel template and element type, instantiations chosen so
that every value of every template argument (the load functor, the epilogue op and each
template constant) appears at least once, which reaches each ``if constexpr`` branch of the
template (some 900 expressions, about 70 s on 2 cores). ``CUSOFTMAX_COMPILE=all`` compiles every
instantiation the dispatcher can emit (some 7,000, about 11 min on 2 cores), as CI does in a step
of its own. NVRTC programs compile on a thread each (NVRTC releases the GIL).

Skips only where NVRTC itself is missing."""

import os
import re
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest

from cusoftmax import _kernels

cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
nvrtc = cupy.cuda.nvrtc

ALL = os.environ.get("CUSOFTMAX_COMPILE") == "all"
THREADS = os.cpu_count() or 1
PROGRAM_SIZE = 40  # expressions a program: small enough to spread one file over the threads


def _include_dir():
    pathfinder = pytest.importorskip("cuda.pathfinder")
    found = pathfinder.find_nvidia_header_directory("cudart")
    if found is None:
        pytest.skip("CUDA runtime headers not found (install the cuda12 or cuda13 extra)")
    return found


def covering(items):
    """A subset of the tuples `items` holding every (position, value) that some item holds
    (greedy: each pick adds the most pairs not yet held; ties to the earliest)."""
    need = {(i, v) for t in items for i, v in enumerate(t)}
    chosen = []
    while need:
        best = max(items, key=lambda t: len(need.intersection(enumerate(t))))
        chosen.append(best)
        need.difference_update(enumerate(best))
    return chosen


def expressions(filename, arch, every=ALL):
    """The expressions of `filename` to compile for sm_`arch`: every one the library can launch
    (`every`), else a covering set of each (kernel, element type)'s (ops, template) tuples."""
    made = defaultdict(dict)  # (kernel, type) -> {(*ops, *template): (ops, template)}
    for kernel, dtype_name, template, ops in _kernels.instantiations(clusters=arch >= "90"):
        if _kernels.FILES[kernel] == filename:
            made[kernel, dtype_name][(*ops, *template)] = (ops, template)
    out = []
    for (kernel, dtype_name), items in made.items():
        for flat in list(items) if every else covering(list(items)):
            ops, template = items[flat]
            out.append(_kernels.name_expression(kernel, dtype_name, template, ops))
    return out


def _compile(text, filename, exprs, arch):
    """'' where every expression of `exprs` compiles from `text` for sm_`arch` without a
    warning and is lowered to a kernel of the CUBIN, else what went wrong."""
    options = (*_kernels.options(), f"-arch=sm_{arch}", f"-I{_include_dir()}",
               "--device-as-default-execution-space")
    prog = nvrtc.createProgram(text, filename, (), ())
    try:
        for e in exprs:
            nvrtc.addNameExpression(prog, e)
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError:
            return nvrtc.getProgramLog(prog)
        log = nvrtc.getProgramLog(prog).strip()
        if "warning" in log.lower():
            return log
        unlowered = [e for e in exprs if not nvrtc.getLoweredName(prog, e).startswith("_Z")]
        if unlowered or not nvrtc.getCUBIN(prog):
            return f"no kernel for {unlowered or 'any expression'}"
        return ""
    finally:
        nvrtc.destroyProgram(prog)


@pytest.mark.parametrize("arch", ["80", "90"])
@pytest.mark.parametrize("filename", sorted(set(_kernels.FILES.values())))
def test_kernels_compile(filename, arch):
    try:
        nvrtc.getVersion()
    except Exception as e:
        pytest.skip(f"NVRTC is not loadable: {e}")
    exprs = expressions(filename, arch)
    assert exprs
    text = _kernels.source(filename)
    parts = [exprs[i:i + PROGRAM_SIZE] for i in range(0, len(exprs), PROGRAM_SIZE)]
    with ThreadPoolExecutor(THREADS) as pool:
        logs = list(pool.map(lambda p: _compile(text, filename, p, arch), parts))
    failed = [f"{p[0]} ... ({len(p)} expressions):\n{log}" for p, log in zip(parts, logs) if log]
    assert not failed, "\n\n".join(failed)


def test_the_covering_set_holds_every_argument_value():
    """Each (kernel, type)'s chosen expressions hold every load, op and template value of the
    full set, in fewer expressions."""
    for filename in sorted(set(_kernels.FILES.values())):
        full = expressions(filename, "90", every=True)
        few = expressions(filename, "90", every=False)
        assert set(few) <= set(full) and len(few) <= len(full)
        args = re.compile(r"^(csm::\w+)<(.*)>$")

        def pairs(exprs):
            got = defaultdict(set)
            for e in exprs:
                kernel, inner = args.match(e).groups()
                parts = [p.strip() for p in inner.split(",")]
                typ = next(p for p in parts if not p.startswith("csm::"))
                got[kernel, typ].update(enumerate(parts))
            return got

        assert pairs(full) == pairs(few), filename


def test_header_edit_changes_the_source():
    """CuPy keys its cache on the source string: every header's text must be inside it."""
    folder = _kernels.kernel_dir()
    local = re.compile(r'^#include "[^"]+"[^\n]*$', re.M)
    headers = [local.sub("", path.read_text()) for path in sorted(folder.glob("*.cuh"))]
    assert len(headers) >= 2
    for filename in set(_kernels.FILES.values()):
        text = _kernels.source(filename)
        assert all(h in text for h in headers) and not local.search(text), filename
