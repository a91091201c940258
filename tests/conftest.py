import os
from collections import Counter

# JAX would otherwise take 75% of the GPU's memory at import.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from _support import GPU_REASON

# Examples per property test: "default" for CI and the GPU suite, "quick" under compute-sanitizer.
for name, examples in (("default", 80), ("quick", 6)):
    settings.register_profile(name, max_examples=examples, deadline=None,
                              suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

if os.environ.get("CUSOFTMAX_NO_POOL"):  # under compute-sanitizer memcheck: the pool hides overruns
    import cupy

    cupy.cuda.set_allocator(None)


@pytest.fixture(params=["host", "gpu"])
def xp(request):
    """The array module of a backend: numpy (host path) or cupy (GPU kernels)."""
    if request.param == "host":
        return np
    if GPU_REASON is not None:
        pytest.skip(f"needs a GPU: {GPU_REASON}")
    import cupy

    return cupy


def pytest_terminal_summary(terminalreporter):
    """One line a distinct skip reason, with its count (not one a test: without a GPU, some
    thousand tests skip for the same one)."""
    reasons = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    for reason, count in reasons.most_common():
        terminalreporter.write_line(f"{count} skipped: {reason}")
