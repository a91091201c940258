"""The argument rules of every function, written once: dtypes, axes and the prepared call,
`out`, `where`, `scale`, `b`, `dy`, `k`, `method`. Every check runs before anything is computed
or written."""

from __future__ import annotations

import contextlib
import operator
from typing import Any, NamedTuple

import numpy as np
from numpy.exceptions import AxisError

from . import _arrays
from ._ops import INPUT_NAMES, ONE_AXIS
from ._layout import normalize_axes
from .planning import METHODS

# Float types kept by the result, by dtype name (ml_dtypes is not imported for them: an input
# of its types comes from a caller that imported it). The kernels take GPU_FLOATS; the host
# also computes longdouble (in longdouble, where it is wider than float64) and ml_dtypes' 8-bit
# floats (in float32, one rounding at the store, as the half types).
GPU_FLOATS = ("float16", "bfloat16", "float32", "float64")
LONGDOUBLE = np.dtype(np.longdouble)
FLOAT8 = ("float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
          "float8_e5m2", "float8_e5m2fnuz", "float8_e5m3fnu")
HOST_FLOATS = FLOAT8 + ((LONGDOUBLE.name,) if LONGDOUBLE.name not in GPU_FLOATS else ())


def result_dtype(dtype, on_gpu: bool = False, op: str = "softmax") -> np.dtype:
    """The result's dtype, in native byte order (as NumPy's ufuncs make theirs): floats keep
    theirs, integers promote as NumPy's ``exp`` does. ``on_gpu``: refuse the host-only types;
    ``op`` names the function in messages."""
    try:
        return _RESULT_DTYPES[dtype, on_gpu]
    except (KeyError, TypeError):  # not seen yet, or not a hashable dtype
        pass
    got = _result_dtype(np.dtype(dtype), on_gpu, op)
    _RESULT_DTYPES[np.dtype(dtype), on_gpu] = got
    return got


_RESULT_DTYPES: dict = {}  # (dtype, on_gpu) -> result dtype, for the types taken


def native(dtype: np.dtype) -> np.dtype:
    """`dtype` in native byte order, as NumPy's own descriptor of its type: one made by
    ``newbyteorder("=")`` compares equal but is another object, and NumPy's fast loops that
    look for their own (``ufunc.at``'s: 20x slower on float64, record segment-2) miss it."""
    return np.dtype(dtype.type)


def _result_dtype(dtype: np.dtype, on_gpu: bool, op: str) -> np.dtype:
    if dtype.name in GPU_FLOATS:
        return native(dtype)
    if dtype.name in HOST_FLOATS:
        if on_gpu:
            raise TypeError(f"{op}: {dtype} is computed on the host only: pass a NumPy array")
        return native(dtype)
    if dtype.kind in "iu":
        return native(np.result_type(dtype, np.float16))
    if dtype.name == "float8_e8m0fnu":  # powers of two only
        raise TypeError(f"{op}: {dtype} holds no zero (the result of -inf entries and of tiny "
                        f"ones)")
    raise TypeError(f"{op} takes real floating-point or integer arrays, not {dtype}")


def host_method(method) -> None:
    """`method` names a GPU kernel: refused for an input computed on the host."""
    if method is not None:
        raise ValueError("method= chooses a GPU kernel; this input is computed on the host")


class Call(NamedTuple):
    """A call's arguments after every rule: what the computation needs and nothing else."""

    src: _arrays.Adapted  # the input as adapted, with its framework's wrapper for the result
    array: Any  # the input as a cupy.ndarray (GPU) or a numpy.ndarray (host)
    axes: tuple[int, ...]  # the reduced axes, sorted and non-negative
    dtype: np.dtype  # the result's dtype
    out: Any  # the array behind `out` (same kind as `array`), or None
    op: str = "softmax"  # the function called, for messages
    xp: Any = np  # the array module of `array`: numpy or cupy
    device: Any = contextlib.nullcontext()  # entered around GPU work: the input's device
    sliced: tuple[int, ...] = ()  # the shape of `array` with the reduced axes of length 1
    where: Any = None  # the checked operands: the mask in its own shape (never expanded),
    scale: Any = None  # the scale (a scalar as given, or an array), the weights `b`,
    b: Any = None
    dy: Any = None  # dy in the result's dtype

    @property
    def input_name(self) -> str:
        """The name of the function's first argument (``a``, ``y`` or ``x``)."""
        return INPUT_NAMES.get(self.op, "x")  # "x" for an op not declared (slice_state)




