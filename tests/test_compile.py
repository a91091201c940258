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

import numpy as np
import pytest

from cusoftmax import _kernels, planning
from cusoftmax.planning import segment
from cusoftmax._layout import Layout

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


def _compile(text, filename, exprs, arch, extra=()):
    """'' where every expression of `exprs` compiles from `text` for sm_`arch` (with the
    `extra` options) without a warning and is lowered to a kernel of the CUBIN, else what went
    wrong."""
    options = (*_kernels.options(), f"-arch=sm_{arch}", f"-I{_include_dir()}",
               "--device-as-default-execution-space", *extra)
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


H200 = planning.Limits(sm_count=132, smem_per_block=232448, capability=(9, 0),
                       smem_per_sm=233472)


def _plans():
    """(plan, layout, dtype name) of every kernel the planners emit, found by sweeping row
    lengths, batch sizes, strided axes and forced methods on the H200's stated limits (no GPU)."""
    found = {}

    def keep(plan, layout, dtype):
        if plan is not None:
            found.setdefault((plan.kernel, plan.ops), (plan, layout, dtype))

    for itemsize, dtype in ((2, "bfloat16"), (4, "float32"), (8, "float64")):
        for n in (1, 3, 32, 100, 517, 2049, 16384, 65537, 2**20, 2**23):
            for rows in (1, 7, 1000, 2**17):
                if rows * n > 2**31:
                    continue
                rows_layout = Layout(rows, n, 1, (n, 1), (n, 1))
                strided = Layout(1, n, rows, (0, rows), (0, rows))
                for op, load in (("softmax", "Plain"), ("log_softmax", "Scaled"),
                                 ("softmax", "Masked")):
                    for method in (None, *planning.METHODS):
                        for layout in (rows_layout, strided):
                            try:
                                p = planning.plan(layout, itemsize, (0, 0), H200, method,
                                                  op=op, load=load)
                            except ValueError:  # a forced method that cannot run here
                                continue
                            keep(p, layout, dtype)
                for layout in (rows_layout, strided):
                    keep(planning.reduce_plan(layout, itemsize, 0, H200), layout, dtype)
                    for op in planning.VJPS:
                        keep(planning.vjp_plan(layout, itemsize, (0, 0, 0), H200, op=op),
                             layout, dtype)
                keep(planning.normalize_plan(rows_layout, itemsize, (0, 0), H200), rows_layout,
                     dtype)
                if dtype in planning.TOPK_TYPES:
                    for k in (1, 8, 256):
                        if k <= n:
                            keep(planning.topk_plan(rows, n, n, k, False, itemsize, 0, H200),
                                 None, dtype)
        for op in segment.EPILOGUES:
            if dtype not in segment.TYPES[op]:
                continue
            for cols in (1, 5):
                p = segment.plan(op, 10**5, cols, 77, itemsize, np.int64, False, True,
                                 planning.TUNING)
                for launch in (p.tiles, p.fold, p.fixup):
                    keep(launch, None, dtype)
    return found


_ENTRY = re.compile(r"\.entry\s+(\S+)\s*\((.*?)\)", re.S)
# A parameter of a PTX entry: its type and, for a byte array (a struct), its length.
_PARAM = re.compile(
    r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)(?:\s+\.ptr[^\n,]*?)?\s+\S+?(?:\[(\d+)\])?\s*(?:,|$)",
    re.M)


def test_launch_slots_match_the_kernels_signatures():
    """Every kernel's parameters, read from its PTX, are what the launcher passes: the arrays'
    addresses (and the workspace's) as 64-bit words, then ``plan.args``' integers, then the load
    functor's struct in at most LOAD_SLOTS 8-byte slots (_kernels._launcher)."""
    try:
        nvrtc.getVersion()
    except Exception as e:
        pytest.skip(f"NVRTC is not loadable: {e}")
    plans = _plans()
    assert {k for k, _ in plans} == set(_kernels.FILES), set(_kernels.FILES) - {k for k, _ in plans}
    by_file = {}
    for (kernel, ops), (plan, layout, dtype) in plans.items():
        expr = _kernels.name_expression(kernel, dtype, plan.template, plan.ops)
        by_file.setdefault(_kernels.FILES[kernel], []).append((expr, plan, layout))
    options = (*_kernels.options(), "-arch=sm_90", f"-I{_include_dir()}",
               "--device-as-default-execution-space")
    for filename, items in sorted(by_file.items()):
        prog = nvrtc.createProgram(_kernels.source(filename), filename, (), ())
        try:
            for expr, _, _ in items:
                nvrtc.addNameExpression(prog, expr)
            nvrtc.compileProgram(prog, options)
            ptx = nvrtc.getPTX(prog).decode() if isinstance(nvrtc.getPTX(prog), bytes) \
                else nvrtc.getPTX(prog)
            entries = {name: params for name, params in _ENTRY.findall(ptx)}
            for expr, plan, layout in items:
                params = _PARAM.findall(entries[nvrtc.getLoweredName(prog, expr)])
                arrays = plan.inputs + plan.outputs + (plan.workspace() is not None)
                tail = plan.args(layout)
                assert len(params) == arrays + len(tail) + 1, (expr, params, tail)
                assert all(t == "u64" for t, _ in params[:arrays]), (expr, params)
                assert all(t in ("u32", "s32", "u64", "s64") and not n
                           for t, n in params[arrays:-1]), (expr, params)
                kind, size = params[-1]
                assert kind == "b8" and 1 <= int(size or 1) <= 8 * planning.LOAD_SLOTS, \
                    (expr, params)
        finally:
            nvrtc.destroyProgram(prog)


# A static shared variable of the PTX: its element bits and count (1 for a scalar).
_SHARED = re.compile(
    r"^\s*\.shared\s+(?:\.align\s+\d+\s+)?\.[busf](\d+)\s+[^\s\[;]+(?:\[(\d+)\])?\s*;", re.M)


@pytest.mark.parametrize("kernel,bound", [("grid", "grid.GRID_STATIC_BYTES"),
                                          ("online", "online.ONLINE_STATIC_BYTES"),
                                          ("vjp_hold", "vjp.VJP_HOLD_STATIC_BYTES")])
def test_static_shared_memory_within_the_planners_bound(kernel, bound):
    """The static shared memory the planners set aside for these kernels (their occupancy sums)
    holds what the PTX of each dtype's instantiations declares (one program an expression)."""
    try:
        nvrtc.getVersion()
    except Exception as e:
        pytest.skip(f"NVRTC is not loadable: {e}")
    module, name = bound.split(".")
    limit = getattr(getattr(planning, module), name)
    options = (*_kernels.options(), "-arch=sm_90", f"-I{_include_dir()}",
               "--device-as-default-execution-space")
    seen = {}
    for k, dtype_name, template, ops in _kernels.instantiations():
        if k == kernel:
            seen.setdefault(dtype_name, _kernels.name_expression(k, dtype_name, template, ops))
    assert seen
    for expr in seen.values():
        prog = nvrtc.createProgram(_kernels.source(_kernels.FILES[kernel]), "k.cu", (), ())
        try:
            nvrtc.addNameExpression(prog, expr)
            nvrtc.compileProgram(prog, options)
            ptx = nvrtc.getPTX(prog)
            ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
        finally:
            nvrtc.destroyProgram(prog)
        static = sum(int(bits) // 8 * int(count or 1) for bits, count in _SHARED.findall(ptx))
        assert static <= limit, (expr, static, limit)
