"""The op declarations (cusoftmax/_ops.py) against what the package holds: every declared op is
a public function with a numpydoc docstring naming its arrays, every front defines the ops
declared for it, and an op refuses the fronts it is not declared for."""

import importlib
import inspect

import numpy as np
import pytest

import cusoftmax
from cusoftmax import _ops


def test_every_op_is_public_and_documented():
    assert cusoftmax.__all__ == list(_ops.NAMES)
    for spec in _ops.SPECS:
        fn = getattr(cusoftmax, spec.name)
        params = inspect.signature(fn).parameters
        assert list(params)[0] == spec.arrays[0], spec.name
        assert set(spec.arrays) <= set(params), spec.name
        assert "Parameters\n    ----------" in fn.__doc__ and "Returns\n    -------" in fn.__doc__


def test_kernels_and_references_exist():
    from cusoftmax import _composed
    from cusoftmax.planning import EPILOGUES

    from cusoftmax.planning import segment

    for spec in _ops.SPECS:
        assert set(spec.kernels) <= set(EPILOGUES), spec.name
        assert all(callable(getattr(_composed, r)) for r in spec.reference), spec.name
        if spec.name in segment.EPILOGUES:  # the segment kernels' op policy wraps that epilogue
            (op,) = spec.kernels
            assert segment.EPILOGUES[spec.name].endswith(f"<csm::{EPILOGUES[op]}>"), spec.name
    assert set(segment.EPILOGUES) <= set(_ops.NAMES)


@pytest.mark.parametrize("front", ["dask", "jax", "torch"])
def test_each_front_defines_its_ops(front):
    module = {"dask": "dask.array", "jax": "jax", "torch": "torch"}[front]
    pytest.importorskip(module)
    mod = importlib.import_module(f"cusoftmax._{front}")
    for spec in _ops.SPECS:
        if front in spec.fronts:
            assert callable(getattr(mod, spec.name, None)), (front, spec.name)


def test_undeclared_fronts_are_refused():
    da = pytest.importorskip("dask.array")
    x = da.ones(4, chunks=2)
    for spec in _ops.SPECS:
        if "dask" in spec.fronts:
            continue
        with pytest.raises(TypeError, match="Dask"):
            getattr(cusoftmax, spec.name)(x, np.zeros(4, int))