def prepare(x, axis, out, method, op: str, empty_ok=False, *, where=None, scale=None, b=None,
            dy=None) -> Call:
    """The argument rules of the functions that reduce slices of `x` (`op` names the function
    in messages), with their operands: every check runs here, before anything is computed or
    written. With `b`, `x` is first broadcast with it (logsumexp, as SciPy); ``empty_ok``: a
    reduced axis of length 0 is allowed (an empty sum)."""
    if op in ONE_AXIS:
        int_axis(axis, op)
    if method is not None and method not in METHODS:
        raise ValueError(f"method must be None or one of {', '.join(map(repr, METHODS))}, "
                         f"got {method!r}")
    shape = with_weights(x, b)
    src = _arrays.adapt(x)
    arr = src.array
    dtype = result_dtype(arr.dtype, src.on_gpu, op)
    xp = _arrays.cupy_or_none() if src.on_gpu else np
    if shape is not None and arr.shape != shape:
        arr = xp.broadcast_to(arr, shape)
    axes = axes_rule(axis, arr.shape, op, empty_ok)
    c = Call(src, arr, axes, dtype, check_out(out, src, arr.shape, dtype), op, xp,
             arr.device if src.on_gpu else contextlib.nullcontext(),
             tuple(1 if d in axes else n for d, n in enumerate(arr.shape)))
    if not src.on_gpu:
        host_method(method)
    if where is None and scale is None and b is None and dy is None:
        return c
    return Call(*c[:9], checked_where(where, c), checked_scale(scale, c), checked_weights(b, c),
                None if dy is None else checked_dy(dy, c))


def axes_rule(axis, shape, op: str, empty_ok=False) -> tuple[int, ...]:
    """The reduced axes of an input of `shape` (sorted, non-negative); a reduced axis of length
    0 is a ValueError unless ``empty_ok`` (an empty sum)."""
    axes = normalize_axes(axis, len(shape))
    if not empty_ok and any(shape[a] == 0 for a in axes):
        raise ValueError(f"{op} over an axis of length 0 (shape {tuple(shape)}, axis {axis})")
    return axes


def no_jax_out() -> None:
    raise TypeError("out= cannot be used with JAX arrays: they are immutable")


def check_out(out, src, shape, dtype):
    """The array behind `out` (CuPy or NumPy), after every check, or None."""
    if out is None:
        return None
    if src.framework in ("jax", "jaxlib"):
        no_jax_out()
    try:
        dst = _arrays.adapt(out, arrays_only=True)
    except TypeError as e:
        raise TypeError(f"out must be an array of the same kind as x: {e}") from None
    if dst.on_gpu != src.on_gpu or dst.framework != src.framework:
        raise TypeError(
            f"out must be an array of the same kind as x ({src.framework}), "
            f"got {type(out).__name__}"
        )
    arr = dst.array
    if arr.shape != tuple(shape):
        raise ValueError(f"out has shape {arr.shape}, the result has shape {tuple(shape)}")
    if arr.dtype.newbyteorder("=") != dtype:  # either byte order: the store swaps the bytes
        raise TypeError(f"out has dtype {arr.dtype}, the result has dtype {dtype}")
    if src.on_gpu and arr.device.id != src.array.device.id:
        raise ValueError(f"out is on device {arr.device.id}, x on device {src.array.device.id}")
    if not src.on_gpu and not arr.flags.writeable:
        raise ValueError("out is read-only")
    return arr


