"""Axis handling: the [outer][n][inner] view that collapse() finds indexes exactly the softmax
slices of any strided view (checked by running the kernels' indexing in NumPy)."""

import numpy as np
import pytest
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


def test_zero_d_takes_axis_0_and_minus_1():
    """As NumPy's reductions: an int 0 or -1 on a 0-d array is its one slice; a tuple is not."""
    assert normalize_axes(0, 0) == normalize_axes(-1, 0) == normalize_axes(None, 0) == ()
    for axis in (1, -2, (0,), (-1,)):
        with pytest.raises(np.exceptions.AxisError):
            normalize_axes(axis, 0)


def test_axis_error_message_names_the_axis_once():
    with pytest.raises(np.exceptions.AxisError) as info:
        normalize_axes(-3, 2)
    assert str(info.value) == "axis -3 is out of bounds for array of dimension 2"


@pytest.mark.parametrize("axis", [True, False, np.True_, (0, True), (np.False_,)])
def test_bool_axis_is_a_type_error(axis):
    with pytest.raises(TypeError, match="bool"):
        normalize_axes(axis, 2)


@pytest.mark.parametrize("axis", [10**20, -(10**20), (0, 2**64)])
def test_huge_axis_is_an_axis_error(axis):
    with pytest.raises(np.exceptions.AxisError):
        normalize_axes(axis, 2)


def test_axis_takes_numpy_integers():
    assert normalize_axes(np.int64(-1), 3) == (2,)
    assert normalize_axes((np.uint8(0), -1), 3) == (0, 2)
    with pytest.raises(TypeError):
        normalize_axes(1.0, 3)
