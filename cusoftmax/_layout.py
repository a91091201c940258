"""Axis handling, written once: turn (shape, strides, reduced axes) into the 3-D view the kernels
take, ``[outer][n][inner]``, softmax over ``n``, or say that no such view exists."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np
from numpy.exceptions import AxisError


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    """Sorted, non-negative axes; ``None`` means every axis (as SciPy).

    An int 0 or -1 on a 0-d array is its one element (as NumPy's reductions take it; a tuple
    ``(0,)`` there is out of range, as in NumPy). Raises ``numpy.exceptions.AxisError`` for an
    axis out of range, ``TypeError`` for an axis that is not an integer (bool included: SciPy
    refuses ``axis=True``) and ``ValueError`` for a repeated one.
    """
    if type(axis) is int and -ndim <= axis < ndim:  # the common case, in one test
        return (axis % ndim,)
    if axis is None:
        return tuple(range(ndim))
    if not isinstance(axis, tuple):
        if ndim == 0 and _index(axis) in (0, -1):
            return ()
        axis = (axis,)
    axes = []
    for a in map(_index, axis):
        if not -ndim <= a < ndim:
            raise AxisError(a, ndim)
        axes.append(a % ndim)
    if len(set(axes)) != len(axes):
        raise ValueError(f"repeated axis in axis={axis}")
    return tuple(sorted(axes))


def _index(a) -> int:
    """One axis as a Python int (of any size: an out-of-range one is an AxisError, not an
    OverflowError)."""
    if isinstance(a, (bool, np.bool_)):
        raise TypeError(f"an axis must be an integer, not bool ({a!r})")
    try:
        return operator.index(a)
    except TypeError:
        raise TypeError(f"an axis must be an integer, not {type(a).__name__} ({a!r})") from None


@dataclass(frozen=True)
class Layout:
    """Element (o, k, i) of the input is at ``x + o*xs[0] + k*xs[1] + i`` (output: ``ys``).

    Strides are in elements. ``inner == 1`` with unit ``n`` strides is a batch of contiguous
    rows (``outer`` rows of ``n`` elements); otherwise the inner axis is contiguous.
    """

    outer: int
    n: int
    inner: int
    xs: tuple[int, int]
    ys: tuple[int, int]

    @property
    def rows(self) -> bool:
        return self.inner == 1 and self.xs[1] == 1 and self.ys[1] == 1


def _chain(dims, shape, strides_list):
    """Merge dims (ordered outermost first) into one; (size, per-array innermost stride) or None."""
    for a, b in zip(dims, dims[1:]):
        if any(s[a] != shape[b] * s[b] for s in strides_list):
            return None
    size = math.prod(shape[d] for d in dims)
    return size, tuple(s[dims[-1]] for s in strides_list) if dims else (0,) * len(strides_list)


def collapse(shape, x_strides, y_strides, axes) -> Layout | None:
    """The [outer][n][inner] view shared by input and output, or None if their strides allow none
    (then the caller works on a contiguous copy)."""
    strides = (x_strides, y_strides)
    live = [d for d in range(len(shape)) if shape[d] != 1]

    def by_stride(dims):
        return sorted(dims, key=lambda d: -abs(x_strides[d]))

    reduced = _chain(by_stride([d for d in live if d in axes]), shape, strides)
    if reduced is None:
        return None
    n, sn = reduced
    if n == 1:
        sn = (1, 1)
    kept = by_stride([d for d in live if d not in axes])
    if sn == (1, 1):
        outer = _chain(kept, shape, strides)
        if outer is None:
            return None
        return Layout(outer[0], n, 1, (outer[1][0], 1), (outer[1][1], 1))
    # Strided reduction: the kept dims must end in a unit-stride run (the inner axis).
    for split in range(len(kept)):
        inner = _chain(kept[split:], shape, strides)
        if inner is None or inner[1] != (1, 1):
            continue
        outer = _chain(kept[:split], shape, strides)
        if outer is not None:
            return Layout(outer[0], n, inner[0], (outer[1][0], sn[0]), (outer[1][1], sn[1]))
    return None