def _operand(obj, c: Call, name: str):
    """`obj` as an array of the call's kind: a host array (or scalar, or list) goes to the GPU
    with a GPU `x`; a GPU array with a host `x` is a TypeError."""
    a = _arrays.adapt(obj)
    if a.on_gpu and not c.src.on_gpu:
        raise TypeError(f"{name} is a GPU array ({a.framework}) and x a host array")
    if c.src.on_gpu and not a.on_gpu:
        with c.device:
            return c.xp.asarray(a.array)
    return a.array


def _broadcasts(a, shape, name: str, what: str):
    try:
        ok = np.broadcast_shapes(a.shape, shape) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name} of shape {a.shape} does not broadcast to {what} {tuple(shape)}")


def real_rule(a, name: str, bool_ok=False) -> None:
    """Real numbers: the dtypes softmax takes (bool too where `bool_ok`)."""
    if a.dtype == np.bool_ and bool_ok:
        return
    try:
        result_dtype(a.dtype)
    except TypeError:
        raise TypeError(f"{name} must hold real numbers, not {a.dtype}") from None


def checked_where(where, c: Call):
    """The mask in its own shape (a broadcast mask is never expanded)."""
    if where is None:
        return None
    w = _operand(where, c, "where")
    mask_rule(w, c.array.shape, c.input_name)
    return w


def mask_rule(w, shape, input_name="x") -> None:
    """`where`'s rule for an array of any framework (its dtype and shape): bool, broadcastable
    to the input's `shape`."""
    if w.dtype != np.bool_:
        raise TypeError(f"where must be a bool array, not {w.dtype}")
    _broadcasts(w, shape, "where", f"{input_name}'s shape")


def scalar_scale(scale) -> bool:
    """Whether `scale` is a Python or NumPy real scalar (a bool is a TypeError)."""
    if isinstance(scale, (bool, np.bool_)):
        raise TypeError("scale must be a real number, not bool")
    return isinstance(scale, (int, float, np.integer, np.floating))


def scale_rule(s, shape, unit="slice") -> None:
    """An array `scale`'s rule, for an array of any framework: real, one value a `unit`
    (broadcastable to `shape`: the input's with the reduced axes of length 1, or with the
    segments' axis of their number)."""
    real_rule(s, "scale")
    _broadcasts(s, shape, "scale", f"one value a {unit}: the shape")


def checked_scale(scale, c: Call, shape=None, unit="slice"):
    """A Python or NumPy scalar as it is; an array as ``scale_rule`` says (`shape`: default
    the shape of `x` with the reduced axes of length 1)."""
    if scale is None or scalar_scale(scale):
        return scale
    s = _operand(scale, c, "scale")
    scale_rule(s, c.sliced if shape is None else shape, unit)
    return s


def checked_weights(b, c: Call):
    if b is None:
        return None
    w = _operand(b, c, "b")
    real_rule(w, "b", bool_ok=True)
    _broadcasts(w, c.array.shape, "b", "a's shape")
    return w


def checked_dy(dy, c: Call):
    """`dy` of `y`'s shape and kind, in the result's dtype."""
    g = _operand(dy, c, "dy")
    dy_rule(g, c.array.shape)
    return g.astype(c.dtype, copy=False)


def dy_rule(g, shape) -> None:
    """`dy`'s rule, for an array of any framework: real, of `y`'s shape."""
    real_rule(g, "dy")
    if g.shape != tuple(shape):
        raise ValueError(f"dy has shape {g.shape}, y has shape {tuple(shape)}")


def no_method(method, c: Call, op: str):
    if method is None:
        return
    if not c.src.on_gpu:
        host_method(method)
    raise ValueError(f"method= chooses a fused kernel; none computes {op} yet (it runs as "
                     f"array operations on the GPU)")


