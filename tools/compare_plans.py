"""Every plan of the policy against those of another revision's `cusoftmax/_dispatch.py`:
`python3 tools/compare_plans.py REV`. For each case (layout, element size, addresses, device
limits, forced method) both launch descriptions must agree: (method, kernel family, template
arguments, pack, grid, block, shared memory, trailing integer arguments, workspace bytes and
zeroed bytes, cooperative), or the same ValueError, or both None (a contiguous copy first).
Exit status 1 on any difference."""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

from cusoftmax import planning
from cusoftmax._layout import Layout

LIMITS = {
    "H200": (132, 232448, (9, 0), 233472),
    "A100": (108, 166912, (8, 0), 167936),
    "sm_100": (148, 232448, (10, 0), 233472),
}
ITEMSIZES = (2, 4, 8)
ALIGNMENTS = ((0, 0), (4, 4), (2, 6), (8, 8), (0, 4), (2, 2), (6, 6), (12, 12), (0, 8), (4, 0))
ROW_COUNTS = (1, 3, 1000, 70000)


def load_old(rev):
    """The `_dispatch` module of `rev`, imported from a temporary file."""
    text = subprocess.run(["git", "show", f"{rev}:cusoftmax/_dispatch.py"], check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_dispatch.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("old_dispatch", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def old_launch(old, p, layout):
    """What `_kernels.bind` of that revision launches for an old plan (its tails, by method)."""
    launch = p.launch
    outer, n, inner = layout.outer, layout.n, layout.inner
    (xso, xsn), (yso, ysn) = layout.xs, layout.ys
    rows = (outer, n, xso, yso)
    tail = {
        "flat": lambda: (*rows, p.per_group),
        "registers": lambda: (*rows, p.width),
        "tiles": lambda: (*rows, p.width),
        "block": lambda: rows,
        "cluster": lambda: (*rows, p.held) if launch.kernel == "softmax_spill" else rows,
        "slab": lambda: (outer, n, inner, xso, xsn, yso, ysn, p.width),
        "grid": lambda: (*rows, p.chunk, p.chunks, p.ahead, p.lag),
        "online": lambda: (*rows, p.chunk, p.chunks, p.per_group, p.held),
        "columns": lambda: (outer, n, inner, xso, xsn, yso, ysn, p.chunk, p.chunks, p.per_group, p.width),
    }[p.method]()
    two_pass = p.method in ("grid", "online", "columns")
    return (p.method, launch.kernel.removeprefix("softmax_"), tuple(launch.template), p.vec,
            launch.grid, launch.block, launch.smem, tuple(tail),
            old.workspace_bytes(p) if two_pass else None, p.method == "grid")


def new_launch(p, layout):
    return (p.method, p.kernel, p.template, p.vec, p.grid, p.block, p.smem, p.args(layout),
            p.workspace(), p.cooperative)


def outcome(make, describe):
    try:
        p = make()
    except ValueError as e:
        return ("ValueError", str(e))
    return None if p is None else describe(p)


def row_layout(rows, cols, ldx=None, ldy=None):
    return Layout(rows, cols, 1, (cols if ldx is None else ldx, 1), (cols if ldy is None else ldy, 1))


def strided_layout(outer, n, inner, ydelta=0):
    return Layout(outer, n, inner, (n * inner, inner), (n * (inner + ydelta), inner + ydelta))


def widths(old):
    """Every width up to 4096, powers of two and their neighbours up to 2**31, and every
    threshold of the old module (its integer constants and tables, in elements of each size,
    and the device-derived tops of the block, cluster and grid kernels), +-1."""
    found = set(range(1, 4097))
    for k in range(12, 32):
        found |= {2**k - 1, 2**k, 2**k + 1}
    values = set()
    for name in dir(old):
        v = getattr(old, name)
        if name.isupper():
            if isinstance(v, dict):
                v = tuple(v.values())
            for x in v if isinstance(v, tuple) else (v,):
                if isinstance(x, (int, float)) and not isinstance(x, bool) and 1 <= x < 2**33:
                    values.add(int(x))
                elif isinstance(x, tuple):
                    values |= {int(y) for y in x if isinstance(y, (int, float)) and 1 <= y < 2**33}
    for lim in LIMITS.values():
        limits = old.Limits(*lim)
        share = limits.smem_per_sm // old.CLUSTER_BLOCKS_PER_SM - old.BLOCK_RESERVED - old.BLOCK_SCRATCH
        values |= {limits.smem_per_block - old.BLOCK_SCRATCH, share, share * max(1, limits.max_cluster),
                   int(share * max(1, limits.max_cluster) * (1 + old.CLUSTER_SPILL_MAX))}
        for isz in ITEMSIZES:
            most = old.grid_shape(isz, 16 // isz, limits)[2]
            values |= {most * old.GRID_CHUNK_BYTES}
    for v in values:
        for isz in ITEMSIZES:
            for x in (v, v // isz, v // isz * isz):
                found |= {x - 2, x - 1, x, x + 1, x + 2}
    return sorted(w for w in found if 1 <= w <= 2**33)


def cases(old):
    """(layout, itemsize, addresses, limits name, method)."""
    every = widths(old)
    sparse = [w for w in every if w > 4096 or w % 7 == 0 or w < 80 or (w & (w - 1)) == 0]
    methods = (None, *planning.METHODS)
    for lim, isz, w in itertools.product(LIMITS, ITEMSIZES, every):  # every width, by default
        yield row_layout(1000, w), isz, (0, 0), lim, None
    for lim, isz, align, w in itertools.product(("H200", "A100"), ITEMSIZES, ALIGNMENTS[1:5], every):
        yield row_layout(1000, w), isz, align, lim, None  # spans, narrow packs
    for lim, isz, rows, w in itertools.product(LIMITS, ITEMSIZES, ROW_COUNTS, sparse):
        yield row_layout(rows, w), isz, (0, 0), lim, None
    for lim, isz, align, method, w in itertools.product(LIMITS, ITEMSIZES, ALIGNMENTS[:3:2], methods, sparse):
        yield row_layout(3, w), isz, align, lim, method  # every forced method
    strides = ((0, 1), (1, 0), (8, 8), (8, 0), (3, 3), (16, 16))  # ldx - cols, ldy - cols
    for lim, isz, align, (dx, dy), method, w in itertools.product(
            ("H200",), ITEMSIZES, ALIGNMENTS[:3], strides, (None, "flat"),
            [w for w in sparse if w < 70000]):
        yield row_layout(1000, w, w + dx, w + dy), isz, align, lim, method
    shapes = [(1, 4096, 16384), (1, 16384, 4096), (1, 70000, 64), (9, 70000, 64), (1, 10**6, 32)]
    shapes += [(o, n, i) for o in (1, 3) for n in (2, 7, 100, 300, 4096, 30000, 2**20)
               for i in (*range(1, 66), 100, 1000, 4096)]
    for lim, isz, align, (o, n, i), dy, method in itertools.product(
            LIMITS, ITEMSIZES, ALIGNMENTS[:3], shapes, (0, 4), (None, "columns", "slab", "registers")):
        yield strided_layout(o, n, i, dy), isz, align, lim, method


def main(argv):
    if len(argv) != 1:
        raise SystemExit(__doc__)
    old = load_old(argv[0])
    total, differences, kinds = 0, [], {"plan": 0, "ValueError": 0, "None": 0}
    for layout, isz, align, lim, method in cases(old):
        got = outcome(lambda: planning.plan(layout, isz, align, planning.Limits(*LIMITS[lim]), method),
                      lambda p: new_launch(p, layout))
        want = outcome(lambda: old.plan(layout, isz, align, old.Limits(*LIMITS[lim]), method),
                       lambda p: old_launch(old, p, layout))
        total += 1
        kinds["None" if want is None else want[0] if want[0] == "ValueError" else "plan"] += 1
        if got != want:
            differences.append((layout, isz, align, lim, method, want, got))
    for d in differences[:20]:
        print("difference:", *d, sep="\n  ")
    print(f"compared {total} cases against {argv[0]} ({kinds['plan']} plans, {kinds['ValueError']} "
          f"ValueErrors, {kinds['None']} contiguous copies): {len(differences)} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
