"""Every plan of the policy against another revision's: `python3 tools/compare_plans.py REV`.

REV's `cusoftmax/planning/` is imported beside the working tree's, and every planner (the fused
order table, reduce, vjp, topk, normalize) is asked the same cases: row lengths around every
tuning value and power of two, batch sizes, alignments, strided axes, forced methods, loads and
ops, on the H200's, the A100's and an sm_100's stated limits. Both launch descriptions must agree
(kernel, ops, template, pack, grid, block, shared memory, cluster, integer arguments, workspace,
cooperative), or raise the same ValueError, or both be None. Exit status 1 on any difference."""

from __future__ import annotations

import importlib.util
import io
import itertools
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cusoftmax import planning  # noqa: E402
from cusoftmax._layout import Layout  # noqa: E402

LIMITS = {"H200": (132, 232448, (9, 0), 233472), "A100": (108, 166912, (8, 0), 167936),
          "sm_100": (148, 232448, (10, 0), 233472)}
ITEMSIZES = (2, 4, 8)
ALIGNMENTS = ((0, 0), (4, 4), (2, 6), (0, 8))
ROWS = (1, 3, 1000, 70000)


def load_old(rev):
    """REV's planning package, imported as ``old_planning``."""
    tar = subprocess.run(["git", "archive", rev, "cusoftmax/planning"], check=True,
                         capture_output=True, cwd=ROOT).stdout
    folder = Path(tempfile.mkdtemp())
    tarfile.open(fileobj=io.BytesIO(tar)).extractall(folder, filter="data")
    spec = importlib.util.spec_from_file_location(
        "old_planning", folder / "cusoftmax/planning/__init__.py",
        submodule_search_locations=[str(folder / "cusoftmax/planning")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_planning"] = module
    spec.loader.exec_module(module)
    return module


def describe(p, layout):
    return (p.kernel, p.ops, tuple(p.template), p.vec, p.grid, p.block, p.smem, p.cluster,
            tuple(p.args(layout)), p.workspace(), p.cooperative)


def outcome(make, layout):
    try:
        p = make()
    except ValueError as e:
        return ("ValueError", str(e))
    return None if p is None else describe(p, layout)


def widths(tuning):
    """Powers of two and their neighbours up to 2**27, every width up to 600, and each integer
    tuning value (and its value in elements of each size) +-1."""
    found = set(range(1, 601))
    for k in range(10, 28):
        found |= {2**k - 1, 2**k, 2**k + 1}
    for v in vars(tuning).values():
        for x in (v.values() if isinstance(v, dict) else v if isinstance(v, tuple) else (v,)):
            if isinstance(x, int) and not isinstance(x, bool) and 1 <= x < 2**31:
                for isz in ITEMSIZES:
                    found |= {x // isz - 1, x // isz, x // isz + 1, x - 1, x, x + 1}
    return sorted(w for w in found if 1 <= w <= 2**27)


def cases(tuning):
    """(planner name, its arguments but limits, layout for its args, limits name)."""
    every = widths(tuning)
    sparse = [w for w in every if w > 4096 or w % 7 == 0 or w < 80 or (w & (w - 1)) == 0]
    for lim, isz, rows, w in itertools.product(LIMITS, ITEMSIZES, ROWS, every):
        if rows * w > 2**31:
            continue
        layout = Layout(rows, w, 1, (w, 1), (w, 1))
        for op, load in (("softmax", "Plain"), ("log_softmax", "Scaled"), ("softmax", "Masked")):
            yield "plan", (layout, isz, (0, 0)), dict(op=op, load=load), layout, lim
        yield "reduce_plan", (layout, isz, 0), {}, layout, lim
        yield "vjp_plan", (layout, isz, (0, 0, 0)), {}, layout, lim
        yield "normalize_plan", (layout, isz, (0, 0)), {}, layout, lim
        if isz in (2, 4) and rows <= 1000:
            for k in (1, 8, 64, 256):
                if k <= w:
                    yield "topk_plan", (rows, w, w, k, False, isz, 0), {}, None, lim
    for lim, isz, align, method, w in itertools.product(LIMITS, ITEMSIZES, ALIGNMENTS,
                                                        (None, *planning.METHODS), sparse):
        layout = Layout(3, w, 1, (w + 8, 1), (w, 1))
        yield "plan", (layout, isz, align, None, method), {}, layout, lim
    for lim, isz, o, n, i in itertools.product(LIMITS, ITEMSIZES, (1, 3), (2, 7, 100, 4096, 2**20),
                                               (1, 3, 32, 64, 100, 4096)):
        layout = Layout(o, n, i, (n * i, i), (n * i, i))
        for method in (None, "columns", "slab"):
            yield "plan", (layout, isz, (0, 0), None, method), {}, layout, lim
        yield "reduce_plan", (layout, isz, 0), {}, layout, lim
        yield "vjp_plan", (layout, isz, (0, 0, 0)), {}, layout, lim


def main(argv):
    if len(argv) != 1:
        raise SystemExit(__doc__)
    old = load_old(argv[0])
    total, differences = 0, []
    for name, args, kw, layout, lim in cases(planning.TUNING):
        new_limits, old_limits = planning.Limits(*LIMITS[lim]), old.Limits(*LIMITS[lim])

        def call(module, limits):
            if name == "plan" and len(args) == 5:  # (layout, itemsize, addresses, None, method)
                return module.plan(args[0], args[1], args[2], limits, args[4], **kw)
            if name == "topk_plan":
                return module.topk_plan(*args, limits, **kw)
            return getattr(module, name)(*args, limits, **kw)

        got = outcome(lambda: call(planning, new_limits), layout)
        want = outcome(lambda: call(old, old_limits), layout)
        total += 1
        if got != want:
            differences.append((name, args, kw, lim, want, got))
    for d in differences[:20]:
        print("difference:", *d, sep="\n  ")
    print(f"compared {total} planner calls against {argv[0]}: {len(differences)} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