def with_weights(a, b):
    """The shape `a` and `b` broadcast to together (as SciPy's logsumexp), or None without `b`."""
    if b is None:
        return None
    try:
        return np.broadcast_shapes(np.shape(a), np.shape(b))
    except ValueError:
        raise ValueError(f"b of shape {np.shape(b)} does not broadcast with a's shape "
                         f"{np.shape(a)}") from None


def log_sum_out(out, c: Call, shape, return_sign):
    """The arrays behind logsumexp's `out` (one, or two with `return_sign`), checked."""
    if out is None:
        return None
    outs = out if return_sign else (out,)
    if not isinstance(outs, tuple) or len(outs) != 1 + return_sign:
        raise TypeError("out must be an array, or a tuple of two arrays with return_sign=True")
    return tuple(check_out(o, c.src, shape, c.dtype) for o in outs)


def count_k(k, n: int) -> int:
    """`k` as a Python int in ``[1, n]``."""
    if isinstance(k, (bool, np.bool_)):
        raise TypeError(f"k must be an integer, not bool ({k!r})")
    try:
        k = operator.index(k)
    except TypeError:
        raise TypeError(f"k must be an integer, not {type(k).__name__} ({k!r})") from None
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the axis length {n}, got {k}")
    return k


def int_axis(axis, op: str = "softmax_topk") -> None:
    """The `axis` of a function of ``ONE_AXIS``: one axis, an int (not None or a tuple)."""
    if axis is None or isinstance(axis, tuple):
        raise TypeError(f"{op} takes one axis, an int; got {axis!r}")


def topk_out(axis, k, out, c: Call):
    """softmax_topk's (axis, k, result shape, the arrays behind `out` or None), checked."""
    ax = one_axis(axis, c)
    k = count_k(k, c.array.shape[ax])
    shape = c.array.shape[:ax] + (k,) + c.array.shape[ax + 1:]
    return ax, k, shape, pair_out(out, c, shape)


def one_axis(axis, c: Call) -> int:
    """The one reduced axis (non-negative); a 0-d input is an AxisError (it has no axis to hold
    k entries or segments)."""
    if not c.axes:
        raise AxisError(operator.index(axis), 0, f"{c.op} needs an axis: {c.input_name} is 0-d")
    return c.axes[0]


def pair_out(out, c: Call, shape):
    """The arrays behind `out` = (values, indices), each checked before anything is written."""
    if out is None:
        return None
    if not isinstance(out, tuple) or len(out) != 2:
        raise TypeError("out must be a tuple of two arrays (values, indices)")
    return (check_out(out[0], c.src, shape, c.dtype),
            check_out(out[1], c.src, shape, np.dtype(np.int64)))


class Segmented(NamedTuple):
    """The segments of a segment call's axis, checked: the positions in segment order are
    ``order`` (None: as they lie), those of ``lo`` to ``hi`` in that order belong to a segment
    (the others to none), cut into ``over`` (relative to ``lo``)."""

    order: Any
    lo: int
    hi: int
    over: Any  # _composed.Segments, or _composed.Scattered (with `inside`)
    inside: Any = None  # with Scattered: whether each position is in a segment (None: all)


def _index_array(a, name: str, op: str, device=False):
    """A 1-d array of integers (not bool): on the host as int64, or (`device`) a CuPy array of
    int32 or int64 (other integers as int64)."""
    given = a
    a = _arrays.adapt(a).array
    if a.size == 0 and not hasattr(given, "dtype"):  # [] is float64 to NumPy
        a = a.astype(np.int64)
    index_rule(a, name, op)
    if device:
        a = _arrays.cupy_or_none().asarray(a)
    elif not isinstance(a, np.ndarray):  # a GPU array: its few integers come to the host
        a = a.get()
    if a.dtype.kind == "u" and a.size and a.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{op}: {name} holds values past int64")
    return a if device and a.dtype in (np.int32, np.int64) else a.astype(np.int64, copy=False)


