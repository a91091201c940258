"""One source of truth between Python and CUDA: every ``CSM_*`` macro the kernels read is one
that the policy passes to NVRTC (``planning.cuda_defines``), and every one it passes is read."""

import re
from pathlib import Path

from cusoftmax import _kernels
from cusoftmax.planning import TUNING, cuda_defines

KERNELS = Path(__file__).resolve().parent.parent / "kernels"


def test_kernels_read_exactly_the_defines():
    used = set()
    for path in (*KERNELS.glob("*.cu"), *KERNELS.glob("*.cuh")):
        used |= set(re.findall(r"\bCSM_[A-Z0-9_]+\b", path.read_text()))
    defined = {option[2:].partition("=")[0] for option in cuda_defines(TUNING)}
    assert used == defined, (sorted(used - defined), sorted(defined - used))


def test_defines_are_the_tuning_values():
    got = dict(option[2:].split("=") for option in cuda_defines(TUNING))
    assert got == {
        "CSM_FUSED_SCRATCH": "800", "CSM_SPILL_THREADS": "512", "CSM_SHORT_ROWS_THREADS": "128",
        "CSM_FLAT_THREADS": "128", "CSM_ONLINE_THREADS": "512", "CSM_ONLINE_BLOCKS_2": "3",
        "CSM_ONLINE_BLOCKS_4": "2", "CSM_ONLINE_BLOCKS_8": "2", "CSM_ONLINE_HOLDS_2": "0",
        "CSM_ONLINE_HOLDS_4": "1", "CSM_ONLINE_HOLDS_8": "0", "CSM_COLUMNS_THREADS": "256",
        "CSM_COLUMNS_BLOCKS_PER_SM": "3", "CSM_SLAB_MAX_COLS": "64", "CSM_SLAB_MAX_THREADS": "256",
        "CSM_SLAB_SCRATCH": "528", "CSM_REDUCE_THREADS": "256", "CSM_REDUCE_SHIFTED": "7",
        "CSM_VJP_THREADS": "256", "CSM_VJP_COLUMNS_BLOCKS_PER_SM": "2",
        "CSM_VJP_HOLD_THREADS": "1024",
        "CSM_NORMALIZE_THREADS": "256", "CSM_SEGMENT_THREADS": "256", "CSM_SEGMENT_BLOCKS": "0", "CSM_WALK_BATCH": "4",
        "CSM_TOPK_THREADS": "256", "CSM_TOPK_BLOCKS": "3", "CSM_TOPK_BATCH": "16",
    }
    assert _kernels.options(TUNING) == ("-std=c++17", *cuda_defines(TUNING))


def test_a_variant_compiles_its_own_kernels():
    """The compiled-function cache is keyed by the defines: a variant's differ from the default's."""
    variant = TUNING.vary(spill_threads=256)
    assert "-DCSM_SPILL_THREADS=256" in _kernels.options(variant)
    assert _kernels.options(variant) != _kernels.options(TUNING)


def test_tuning_slices_and_flat_names():
    """Each value lives in its family's slice, named without the family; its flat name (slice,
    then field) reads and varies it; a name the tuning lacks is a TypeError."""
    import pytest

    before = TUNING.values()
    for name, value in before.items():
        family, _, key = name.partition("_")
        assert getattr(getattr(TUNING, family), key) == value
    v = TUNING.vary(reduce_lane_stages=5, topk_max_k=8, reduce_waves=1)
    assert (v.reduce.lane_stages, v.reduce.waves, v.topk.max_k) == (5, 1, 8)
    assert v.reduce.threads == TUNING.reduce.threads and v.grid == TUNING.grid
    assert v != TUNING and TUNING.values() == before and hash(v) != hash(TUNING)
    for bad in ("reduce_no_such", "nothing", "values_x", "_hash", "reduce"):
        with pytest.raises(TypeError, match="no value"):
            TUNING.vary(**{bad: 1})
    masked = TUNING.for_load("Masked")
    assert masked.warp.lane_values == TUNING.masked.lane_values
    assert masked.registers.wide_values == TUNING.masked.wide_values
    assert TUNING.for_load("Plain") is TUNING
