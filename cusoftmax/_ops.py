"""Each public operation, declared once: its array arguments (the input first), what its axis
is, the kernels' operations it runs (``planning.EPILOGUES``' names), its reference in
``_composed`` and the fronts that take it. The argument rules (``_args``) and the public
functions' choice of front (``_api``) read these, and tests/test_ops.py checks ``__all__`` and
every front against them; the kernel side's own declarations are ``planning.common``'s
(epilogues, fused types, loads)."""

from __future__ import annotations

from typing import NamedTuple


class OpSpec(NamedTuple):
    name: str
    arrays: tuple[str, ...]  # its array arguments: the input first, then its operands
    one_axis: bool  # its axis is one int (the k largest, or the segments, lie along it)
    kernels: tuple[str, ...]  # the kernels' operations it runs on the GPU (none: array ops)
    reference: tuple[str, ...]  # the _composed functions that compute it on any xp
    fronts: frozenset[str]  # the fronts beside the eager one: "dask", "jax", "torch"


_ALL = frozenset({"dask", "jax", "torch"})
_REF = ("state", "normalize")
_SEGMENT_FRONTS = frozenset({"jax", "torch"})
_IDS = ("segment_ids", "offsets", "where")
SPECS = (
    OpSpec("softmax", ("x", "where", "scale"), False, ("softmax",), _REF, _ALL),
    OpSpec("log_softmax", ("x", "where", "scale"), False, ("log_softmax",), _REF, _ALL),
    OpSpec("logsumexp", ("a", "b", "where", "scale"), False, ("logsumexp",),
           ("state", "log_sum"), _ALL),
    OpSpec("softmax_vjp", ("y", "dy", "where"), False, ("softmax_vjp",), ("vjp_sum", "vjp"),
           _ALL),
    OpSpec("log_softmax_vjp", ("y", "dy", "where"), False, ("log_softmax_vjp",),
           ("vjp_sum", "vjp"), _ALL),
    OpSpec("softmax_topk", ("x", "where", "scale"), True, ("softmax", "log_softmax"),
           ("state",), _ALL),
    OpSpec("segment_softmax", ("x", *_IDS, "scale"), True, ("softmax",),
           ("state", "normalize"), _SEGMENT_FRONTS),
    OpSpec("segment_log_softmax", ("x", *_IDS, "scale"), True, ("log_softmax",),
           ("state", "normalize"), _SEGMENT_FRONTS),
    OpSpec("segment_logsumexp", ("x", *_IDS, "scale"), True, ("logsumexp",),
           ("state", "log_sum"), _SEGMENT_FRONTS),
    OpSpec("segment_softmax_vjp", ("y", "dy", *_IDS), True, ("softmax_vjp",),
           ("vjp_sum", "vjp"), _SEGMENT_FRONTS),
    OpSpec("segment_log_softmax_vjp", ("y", "dy", *_IDS), True, ("log_softmax_vjp",),
           ("vjp_sum", "vjp"), _SEGMENT_FRONTS),
)
OPS = {s.name: s for s in SPECS}
NAMES = tuple(OPS)
INPUT_NAMES = {s.name: s.arrays[0] for s in SPECS}
ONE_AXIS = frozenset(s.name for s in SPECS if s.one_axis)


# Fronts whose arrays the eager functions take too (torch tensors through DLPack): an op
# without that front runs eagerly on them; Dask arrays and JAX tracers it refuses.
EAGER_TAKES = frozenset({"torch"})


def refused(name: str, front: str) -> str:
    """Why op `name` refuses the arrays of `front` (a TypeError's message)."""
    if front == "dask":
        return f"{name} does not take Dask arrays: compute them first"
    return f"{name} is not available inside JAX transformations yet: call it on concrete arrays"