def index_rule(a, name: str, op: str) -> None:
    """`segment_ids`' or `offsets`' rule, for an array of any framework: 1-d integers."""
    if a.dtype == np.bool_ or a.dtype.kind not in "iu":
        raise TypeError(f"{op}: {name} must hold integers, not {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{op}: {name} must be 1-d, got shape {a.shape}")


def segments_given(segment_ids, offsets, op: str) -> None:
    """One of `segment_ids` and `offsets`, not both."""
    if (segment_ids is None) == (offsets is None):
        raise TypeError(f"{op} takes the segments as segment_ids or as offsets= (one of them)")


def count_rule(num_segments, op: str) -> int | None:
    if num_segments is None:
        return None
    if isinstance(num_segments, (bool, np.bool_)):
        raise TypeError(f"{op}: num_segments must be an integer, not bool")
    try:
        count = operator.index(num_segments)
    except TypeError:
        raise TypeError(f"{op}: num_segments must be an integer, not "
                        f"{type(num_segments).__name__}") from None
    return _count_bound(count, op)


def _count_bound(count: int, op: str) -> int:
    """A number of segments in ``[0, 2**63)``: the kernels and NumPy count them in int64."""
    if count < 0:
        raise ValueError(f"{op}: num_segments must be at least 0, got {count}")
    if count >= 2**63:
        raise ValueError(f"{op}: {count} segments (num_segments, or the largest id + 1) do not "
                         f"fit an int64")
    return count


def segmented(segment_ids, offsets, num_segments, n: int, indices_are_sorted, op: str,
              scatter=False) -> Segmented:
    """The segments of an axis of length `n`, given by `segment_ids` (one a position; those
    outside ``[0, num_segments)`` belong to none) or by CSR `offsets` (segment i is positions
    ``offsets[i]`` to ``offsets[i + 1]``; those before ``offsets[0]`` or from ``offsets[-1]``
    on belong to none). ``scatter``: as each position's id (``Scattered``), in place; else in
    segment order (``Segments``), unsorted ids by a stable sort (ties keep their order)."""
    from ._composed import Scattered, Segments

    count = count_rule(num_segments, op)
    segments_given(segment_ids, offsets, op)
    if offsets is not None:
        off = _index_array(offsets, "offsets", op)
        offsets_rule(off, n, count, op, np)
        lengths = np.diff(off)
        lo, hi = int(off[0]), int(off[-1])
        if scatter:
            ids = np.zeros(n, np.int64)
            ids[lo:hi] = np.repeat(np.arange(off.size - 1), lengths)
            inside = None if (lo, hi) == (0, n) else (np.arange(n) >= lo) & (np.arange(n) < hi)
            return Segmented(None, 0, n, Scattered(off.size - 1, ids, inside), inside)
        filled = np.flatnonzero(lengths)
        return Segmented(None, lo, hi,
                         Segments(off.size - 1, filled, off[filled] - lo, lengths[filled]))
    ids = _index_array(segment_ids, "segment_ids", op)
    is_sorted, count = ids_rule(ids, n, count, indices_are_sorted, op, np)
    if scatter:
        inside = (ids >= 0) & (ids < count)
        if inside.all():
            return Segmented(None, 0, n, Scattered(count, ids, None))
        return Segmented(None, 0, n, Scattered(count, np.where(inside, ids, 0), inside), inside)
    order = None if is_sorted else _stable_order(ids, count)
    if order is not None:
        ids = ids[order]
    lo, hi = (int(i) for i in np.searchsorted(ids, (0, count)))
    inside = ids[lo:hi]  # sorted, in [0, count): a segment starts where its id does
    starts = np.flatnonzero(np.concatenate(([True], inside[1:] != inside[:-1]))[:hi - lo])
    lengths = np.diff(np.append(starts, hi - lo))
    return Segmented(order, lo, hi, Segments(count, inside[starts], starts, lengths))


