"""Axis handling: the [outer][n][inner] view that collapse() finds indexes exactly the softmax
slices of any strided view (checked by running the kernels' indexing in NumPy)."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from numpy.lib.stride_tricks import as_strided

from cusoftmax._host import softmax as host_softmax
from cusoftmax._layout import collapse, normalize_axes
from _support import FLOAT_DTYPES, assert_softmax, build, views


def _emulate(x, y, layout):
    """What a kernel does with `layout`: softmax over the middle axis of the 3-D views."""
    isz = x.itemsize
    xv = as_strided(x, (layout.outer, layout.n, layout.inner), [s * isz for s in (*layout.xs, 1)])
    yv = as_strided(y, (layout.outer, layout.n, layout.inner), [s * isz for s in (*layout.ys, 1)])
    yv[...] = host_softmax(xv, (1,), x.dtype)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=views(dtypes=FLOAT_DTYPES))
def test_collapsed_view_covers_each_slice(case):
    x, axis = build(np, case)
    axes = normalize_axes(axis, x.ndim)
    y = np.empty_like(x)
    strides = [tuple(s // x.itemsize for s in a.strides) for a in (x, y)]
    layout = collapse(x.shape, *strides, axes)
    if layout is None:  # only for views no single [outer][n][inner] view can describe
        assert not (x.flags.c_contiguous and y.flags.c_contiguous and axes == tuple(range(x.ndim - len(axes), x.ndim)))
        return
    assert layout.outer * layout.n * layout.inner == x.size
    if not layout.rows:
        assert layout.inner > 1
    y[...] = np.nan
    _emulate(x, y, layout)
    assert_softmax(y, x, axis)


def test_common_layouts():
    c = collapse((4, 5, 6), (30, 6, 1), (30, 6, 1), (2,))
    assert (c.outer, c.n, c.inner, c.xs, c.rows) == (20, 6, 1, (6, 1), True)
    c = collapse((4096, 16384), (16384, 1), (16384, 1), (0,))  # axis 0 of a C matrix
    assert (c.outer, c.n, c.inner, c.xs) == (1, 4096, 16384, (0, 16384))
    c = collapse((8, 9), (1, 8), (1, 8), (1,))  # a transposed matrix, last axis
    assert (c.outer, c.n, c.inner, c.xs) == (1, 9, 8, (0, 8))
    c = collapse((3, 4, 5), (20, 5, 1), (20, 5, 1), (0, 1, 2))
    assert (c.outer, c.n, c.rows) == (1, 60, True)
    c = collapse((6, 7), (-7, 1), (7, 1), (1,))  # reversed rows: negative row stride
    assert (c.outer, c.n, c.xs, c.ys) == (6, 7, (-7, 1), (7, 1))
    assert collapse((6, 7), (7, -1), (7, 1), (1,)) is None  # reversed inside a row
    assert collapse((), (), (), ()).n == 1
