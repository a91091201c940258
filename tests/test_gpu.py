"""GPU kernels: every path against SciPy, forced paths against each other, and the hard cases
that have broken softmax kernels elsewhere. Skipped where there is no CUDA device."""

import dataclasses
import itertools
import math

import numpy as np
import pytest
import scipy.special
from hypothesis import assume, given
from hypothesis import strategies as st

import cusoftmax
from cusoftmax import planning
from cusoftmax._accuracy import LOG_TOLERANCE, VJP_TOLERANCE, violations, vjp_reference
from cusoftmax._layout import Layout, normalize_axes
from cusoftmax.planning import TUNING, grid
from _support import (BF16, FLOAT_DTYPES, assert_same_bits, assert_softmax, block_max_cols, build, cluster_held_cols, cluster_policy_cols,
                      make_values, requires_gpu, to_host, views)

cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
pytestmark = requires_gpu

ROW_METHODS = ("registers", "flat", "tiles", "block", "cluster", "grid", "online", "columns", "slab")


def limits():
    return planning.device_limits(cupy.cuda.Device().id)


def block_top(dtype):
    """The longest row (elements) the block kernel holds on this device, 16-byte packs."""
    isz = np.dtype(dtype).itemsize
    return block_max_cols(limits(), isz, 16 // isz)


def cluster_top(dtype):
    """The longest row the cluster kernel holds here (16-byte packs), 0 without clusters."""
    return limits().max_cluster * block_top(dtype)


def runnable(method, cols, dtype):
    """Whether the policy accepts a forced method for contiguous rows of `cols` elements from a
    16-byte boundary (rows of odd length: each in the packs of its aligned span)."""
    isz = np.dtype(dtype).itemsize
    try:
        planning.plan(Layout(1, cols, 1, (cols, 1), (cols, 1)), isz, (0, 0), limits(), method)
    except ValueError:
        return False
    return True


def poisoned_softmax(x, axis=-1, method=None):
    """softmax into an out= array filled with NaN first, so an unwritten element shows."""
    out = cupy.full(x.shape, np.nan, dtype=x.dtype)
    assert cusoftmax.softmax(x, axis=axis, out=out, method=method) is out
    return out


@given(case=views(dtypes=FLOAT_DTYPES, widths=(1, 2, 3, 31, 33, 517, 1025, 2049)),
       method=st.sampled_from(ROW_METHODS))
def test_forced_methods_on_any_view(case, method):
    x, axis = build(cupy, case)
    assume(isinstance(axis, int))  # None and tuples: test_strided_axes and the contract tests
    if not runnable(method, x.shape[axis], x.dtype):
        with pytest.raises(ValueError):
            cusoftmax.softmax(x, axis=axis, method=method)
        return
    assert_softmax(poisoned_softmax(x, axis, method), x, axis)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_widths_around_every_threshold(dtype):
    rng = np.random.default_rng(7)
    top, ctop = block_top(dtype), cluster_top(dtype)
    wide = TUNING.registers.max_lanes * TUNING.registers.wide_values
    between = TUNING.cluster.min_bytes // np.dtype(dtype).itemsize
    widths = {1, 2, 3, 31, 32, 33, 511, 512, 513, 517, 1023, 1024, 1025, 2047, 2048, 2049,
              wide - 1, wide, wide + 1,
              between - 1, between, between + 1, 65537, top - 1, top, top + 1}
    if dtype == np.float32:  # the grid's last policy rows, and the longest row it holds
        per, _, most = grid.shape(4, 4, limits(), TUNING)
        gtop = TUNING.grid.max_row_bytes // 4
        widths |= {gtop, gtop + 1, most * per * 4}
    if ctop:  # a cluster's blocks each holding a whole block's shared memory, the longest rows
        # a cluster holds on chip (longer ones spill), and the policy's last cluster rows
        isz = np.dtype(dtype).itemsize
        htop, ptop = cluster_held_cols(limits(), isz, 16 // isz), cluster_policy_cols(limits(), isz, 16 // isz)
        widths |= {ctop - 1, ctop, ctop + 1, htop, htop + 1, ptop, ptop + 1}
    for cols in sorted(widths):
        x = cupy.asarray(make_values(rng, (3, cols), np.dtype(dtype), scale=4.0))
        results = {}
        for method in (None, *ROW_METHODS):
            if runnable(method, cols, dtype):
                results[method] = y = poisoned_softmax(x, method=method)
                assert_softmax(y, x, -1)
        assert len(results) >= 3


@pytest.mark.parametrize("method", ROW_METHODS)
def test_many_rows_past_grid_limits(method):
    x = cupy.asarray(make_values(np.random.default_rng(3), (70001, 40), np.dtype(np.float32)))
    assert_softmax(poisoned_softmax(x, method=method), x, -1)


@pytest.mark.parametrize("method,shape,axis", [("block", (300, 3000), -1), ("cluster", (200, 70000), -1),
                                               ("slab", (3000, 3000), 0)])
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=str)
def test_blocks_that_loop_over_lines(method, shape, axis, dtype):
    """A grid of fewer blocks than lines (the policy's plan cut to 48 blocks, whole clusters):
    each block or cluster walks many lines, so the cluster's exchange runs many rounds on each
    of its two barriers."""
    if method != "block" and not limits().clusters:
        pytest.skip("needs thread-block clusters")
    from cusoftmax import _engine, _kernels

    x = cupy.asarray(make_values(np.random.default_rng(9), shape, np.dtype(dtype)))
    strides = _engine._elem_strides(x)
    layout, plan = _engine._plan(x.shape, strides, strides, normalize_axes(axis, x.ndim), x.itemsize,
                              (0, 0), x.device.id, method, TUNING, "softmax")
    plan = dataclasses.replace(plan, grid=48 // plan.cluster * plan.cluster)
    lines = plan.lines if method == "slab" else shape[0]
    assert plan.method == method and lines >= 4 * (plan.grid // plan.cluster)
    y = cupy.full(x.shape, np.nan, dtype=x.dtype)
    _kernels.bind(plan, layout, x.dtype.name, x.device.id)(x, y)
    assert_softmax(y, x, axis)


@pytest.mark.parametrize("cols", [2, 33, 2049, 70000])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_misaligned_rows(cols, dtype):
    base = cupy.asarray(make_values(np.random.default_rng(4), (5, cols + 1), np.dtype(dtype)))
    x = base[:, 1:]  # every row starts one element past a 16-byte boundary
    for method in (None, *ROW_METHODS):
        if runnable(method, cols, dtype):
            assert_softmax(poisoned_softmax(x, method=method), x, -1)


def special_lines(cols, dtype):
    """12 lines of `cols` values (float64, to be rounded to dtype): 1 to 3 give NaN throughout
    (a NaN, an inf, all -inf), 5 gives 1.0 at its first place, the others no NaN."""
    rng = np.random.default_rng(5)
    v = make_values(rng, (12, cols), np.dtype(np.float64))
    v[1, cols // 2] = np.nan
    v[2, -1] = np.inf
    v[3, :] = -np.inf
    v[4, : (cols + 1) // 2] = -np.inf  # a masked prefix: whole chunks of -inf in the online path
    v[5, 1:] = -np.inf
    # Magnitudes: maxima near the largest value, and offsets on both sides of 2**23 (where the
    # kernels stop computing exp(x - max) as one FFMA against a shift of the max).
    top = 65504.0 if dtype == np.float16 else 3.0e38  # about the largest float16 / float32 / bfloat16
    v[7] = top * (1.0 - 0.05 * rng.random(cols))
    v[8] = -top * (0.9 + 0.05 * rng.random(cols))
    v[9] = min(3000.0, top / 2) + v[9]
    v[10] = min(8e6, top / 2) + 4.0 * v[10]
    v[11] = -min(1e10, top / 4) + min(1e3, top / 1e4) * v[11]
    return v


@pytest.mark.parametrize("cols", [5, 700, 9000, 100000, 1000000])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_special_rows_beside_normal_rows(cols, dtype):
    x = cupy.asarray(special_lines(cols, dtype).astype(dtype))
    for method in ROW_METHODS:
        if runnable(method, cols, x.dtype):
            y = to_host(poisoned_softmax(x, method=method))
            assert_softmax(y, x, -1)
            assert np.isnan(y[1:4]).all() and not np.isnan(y[[0, *range(4, 12)]]).any()
            assert y[5, 0] == 1.0


@pytest.mark.parametrize("n", [5, 700, 9000])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_special_columns_along_axis_0(n, dtype):
    """The special lines as columns of a C-contiguous matrix, softmax over axis 0: the slab's
    and the columns kernel's merges of (max, sum) pairs over blocks and chunks."""
    x = cupy.asarray(np.ascontiguousarray(special_lines(n, dtype).T).astype(dtype))
    methods = [None, "columns"] + (["slab"] if limits().clusters and x.itemsize <= 4 else [])
    for method in methods:
        y = to_host(poisoned_softmax(x, axis=0, method=method))
        assert_softmax(y, x, 0)
        assert np.isnan(y[:, 1:4]).all() and not np.isnan(y[:, [0, *range(4, 12)]]).any()
        assert y[0, 5] == 1.0


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("extra", [0, 1])  # 1: rows of odd length, each in the packs of its span
def test_cluster_rows_that_spill(dtype, extra):
    """Rows past what a cluster holds on chip: each block holds the start of its slice and reads
    the rest (its spill) twice. The max in a spill, spills of only -inf, NaN in a spill, and the
    same bits in place."""
    if not limits().clusters:
        pytest.skip("needs thread-block clusters")
    isz = np.dtype(dtype).itemsize
    cols = cluster_held_cols(limits(), isz, 16 // isz) * 3 // 2 + extra
    x = cupy.asarray(make_values(np.random.default_rng(11), (4, cols), np.dtype(dtype)))
    p = planning.plan(Layout(4, cols, 1, (cols, 1), (cols, 1)), isz, (x.data.ptr, x.data.ptr),
                       limits(), "cluster")
    size, vec = p.size, p.vec
    assert p.kernel == "spill" and 0 < p.held and vec * isz == 16
    # Rows of an odd length lie in the 16-byte packs of their spans (kernels/common.cuh,
    # head_of): a block's slice starts `head` elements before its place in an aligned row.
    per = math.ceil(math.ceil((cols + extra * (vec - 1)) / vec) / size)  # packs of a block's slice

    def spills(r):
        head = (x.data.ptr + r * cols * isz) % 16 // isz
        return [slice(max(0, (b * per + p.held) * vec - head), (b + 1) * per * vec - head) for b in range(size)]

    x[1, spills(1)[5].start + 7] = 30.0  # the row's max in block 5's spill
    for part in spills(2):
        x[2, part] = -np.inf
    x[3, spills(3)[-1].start] = np.nan
    y = poisoned_softmax(x, method="cluster")
    assert_softmax(y, x, -1)
    assert np.isnan(to_host(y[3])).all() and not np.isnan(to_host(y[:3])).any()
    inplace = x.copy()
    cusoftmax.softmax(inplace, out=inplace, method="cluster")
    assert_same_bits(inplace, y)


@pytest.mark.parametrize("cols", [5, 301, 302, 777, 1012, 1537, 3001, 5001, 9001, 50257])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_rows_in_their_aligned_spans(cols, dtype):
    """Rows off 16-byte boundaries whose x and y lie alike: contiguous rows whose bytes are not a
    multiple of 16 (each row its own offset), and views with out= at the same offsets. The
    registers kernel's short (float32 301 and 302, half types 777 and 1012: softmax_short_spans)
    and wide rows and the block and cluster kernels take the 16-byte packs of each row's aligned
    span: special values at a row's first and last elements, nothing written outside the rows,
    the same bits in place."""
    isz = np.dtype(dtype).itemsize
    x = cupy.asarray(special_lines(cols, dtype).astype(dtype))
    pad = 16 // isz  # views 3 elements in; y's rows 16 bytes longer than x's
    xv = cupy.zeros((12, cols + 8), dtype=dtype)[:, 3:3 + cols]
    xv[...] = x
    yv_base = cupy.full((12, cols + 8 + pad), np.nan, dtype=dtype)
    yv = yv_base[:, 3:3 + cols]
    spanned = set()
    for method in (None, *ROW_METHODS):
        if not runnable(method, cols, dtype):
            continue
        y = poisoned_softmax(x, method=method)
        assert_softmax(y, x, -1)
        p = planning.plan(Layout(12, cols, 1, (cols, 1), (cols, 1)), isz, (x.data.ptr, y.data.ptr),
                           limits(), method)
        if p.vec * isz == 16:
            spanned.add(p.kernel if p.kernel == "short_spans" else p.method)
        yv[...] = np.nan
        assert cusoftmax.softmax(xv, out=yv, method=method) is yv
        assert_softmax(yv, xv, -1)
        outside = to_host(yv_base)
        assert np.isnan(outside[:, :3]).all() and np.isnan(outside[:, 3 + cols:]).all(), method
        inplace = x.copy()
        cusoftmax.softmax(inplace, out=inplace, method=method)
        assert_same_bits(inplace, y)
    assert spanned >= {m for m in ("block", "cluster") if runnable(m, cols, dtype)}, spanned
    assert ("short_spans" in spanned) == ((cols, isz) in ((301, 4), (302, 4), (777, 2), (1012, 2))), spanned


@pytest.mark.parametrize("cols", [301, 777, 2041])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_span_rows_at_the_ends_of_their_arrays(cols, dtype):
    """Rows in their spans read a row's first and last 16-byte packs whole, but not the highest
    row's last pack, which may pass the end of the allocation (under memcheck, with CuPy's pool
    off, an overrun shows): rows in reverse order (the highest row first) and one row repeated
    (a stride of 0: every row the highest), each one element past a 16-byte boundary."""
    dt, isz, rows = np.dtype(dtype), np.dtype(dtype).itemsize, 12
    values = make_values(np.random.default_rng(13), (rows, cols), dt)
    buf = cupy.asarray(np.concatenate([np.zeros(1, dt), values.ravel()]))  # ends with the highest row
    x = buf[1:].reshape(rows, cols)[::-1]
    ybuf = cupy.full(rows * cols + 1, np.nan, dtype=dt)
    y = ybuf[1:].reshape(rows, cols)[::-1]
    assert cusoftmax.softmax(x, out=y) is y
    assert_softmax(y, x, -1)
    assert np.isnan(to_host(ybuf[:1])).all()
    one = buf[1 + (rows - 1) * cols:]  # the last row, at the end of buf
    x = cupy.broadcast_to(one, (rows, cols))
    ldy = cols + -cols % (16 // isz) + 16 // isz  # out's rows lie as x's about 16-byte boundaries
    ybuf = cupy.full((rows, ldy), np.nan, dtype=dt)
    y = ybuf[:, 1:1 + cols]
    assert cusoftmax.softmax(x, out=y) is y
    assert_softmax(y, x, -1)
    assert np.isnan(to_host(ybuf[:, 0])).all() and np.isnan(to_host(ybuf[:, 1 + cols:])).all()
    # The plans of rows one element off 16-byte boundaries (in their spans where vec * isz is 16)
    # that do not lie back to back: those of rows alike, 16 elements apart (the same packs).
    at = (16 + isz, 16 + isz)
    spans = planning.plan(Layout(rows, cols, 1, (cols + 16, 1), (cols + 16, 1)), isz, at, limits())
    for xs, ys in (((-cols, 1), (-cols, 1)), ((0, 1), (ldy, 1))):
        assert planning.plan(Layout(rows, cols, 1, xs, ys), isz, at, limits()) == spans


@pytest.mark.parametrize("cols", [1, 3, 7, 17, 33, 97, 129, 301, 501, 641, 1001])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_flat_runs_of_rows(cols, dtype):
    """The flat kernel stages runs of rows that lie back to back by 16-byte copies: arrays whose
    first element is 0, 1 or 16 // itemsize - 1 elements past a 16-byte boundary (past it, the
    first pack is loaded element by element: nothing is read before x) and that end at their
    allocation's end (the last pack too: nothing is read past it), rows not a multiple of a
    warp's run, special rows (the same as
    test_special_rows_beside_normal_rows), in place (the same bits), nothing written outside y.
    The policy takes it for rows off 16-byte boundaries of up to flat_max_bytes of types of up
    to 4 bytes."""
    dt, isz = np.dtype(dtype), np.dtype(dtype).itemsize
    values = special_lines(cols, dtype).astype(dt)
    rows = 12 * 37 + 5  # past several warps' runs, the last run short
    values = np.concatenate([values] * 38)[:rows]
    for lead in sorted({0, 1, 16 // isz - 1}):  # x starts `lead` elements past a 16-byte boundary
        buf = cupy.asarray(np.concatenate([np.zeros(lead, dt), values.ravel()]))  # ends with x
        x = buf[lead:].reshape(rows, cols)
        ybuf = cupy.full(rows * cols + lead + 16 // isz, np.nan, dtype=dt)
        y = ybuf[lead:lead + rows * cols].reshape(rows, cols)
        assert cusoftmax.softmax(x, out=y, method="flat") is y
        assert_softmax(y, x, -1)
        h = to_host(y)
        assert np.isnan(h[1:4]).all() and np.isnan(h[13:16]).all() and h[5, 0] == 1.0
        assert np.isnan(to_host(ybuf[:lead])).all() and np.isnan(to_host(ybuf[lead + rows * cols:])).all()
        inplace = buf.copy()[lead:].reshape(rows, cols)
        assert cusoftmax.softmax(inplace, out=inplace, method="flat") is inplace
        assert_same_bits(inplace, y)
        p = planning.plan(Layout(rows, cols, 1, (cols, 1), (cols, 1)), isz, (x.data.ptr, y.data.ptr), limits())
        default = cols * isz <= TUNING.flat.max_bytes.get(isz, 0)  # every case here is off
        assert (p.method == "flat") == default, (lead, p)
        if default:  # the policy's plan: the same bits
            y2 = cupy.full_like(ybuf, np.nan)[lead:lead + rows * cols].reshape(rows, cols)
            assert_same_bits(cusoftmax.softmax(x, out=y2), y)
    # Layouts it does not take run on aligned contiguous copies when forced: rows apart (a view)
    # and x unlike y about 16-byte boundaries.
    wide = cupy.asarray(values[:40].astype(dt))
    x = cupy.zeros((40, cols + 3), dtype=dt)[:, 1:1 + cols]
    x[...] = wide
    assert_softmax(poisoned_softmax(x, method="flat"), x, -1)
    odd = cupy.zeros(40 * cols + 1, dtype=dt)[1:].reshape(40, cols)
    odd[...] = wide
    assert_softmax(poisoned_softmax(odd, method="flat"), odd, -1)


@pytest.mark.parametrize("cols", [2**20, 2**20 + 5])  # packs of 4, of 1
def test_online_rows_in_place(cols):
    """Online float32 rows in place, where blocks write part of each chunk from shared memory
    and re-read the rest: the same bits as into a new array."""
    x = cupy.asarray(make_values(np.random.default_rng(12), (3, cols), np.dtype(np.float32)))
    p = planning.plan(Layout(3, cols, 1, (cols, 1), (cols, 1)), 4, (x.data.ptr, x.data.ptr),
                       limits(), "online")
    assert p.held > 0 and p.chunks > 1
    y = poisoned_softmax(x, method="online")
    assert_softmax(y, x, -1)
    inplace = x.copy()
    assert cusoftmax.softmax(inplace, out=inplace, method="online") is inplace
    assert_same_bits(inplace, y)


@pytest.mark.parametrize("method", ROW_METHODS)
def test_deterministic_and_batch_independent(method):
    cols = 1001 if method == "flat" else 3000  # flat: rows of at most flat_max_cols
    x = cupy.asarray(make_values(np.random.default_rng(6), (64, cols), np.dtype(np.float32)))
    a = cusoftmax.softmax(x, method=method)
    b = cusoftmax.softmax(x, method=method)
    assert cupy.array_equal(a, b)
    alone = cusoftmax.softmax(x[17:18].copy(), method=method)
    assert cupy.array_equal(alone[0], a[17])


@pytest.mark.parametrize("shape,axis", [((300, 4096), 0), ((4096, 300), 0), ((64, 33), 0),
                                        ((8, 130, 70), 1), ((3, 300, 5000), 1), ((5, 6, 7, 8), (0, 2))])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_strided_axes(shape, axis, dtype):
    x = cupy.asarray(make_values(np.random.default_rng(8), shape, np.dtype(dtype)))
    assert_softmax(poisoned_softmax(x, axis=axis), x, axis)
    if not isinstance(axis, tuple):
        assert_softmax(poisoned_softmax(x, axis=axis, method="columns"), x, axis)
        assert_softmax(poisoned_softmax(x, axis=axis, method="online"), x, axis)
        if limits().clusters and x.itemsize <= 4:
            assert_softmax(poisoned_softmax(x, axis=axis, method="slab"), x, axis)
        else:
            with pytest.raises(ValueError, match="slab"):
                cusoftmax.softmax(x, axis=axis, method="slab")


def test_grid_slots_give_the_same_bits():
    """The grid kernel with more copies in flight or more chunks waiting for their rows (so
    other slot counts, and other grids when fewer blocks fit an SM): rows of three chunks,
    several tickets a block, every element written, the same bits each time."""
    from cusoftmax import _kernels
    from cusoftmax._layout import collapse

    shape = (400, 20000)
    x = cupy.asarray(make_values(np.random.default_rng(10), shape, np.dtype(np.float32)))
    layout = collapse(shape, (20000, 1), (20000, 1), (1,))
    first = planning.plan(layout, 4, (0, 0), limits(), method="grid")
    assert first.chunks == 3
    results = []
    for ahead, lag in ((1, 1), (2, 1), (1, 2), (3, 3)):
        slots = ahead + lag
        p = dataclasses.replace(first, ahead=ahead, lag=lag, smem=TUNING.block.scratch + slots * 4 * first.chunk)
        y = cupy.full(shape, np.nan, dtype=x.dtype)
        _kernels.bind(p, layout, "float32", x.device.id)(x, y)
        assert_softmax(y, x, -1)
        results.append(y)
    assert all(cupy.array_equal(results[0], r) for r in results[1:])
    for bad in (dict(ahead=0), dict(lag=-1), dict(block=32)):
        with pytest.raises(ValueError, match="grid"):  # the launcher's preconditions
            _kernels.bind(dataclasses.replace(first, **bad), layout, "float32", x.device.id)


@pytest.mark.parametrize("kind", ["online", "columns"])
def test_two_pass_groups_give_the_same_bits(kind):
    """The two-pass schedule with one line per group, groups that leave the last one padded,
    and one group (online: also with nothing held, a step held and the most held): every
    element written, the same bits each time."""
    from cusoftmax import _kernels
    from cusoftmax._layout import collapse

    shape, axes = ((10, 70001), (1,)) if kind == "online" else ((3, 1000, 300), (1,))
    x = cupy.asarray(make_values(np.random.default_rng(9), shape, np.dtype(np.float32)))
    strides = tuple(s // 4 for s in x.strides)
    layout = collapse(shape, strides, strides, axes)
    first = planning.plan(layout, 4, (0, 0), limits(), method=kind)
    step = TUNING.online.threads * first.vec
    holds = (first.held, 0, step) if kind == "online" else (0,)
    assert kind != "online" or first.held > step  # the last chunk (4,465 elements) holds less
    results, groups = [], set()
    for per_group, held in itertools.product((1, 4, first.lines), holds):
        held_by = dict(held=held, smem=4 * held) if kind == "online" else {}  # columns hold nothing
        p = dataclasses.replace(first, per_group=per_group, **held_by)
        groups.add(p.per_group)
        y = cupy.full(shape, np.nan, dtype=x.dtype)
        _kernels.bind(p, layout, "float32", x.device.id)(x, y)
        assert_softmax(y, x, axes[0])
        results.append(y)
    assert groups == {1, 4, first.lines} and first.lines % 4
    assert all(cupy.array_equal(results[0], r) for r in results[1:])


def test_plans_sharing_a_kernel_keep_their_shared_memory():
    """A kernel's shared-memory limit is shared by every plan bound to it: binding a plan that
    needs less (still past the 48 KiB default) leaves a longer row's plan runnable."""
    top = block_top(np.float32) // 4 * 4
    for cols in (top, 13000, top):  # 13,000 float32: 52 KB of row
        x = cupy.asarray(make_values(np.random.default_rng(cols), (3, cols), np.dtype(np.float32)))
        assert_softmax(poisoned_softmax(x, method="block"), x, -1)


def test_runs_on_the_current_stream():
    """Captured into a graph on a non-default stream: nothing runs until the graph is launched,
    so every kernel of the call was issued on that stream."""
    x = cupy.asarray(make_values(np.random.default_rng(9), (33, 100), np.dtype(np.float32)))
    out = cupy.full_like(x, np.nan)
    cusoftmax.softmax(x, out=out)  # compile and plan outside the capture
    out.fill(np.nan)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        cusoftmax.softmax(x, out=out)
        graph = stream.end_capture()
        stream.synchronize()
        assert bool(cupy.isnan(out).all())
        graph.launch()
        stream.synchronize()
    assert_softmax(out, x, -1)


def test_other_device_out_is_rejected():
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    x = cupy.ones((2, 3), dtype=np.float32)
    with cupy.cuda.Device(1):
        out = cupy.zeros((2, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="device"):
        cusoftmax.softmax(x, out=out)


@pytest.mark.skipif(BF16 is None, reason="ml_dtypes is not installed")
@pytest.mark.parametrize("shape, axis, method", [((16, 777), -1, None), ((3, 2**20 + 5), -1, "online"),
                                                 ((3000, 300), 0, "columns"), ((3000, 300), 0, "slab")])
def test_bfloat16_rounds_once(shape, axis, method):
    """Half types compute in float32 and round once: within half an ulp of the exact value (rows,
    long rows in two passes, columns in two passes and held on chip)."""
    if method == "slab" and not limits().clusters:
        pytest.skip("the slab needs thread-block clusters")
    x = cupy.asarray(make_values(np.random.default_rng(10), shape, BF16))
    y = to_host(cusoftmax.softmax(x, axis=axis, method=method)).astype(np.float64)
    ref = to_host(cusoftmax.softmax(x.astype(np.float64), axis=axis))
    tiny = ref < 1e-30
    ulp = 2.0 ** (np.floor(np.log2(np.where(tiny, 1.0, ref))) - 7)  # bfloat16: 8 significant bits
    assert np.all(np.abs(y - ref) <= np.where(tiny, 1e-30, 0.5 * ulp + 1e-5 * ref))


def test_a_tuning_variant_plans_and_runs_its_own():
    """planning.use: calls plan again under a variant (here a grid of one residency for float32
    short rows) and back under the default, the same bits each way (a row's result does not depend on
    the grid), the fast path included."""
    from cusoftmax import _engine

    x = cupy.asarray(make_values(np.random.default_rng(14), (70001, 40), np.dtype(np.float32)))
    y = cusoftmax.softmax(x)
    strides = _engine._elem_strides(x)
    variant = TUNING.vary(registers_float32_waves=1)  # float32 rows of 16-byte packs
    signature = (x.shape, strides, strides, (1,), 4, (0, 0), x.device.id, None)
    assert (_engine._plan(*signature, variant, "softmax")[1].grid
            < _engine._plan(*signature, TUNING, "softmax")[1].grid)
    with planning.use(variant):
        assert_same_bits(cusoftmax.softmax(x), y)
        assert_same_bits(cusoftmax.softmax(x), y)
    assert_same_bits(cusoftmax.softmax(x), y)


# ---- log_softmax: softmax's plans with the LogSoftmax epilogue (kernels/ops.cuh).
LOG_FUSED = tuple(np.dtype(BF16 if n == "bfloat16" else n) for n in planning.FUSED_TYPES["log_softmax"]
                  if n != "bfloat16" or BF16 is not None)


def assert_log_softmax(y, x, axis):
    """y is log_softmax(x) within the log bound of y's dtype, against SciPy in float64 (special
    values included: +inf entries NaN and the others -inf, NaN slices all NaN)."""
    y = to_host(y)
    with np.errstate(all="ignore"):
        ref = scipy.special.log_softmax(to_host(x).astype(np.float64), axis=axis)
    msg = violations(y, ref, y.dtype.name, LOG_TOLERANCE)
    assert msg is None, msg


def poisoned_log_softmax(x, axis=-1, method=None):
    out = cupy.full(x.shape, np.nan, dtype=x.dtype)
    assert cusoftmax.log_softmax(x, axis=axis, out=out, method=method) is out
    return out


def log_lines(cols, dtype):
    """special_lines, and a row with +inf beside finite values and -inf (SciPy: NaN at the +inf,
    -inf elsewhere), one with +inf and NaN (all NaN), one whose max dominates (d near 1)."""
    v = special_lines(cols, dtype)
    inf_row = v[0].copy()
    inf_row[cols // 3] = np.inf
    inf_row[:: max(2, cols // 5)] = -np.inf
    both = v[0].copy()
    both[-1], both[0] = np.inf, np.nan
    dominant = -200.0 + v[0]
    dominant[cols // 2] = 0.0
    return np.vstack([v, inf_row, both, dominant])


@pytest.mark.parametrize("cols", [1, 2, 3, 31, 33, 301, 517, 1025, 2049, 5001, 9001, 50257, 100000,
                                  1000000])
@pytest.mark.parametrize("dtype", LOG_FUSED, ids=str)
def test_log_softmax_every_kernel_against_scipy(cols, dtype):
    """Every kernel family that takes these rows, forced and by the policy, on rows with the
    special values of SciPy's log_softmax; then contiguous rows off 16-byte boundaries."""
    x = cupy.asarray(log_lines(cols, dtype).astype(dtype))
    ran = 0
    for method in (None, *ROW_METHODS):
        if method is None or runnable(method, cols, dtype):
            assert_log_softmax(poisoned_log_softmax(x, method=method), x, -1)
            ran += 1
    assert ran >= 2
    odd = cupy.asarray(log_lines(cols, dtype).astype(dtype)[:, : max(1, cols - 1)])
    for method in (None, *ROW_METHODS):
        if runnable(method, odd.shape[1], dtype):
            assert_log_softmax(poisoned_log_softmax(odd, method=method), odd, -1)


@pytest.mark.parametrize("n", [5, 700, 9000])
@pytest.mark.parametrize("dtype", LOG_FUSED, ids=str)
def test_log_softmax_along_a_strided_axis(n, dtype):
    x = cupy.asarray(np.ascontiguousarray(log_lines(n, dtype).T).astype(dtype))
    methods = [None, "columns"] + (["slab"] if limits().clusters else [])
    for method in methods:
        assert_log_softmax(poisoned_log_softmax(x, axis=0, method=method), x, 0)


@pytest.mark.parametrize("dtype", LOG_FUSED, ids=str)
def test_log_softmax_cluster_rows_that_spill(dtype):
    """Rows past what a cluster holds: the max, a +inf and a NaN in a block's spill."""
    if not limits().clusters:
        pytest.skip("needs thread-block clusters")
    isz = np.dtype(dtype).itemsize
    cols = cluster_held_cols(limits(), isz, 16 // isz) * 3 // 2
    x = cupy.asarray(make_values(np.random.default_rng(12), (4, cols), np.dtype(dtype)))
    x[1, -3] = 30.0
    x[2, -5] = np.inf
    x[3, -7] = np.nan
    assert_log_softmax(poisoned_log_softmax(x, method="cluster"), x, -1)


@pytest.mark.parametrize("method", ROW_METHODS)
def test_log_softmax_deterministic_in_place_and_batch_independent(method):
    cols = 1001 if method == "flat" else 3000
    x = cupy.asarray(make_values(np.random.default_rng(16), (64, cols), np.dtype(np.float32)))
    a = cusoftmax.log_softmax(x, method=method)
    assert_same_bits(a, cusoftmax.log_softmax(x, method=method))
    assert_same_bits(cusoftmax.log_softmax(x[17:18].copy(), method=method)[0], a[17])
    inplace = x.copy()
    cusoftmax.log_softmax(inplace, out=inplace, method=method)
    assert_same_bits(inplace, a)


def test_log_softmax_fused_and_composed_paths():
    """float16 to float32 take the kernels (method= accepted, with a positive scale too);
    float64, where= and other scales the array operations, which refuse a method; float64 keeps
    its dominant entry (-log1p)."""
    x = cupy.asarray([[0.0, -50.0, -60.0]])
    y = to_host(cusoftmax.log_softmax(x))
    assert y[0, 0] == -math.log1p(math.exp(-50.0) + math.exp(-60.0))
    with pytest.raises(ValueError, match="float64"):
        cusoftmax.log_softmax(x, method="registers")
    with pytest.raises(ValueError, match="negative or non-finite scale="):
        cusoftmax.log_softmax(x.astype(np.float32), scale=-2.0, method="registers")
    x32 = x.astype(np.float32)
    assert_same_bits(cusoftmax.log_softmax(x32, scale=2.0, method="registers"),
                     cusoftmax.log_softmax(x32 * 2))
    assert_same_bits(cusoftmax.log_softmax(x32, method="registers"), cusoftmax.log_softmax(x32))


# ---- logsumexp: the reduce family (kernels/reduce.cu), one read a element.
def assert_logsumexp(r, x, axis):
    r = to_host(r)
    with np.errstate(all="ignore"):
        ref = scipy.special.logsumexp(to_host(x).astype(np.float64), axis=axis)
    msg = violations(r, np.asarray(ref), r.dtype.name, LOG_TOLERANCE)
    assert msg is None, msg


@pytest.mark.parametrize("cols", [1, 3, 8, 33, 100, 1000, 4096, 4100, 20000, 300001, 2**20 + 3])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_logsumexp_rows_against_scipy(cols, dtype):
    """Rows of every reduce kernel (lanes, one chunk a row, many chunks) with SciPy's special
    values (NaN, +inf, all -inf, a dominant max), contiguous and off 16-byte boundaries, few
    rows and many."""
    x = cupy.asarray(log_lines(cols, dtype).astype(dtype))
    assert_logsumexp(cusoftmax.logsumexp(x, axis=-1), x, -1)
    odd = x[:, 1:] if cols > 1 else x
    assert_logsumexp(cusoftmax.logsumexp(odd, axis=-1), odd, -1)
    one = x[[0]]
    assert_logsumexp(cusoftmax.logsumexp(one, axis=-1), one, -1)
    many = cupy.tile(x, (max(1, 2**16 // cols), 1))
    assert_logsumexp(cusoftmax.logsumexp(many, axis=-1), many, -1)


@pytest.mark.parametrize("shape,axis", [((5, 7), 0), ((700, 300), 0), ((4096, 3), 0),
                                        ((9000, 64), 0), ((3, 20000, 33), 1), ((64, 33, 5), (0, 2)),
                                        ((16, 9, 4), None), ((8, 300, 4), (1,))])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_logsumexp_strided_and_tuple_axes(shape, axis, dtype):
    x = cupy.asarray(make_values(np.random.default_rng(21), shape, np.dtype(dtype), specials=0.001))
    assert_logsumexp(cusoftmax.logsumexp(x, axis=axis), x, axis)
    t = x.T
    assert_logsumexp(cusoftmax.logsumexp(t, axis=0), t, 0)
    flipped = x[::-1]
    assert_logsumexp(cusoftmax.logsumexp(flipped, axis=axis), flipped, axis)
    kept = to_host(cusoftmax.logsumexp(x, axis=axis, keepdims=True))
    assert kept.shape == np.asarray(scipy.special.logsumexp(np.zeros(shape), axis=axis, keepdims=True)).shape


@pytest.mark.parametrize("n", [5, 700, 9000])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_logsumexp_special_columns(n, dtype):
    x = cupy.asarray(np.ascontiguousarray(log_lines(n, dtype).T).astype(dtype))
    assert_logsumexp(cusoftmax.logsumexp(x, axis=0), x, 0)


def test_logsumexp_dominant_term_sign_and_determinism():
    x = cupy.asarray([[0.0, -50.0, -60.0], [-np.inf] * 3, [np.nan, 1.0, 2.0], [np.inf, 1.0, 2.0]])
    r, sgn = (to_host(a) for a in cusoftmax.logsumexp(x, axis=1, return_sign=True))
    assert r[0] == math.log1p(math.exp(-50.0) + math.exp(-60.0))
    assert r[1] == -np.inf and np.isnan(r[2]) and r[3] == np.inf
    assert list(sgn[[0, 1, 3]]) == [1.0, 0.0, 1.0] and np.isnan(sgn[2])
    big = cupy.asarray(make_values(np.random.default_rng(3), (3, 5_000_001), np.dtype(np.float32)))
    assert_same_bits(cusoftmax.logsumexp(big, axis=1), cusoftmax.logsumexp(big, axis=1))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_logsumexp_steps_in_flight_change_no_bit(dtype):
    """reduce_lanes' rings: how many steps are in flight (one in registers or in shared memory,
    or more), and who copies them (each lane its own packs, or the warp whole rows: WarpRing,
    for rows in reduce_lane_warp_lanes lanes, or all), move no result bit: rows in a warp, in
    fewer lanes (1, 2 and 4 of them too) and streamed by a warp, with tails, rows past the last,
    rows apart (a view of every other row, and of the first columns), and packs under 4 bytes."""
    rng = np.random.default_rng(9)
    one = TUNING.vary(reduce_lane_stages=1)
    deep = TUNING.vary(reduce_lane_stages=5, reduce_lane_staged_lanes=1)
    own = TUNING.vary(reduce_lane_warp_lanes=(1, 1))  # no WarpRing: registers
    every = TUNING.vary(reduce_lane_warp_lanes=(1, 33))  # WarpRing, all lanes
    shapes = [(4099, 37), (20000, 1000), (5000, 8191), (4500, 300), (9000, 24), (5003, 32),
              (3001, 64), (7001, 16), (2999, 20), (4000, 8), (1001, 128), (333, 4)]
    for shape in shapes:
        full = cupy.asarray(make_values(rng, (shape[0], shape[1] + 8), np.dtype(dtype), specials=0.001))
        for x in (full[:, :shape[1]], full[::2, :shape[1]], cupy.ascontiguousarray(full[:, :shape[1]]),
                  full[:, 1:shape[1] + 1]):
            got = cusoftmax.logsumexp(x, axis=-1)
            assert_logsumexp(got, x, -1)
            for variant in (one, deep, own, every):
                with planning.use(variant):
                    assert_same_bits(cusoftmax.logsumexp(x, axis=-1), got)


@pytest.mark.parametrize("variant", [{"reduce_shifted": 0}, {"reduce_shifted": 1},
                                     {"reduce_column_steps": 4}, {"reduce_columns_strip_cols": 512},
                                     {"reduce_columns_max_vec": 1}], ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_logsumexp_kernel_variants_against_scipy(variant, dtype):
    """The tuning's other kernels (terms by exp_shifted or fast_exp in each reduce kernel, steps
    a column batch, columns a strip, columns a thread) give SciPy's answers too: columns with
    tails and chunks (a strip's columns in part), long rows in chunks, rows in lanes, and the
    special lines."""
    rng = np.random.default_rng(12)
    with planning.use(TUNING.vary(**variant)):
        for shape, axis in [((9000, 64), 0), ((4100, 132), 0), ((3, 20001, 33), 1), ((2, 300001), 1),
                            ((700, 37), 1)]:
            x = cupy.asarray(make_values(rng, shape, np.dtype(dtype), specials=0.001))
            assert_logsumexp(cusoftmax.logsumexp(x, axis=axis), x, axis)
        lines = log_lines(700, dtype)
        for x, axis in [(lines, 1), (np.ascontiguousarray(lines.T), 0)]:
            x = cupy.asarray(x.astype(dtype))
            assert_logsumexp(cusoftmax.logsumexp(x, axis=axis), x, axis)


def test_logsumexp_of_a_1e8_row_in_float32():
    """The issue's bound: a float32 row of 1e8 elements within 1e-6 relative of float64."""
    x = cupy.random.default_rng(4).standard_normal(10**8, dtype=cupy.float32)
    got = float(cusoftmax.logsumexp(x))
    ref = float(cupy.asnumpy(cupy.log(cupy.exp(x.astype(cupy.float64)).sum())))
    assert abs(got - ref) <= 1e-6 * abs(ref)


def test_fast_path_keeps_the_operations_apart():
    """softmax and log_softmax of arrays alike take remembered launches keyed by the operation."""
    from cusoftmax import _engine

    x = cupy.asarray(make_values(np.random.default_rng(8), (64, 300), np.dtype(np.float32)))
    first = [cusoftmax.softmax(x), cusoftmax.log_softmax(x)]
    assert _engine._fast_key(x, -1, "softmax") in _engine._fast
    assert _engine._fast_key(x, -1, "log_softmax") in _engine._fast
    again = [cusoftmax.log_softmax(x), cusoftmax.softmax(x)]
    assert_same_bits(again[0], first[1])
    assert_same_bits(again[1], first[0])
    assert_log_softmax(again[0], x, -1)


@pytest.mark.parametrize("axis", [-1, 0, (0, 2), None])
def test_logsumexp_fast_path_gives_the_first_calls_result(axis):
    """Repeated logsumexp calls (the fast path after the first) keep keepdims and each call's
    scale apart, and give the general path's bits and shape."""
    from cusoftmax import _engine

    a = make_values(np.random.default_rng(11), (6, 40, 33), np.dtype(np.float32))
    x = cupy.asarray(a)
    for keepdims in (False, True, False):
        for scale in (None, 0.5, 2.0):
            got = cusoftmax.logsumexp(x, axis=axis, keepdims=keepdims, scale=scale)
            key = _engine._fast_op(("logsumexp", keepdims), None if scale is None else scale)
            # axes (0, 2) are read from a copy with them last: no launch of x to remember
            assert (_engine._fast_key(x, axis, key) in _engine._fast) == (axis != (0, 2))
            want = cusoftmax.logsumexp(cupy.asarray(a) if scale is None else
                                       cupy.asarray(a * np.float32(scale)), axis=axis,
                                       keepdims=keepdims)
            assert got.shape == want.shape == np.asarray(scipy.special.logsumexp(
                a, axis=axis, keepdims=keepdims)).shape
            assert_same_bits(got, want)
    r, sgn = cusoftmax.logsumexp(x, axis=axis, return_sign=True)  # not the fast path's
    assert_same_bits(r, cusoftmax.logsumexp(x, axis=axis))
    assert_logsumexp(r, x, axis)


# ---- the backward passes: the vjp family (kernels/vjp.cu).
def assert_vjp(dx, y, dy, axis, log):
    ref, size = vjp_reference(np, to_host(y), to_host(dy), normalize_axes(axis, y.ndim), log)
    dx = to_host(dx)
    msg = violations(dx, ref, dx.dtype.name, VJP_TOLERANCE, of=np.broadcast_to(size, ref.shape))
    assert msg is None, msg


def vjp_inputs(rng, shape, dtype, log):
    """(y, dy, the VJP): y a softmax (log: log_softmax) over the last axis of random values."""
    x = make_values(rng, shape, np.dtype(np.float32)).astype(np.float64)
    y = scipy.special.log_softmax(x, axis=-1) if log else scipy.special.softmax(x, axis=-1)
    dy = cupy.asarray(make_values(rng, shape, np.dtype(dtype)))
    return cupy.asarray(y).astype(dtype), dy, cusoftmax.log_softmax_vjp if log else cusoftmax.softmax_vjp


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("cols", [1, 3, 32, 100, 256, 257, 500, 512, 1000, 4097, 30000, 300001])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_vjps_every_row_kernel(cols, dtype, log):
    """Rows of the lanes and block kernels (and few long rows, the chunks kernel), with `out`
    that is y itself, and an axis that is not the last (copied to rows)."""
    rng = np.random.default_rng(cols)
    rows = max(2, min(4096, 2**21 // cols))
    y, dy, fn = vjp_inputs(rng, (rows, cols), dtype, log)
    dx = fn(y, dy)
    assert_vjp(dx, y, dy, -1, log)
    assert_same_bits(fn(y, dy), dx)
    inplace = y.copy()
    assert fn(inplace, dy, out=inplace) is inplace
    assert_same_bits(inplace, dx)
    t = cupy.ascontiguousarray(y.T)
    assert_vjp(fn(t, cupy.ascontiguousarray(dy.T), axis=0), t, cupy.ascontiguousarray(dy.T), 0, log)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64], ids=str)
@pytest.mark.parametrize("shape", [(40, 2**18 + 5), (1, 3 * 2**20), (3, 9001)])
def test_vjp_chunks_of_few_long_rows(shape, dtype, log):
    """vjp_chunks (fewer rows than 2 an SM): several groups of rows, a short last chunk, odd
    rows in packs of one; the same bits on every call (the partials added in chunk order)."""
    from cusoftmax import planning

    rng = np.random.default_rng(shape[1])
    y, dy, fn = vjp_inputs(rng, shape, dtype, log)
    layout = Layout(*shape, 1, (shape[1], 1), (shape[1], 1))
    plan = planning.vjp_plan(layout, y.dtype.itemsize, (0, 0, 0), planning.device_limits(y.device.id))
    assert plan.kernel == "vjp_chunks"
    dx = fn(y, dy)
    assert_vjp(dx, y, dy, -1, log)
    assert_same_bits(fn(y, dy), dx)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64], ids=str)
@pytest.mark.parametrize("packs", [8192, 8000, 4097, 4096, 2048])
def test_vjp_hold_rows(packs, dtype, log):
    """vjp_hold (a row held on chip): full blocks, a short last warp's packs, 17 warps, two and
    four blocks an SM; the same bits on every call, and the block kernel's results within the
    bound."""
    itemsize = np.dtype(dtype).itemsize
    cols, limits = packs * 16 // itemsize, planning.device_limits(0)
    rows = 4 * limits.sm_count + 3  # rows past the first round of blocks
    layout = Layout(rows, cols, 1, (cols, 1), (cols, 1))
    assert planning.vjp_plan(layout, itemsize, (0, 0, 0), limits).kernel == "vjp_hold"
    rng = np.random.default_rng(packs)
    y, dy, fn = vjp_inputs(rng, (rows, cols), dtype, log)
    dx = fn(y, dy)
    assert_vjp(dx, y, dy, -1, log)
    assert_same_bits(fn(y, dy), dx)
    with planning.use(TUNING.vary(vjp_hold_min_bytes=2**40)):
        assert_vjp(fn(y, dy), y, dy, -1, log)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float64], ids=str)
@pytest.mark.parametrize("shape,axis", [((4096, 300), 0), ((3, 5000, 40), 1), ((2, 7, 33), 1),
                                        ((20000, 64), 0), ((6, 50, 8, 40), (1, 2))])
def test_vjp_columns_of_a_strided_axis(shape, axis, dtype, log):
    """vjp_columns (a strided reduced axis, no transposing copy): strips with a short last pack
    and strip, many chunks and groups, a chunk of a few steps, two reduced axes that collapse to
    one; the same bits on every call, and for the transposed views (their own strides)."""
    from cusoftmax import _args, _engine
    from cusoftmax._layout import collapse

    rng = np.random.default_rng(sum(shape))
    x = make_values(rng, shape, np.dtype(np.float32)).astype(np.float64)
    y = cupy.asarray(scipy.special.log_softmax(x, axis=axis) if log
                     else scipy.special.softmax(x, axis=axis)).astype(dtype)
    dy = cupy.asarray(make_values(rng, shape, np.dtype(dtype)))
    c = _args.prepare(y, axis, None, None, "softmax_vjp")
    layout = collapse(y.shape, _engine._elem_strides(y), _engine._elem_strides(y), c.axes)
    plan = planning.vjp_plan(layout, y.dtype.itemsize, (0, 0, 0), planning.device_limits(y.device.id))
    assert plan.kernel == "vjp_columns"
    fn = cusoftmax.log_softmax_vjp if log else cusoftmax.softmax_vjp
    dx = fn(y, dy, axis=axis)
    assert_vjp(dx, y, dy, axis, log)
    assert_same_bits(fn(y, dy, axis=axis), dx)
    if y.ndim == 2:
        assert_same_bits(fn(y.T, dy.T, axis=1 - axis), dx.T)


@pytest.mark.parametrize("log", [False, True])
def test_vjp_fast_path_serves_only_calls_like_the_remembered(log):
    """A backward pass on C-contiguous y and dy of y's dtype is remembered (_engine._fast) and
    serves later calls like it with the same bits; dy of other strides or dtype, another axis,
    or a wrong shape take the general path (its results, its errors)."""
    from cusoftmax import _engine

    rng = np.random.default_rng(5)
    x = make_values(rng, (64, 300), np.dtype(np.float32))
    y = cupy.asarray(scipy.special.log_softmax(x.astype(np.float64), axis=-1) if log
                     else scipy.special.softmax(x.astype(np.float64), axis=-1)).astype(np.float32)
    dy = cupy.asarray(make_values(rng, (64, 300), np.dtype(np.float32)))
    fn = cusoftmax.log_softmax_vjp if log else cusoftmax.softmax_vjp
    op = "log_softmax_vjp" if log else "softmax_vjp"
    first = fn(y, dy)
    assert _engine._vjp_key(y, dy, -1, op) in _engine._fast
    assert_vjp(first, y, dy, -1, log)
    assert_same_bits(fn(y, dy), first)
    assert_same_bits(fn(y, cupy.asfortranarray(dy)), first)  # other strides: rows copied
    d64 = dy.astype(np.float64)
    assert_same_bits(fn(y, d64), first)  # dy cast to y's dtype first
    assert fn(y, d64).dtype == np.float32
    assert_vjp(fn(y, dy, axis=0), y, dy, 0, log)
    with pytest.raises(ValueError, match="dy has shape"):
        fn(y, dy[:, :-1])
    y2, dy2 = y[:32], dy[:32]  # a view of the same memory, another shape: its own entry
    assert_same_bits(fn(y2, dy2), first[:32])


def test_slice_states_of_the_reduce_kernels():
    """slice_state: (m, c, s) a slice, m the max, c the count at it, s the other terms' sum."""
    from cusoftmax import _args, _engine

    x = make_values(np.random.default_rng(9), (300, 5000), np.dtype(np.float32))
    x[:, 7] = x.max(axis=1)  # each max twice
    x[3] = -np.inf
    for axis in (1, 0):
        st = to_host(_engine.reduced(_args.prepare(cupy.asarray(x), axis, None, None, "logsumexp"),
                                  "slice_state"))
        x64 = x.astype(np.float64)
        m = x64.max(axis=axis)
        assert st.dtype == np.float64 and np.array_equal(st[..., 0], m)
        ok = np.isfinite(m)  # a slice of -inf: (-inf, c >= 1, 0), c counting padding too
        counts = (x64 == np.expand_dims(m, axis)).sum(axis=axis)
        assert np.array_equal(st[ok, 1], counts[ok]) and (st[~ok, 1] >= counts[~ok]).all()
        assert (st[~ok, 2] == 0).all()
        with np.errstate(all="ignore"):
            others = np.where(x64 == np.expand_dims(m, axis), 0.0, np.exp(x64 - np.expand_dims(m, axis)))
        assert np.allclose(st[ok, 2], others.sum(axis=axis)[ok], rtol=1e-5, atol=0)


# ---- the normalize kernel: rows from their given (m, k), as Dask's chunks of a row take them
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64], ids=str)
@pytest.mark.parametrize("shape, step", [((3, 5), 5), ((64, 4099), 4099), ((2, 300001), 300001),
                                         ((7, 1000), 1003), ((2, 3, 777), 777)])
def test_rows_normalised_from_their_state(op, dtype, shape, step):
    """x's rows (at `step` elements apart) from each row's state, as composed.state gives it:
    within the bounds against SciPy, special rows included; a positive scale by the load."""
    from cusoftmax import _engine
    from cusoftmax import _composed as C

    if op == "log_softmax" and dtype == np.float64:
        pytest.skip("float64 log_softmax is not a fused type")
    rng = np.random.default_rng(11)
    n = shape[-1]
    rows = math.prod(shape[:-1])
    base = (rng.standard_normal((rows, step)) * 4).astype(dtype)
    base[0, n // 2] = np.inf
    base[-1, : n] = -np.inf
    if rows > 2:
        base[1, 0] = np.nan
    x = cupy.asarray(base)[:, :n]
    if len(shape) > 2:
        x = cupy.ascontiguousarray(x).reshape(shape)
    for scale in (None, 0.37):
        st = C.state(cupy, x, (x.ndim - 1,), scale=scale)
        k = C.constant(cupy, op, st)
        mk = cupy.stack((st.m.reshape(-1), k.reshape(-1)), axis=-1)
        y = _engine.normalized(x, mk, op, scale)
        assert y is not None and y.shape == x.shape and y.dtype == x.dtype
        compute = np.float64 if dtype == np.float64 else np.float32
        v = to_host(x).astype(compute) * (compute(1) if scale is None else compute(scale))
        with np.errstate(all="ignore"):
            ref = getattr(scipy.special, op)(v.astype(np.float64), axis=-1)
        table = LOG_TOLERANCE if op == "log_softmax" else None
        msg = violations(to_host(y), ref, np.dtype(dtype).name, *((table,) if table else ()))
        assert msg is None, msg