def offsets_rule(off, n: int, count, op: str, xp) -> None:
    """CSR offsets (of NumPy or CuPy): num_segments + 1 of them, non-decreasing, in [0, n]."""
    if off.size == 0:
        raise ValueError(f"{op}: offsets needs at least one entry (num_segments + 1)")
    if count is not None and count != off.size - 1:
        raise ValueError(f"{op}: num_segments={count} but offsets has {off.size} entries "
                         f"(num_segments + 1)")
    if bool(xp.any(off[:1] < 0) | xp.any(off[-1:] > n) | xp.any(off[1:] < off[:-1])):
        raise ValueError(f"{op}: offsets must be non-decreasing, from at least 0 to at "
                         f"most the axis length {n}")


def ids_length_rule(ids, n: int, op: str) -> None:
    """One id an axis position."""
    if ids.size != n:
        raise ValueError(f"{op}: segment_ids has {ids.size} entries, the axis {n}")


def ids_rule(ids, n: int, count, indices_are_sorted, op: str, xp) -> tuple[bool, int]:
    """(whether `ids` (of NumPy or CuPy) are sorted, the number of segments: `count`, or
    ``max(ids) + 1``); one an axis position, sorted where `indices_are_sorted` promises."""
    ids_length_rule(ids, n, op)
    is_sorted = not bool(xp.any(ids[1:] < ids[:-1]))
    if indices_are_sorted and not is_sorted:
        raise ValueError(f"{op}: indices_are_sorted=True but segment_ids are not sorted")
    if count is None:
        count = _count_bound(max(int(ids.max()) + 1, 0), op) if n else 0
    return is_sorted, count


class DeviceSegments(NamedTuple):
    """The segments of a segment call's axis for the kernels: sorted ids or CSR offsets on the
    device (int32 or int64), and the positions in segment order (None: as they lie)."""

    array: Any
    count: int
    offsets: bool
    order: Any = None


def device_segments(segment_ids, offsets, num_segments, n: int, op: str,
                    unsorted=False) -> DeviceSegments:
    """``segmented``'s rules on the device, but for the ids' order: the kernels find ids that
    are out of order as they read them, so ids are first taken as sorted (the number of
    segments, where not given, ``ids[-1] + 1``). `unsorted`: the kernels found them so; they
    are put in order by CuPy's stable argsort of ``clip(id, -1, count)`` (32-bit where it fits:
    half the radix passes of 64)."""
    count = count_rule(num_segments, op)
    segments_given(segment_ids, offsets, op)
    if offsets is not None:
        off = _index_array(offsets, "offsets", op, device=True)
        offsets_rule(off, n, count, op, _arrays.cupy_or_none())
        return DeviceSegments(off, off.size - 1, True)
    cp = _arrays.cupy_or_none()
    ids = _index_array(segment_ids, "segment_ids", op, device=True)
    ids_length_rule(ids, n, op)
    if not unsorted:
        if count is None:
            count = _count_bound(max(int(ids[-1]) + 1, 0), op) if n else 0
        return DeviceSegments(ids, count, False)
    if count is None:
        count = _count_bound(max(int(ids.max()) + 1, 0), op)
    key = cp.clip(ids, -1, count).astype(np.int32 if count < 2**31 - 1 else np.int64)
    order = cp.argsort(key)  # stable: ties keep their order
    return DeviceSegments(key[order], count, False, order)


def _stable_order(ids, count: int):
    """``argsort(ids, kind="stable")`` where only the order of ``[0, count)`` and the two sides
    of it matter: ids clipped to ``[-1, count]``, then sorted by 16-bit digits, least
    significant first: NumPy's stable sort of a 16-bit type is a radix sort, of int64 a merge
    sort, 5x slower (record segment-1)."""
    key = np.clip(ids, -1, count) + 1
    order = np.argsort(key.astype(np.uint16), kind="stable")  # the lowest digit
    shift = 16
    while count + 1 >> shift:  # each higher digit, stable on the order so far
        digit = (key[order] >> shift).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
    return order