"""A quick GPU check before the long steps of tools/gpu_check.sh: every forced method once on a
few small inputs (rows, and a strided axis), against SciPy. Exits non-zero at the first wrong or
failed case, so a broken kernel costs seconds, not a whole step's time limit."""

import sys

import cupy
import numpy as np
from scipy.special import softmax as reference

import cusoftmax
from cusoftmax import planning


def main():
    rng = np.random.default_rng(0)
    cases = [((3000, 40), -1), ((64, 70001), -1), ((300, 4096), 0), ((3, 300, 5000), 1),
             ((2, 600000), -1)]
    bad = 0
    for shape, axis in cases:
        host = rng.standard_normal(shape).astype(np.float32)
        want = reference(host.astype(np.float64), axis=axis)
        x = cupy.asarray(host)
        for method in (None, *planning.METHODS):
            try:
                got = cupy.asnumpy(cusoftmax.softmax(x, axis=axis, method=method))
            except ValueError as e:
                print(f"{shape} axis {axis} {method}: n/a ({str(e)[:60]})", flush=True)
                continue
            err = float(np.max(np.abs(got - want) / (want + 1e-30)))
            ok = err < 1e-5
            bad += not ok
            print(f"{shape} axis {axis} {method}: max rel err {err:.2e} {'ok' if ok else 'WRONG'}",
                  flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
