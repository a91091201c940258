"""What the axis-0 probes (reread_probe.py, team_probe.py) share: a case's input and baselines (a
device-to-device copy of its bytes and cusoftmax along axis 0, timed as the benchmark times), a
probe kernel's result checked and then timed, and the table its rows go to (CSV, a row as each
case ends, and printed)."""

import csv
import sys
from pathlib import Path

import cupy

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import cusoftmax  # noqa: E402
from cusoftmax import _accuracy, bench  # noqa: E402


class Case:
    """An (n x inner) matrix of `dname` (standard normal times 4), its output buffer, and the
    copy's and cusoftmax's times on it (us)."""

    def __init__(self, timer, dname, n, inner):
        self.timer, self.dname = timer, dname
        dt = bench._dtype(cupy, dname)
        self.x = (cupy.random.standard_normal((n, inner), dtype=cupy.float32) * 4).astype(dt)
        self.y = y = cupy.empty_like(self.x)
        self.copy = timer.events(lambda: y.data.copy_from_device_async(self.x.data, self.x.nbytes))
        self.ours = timer.events(lambda: cusoftmax.softmax(self.x, axis=0, out=y))
        self.ref = cusoftmax.softmax(self.x, axis=0).astype(cupy.float32)
        print(f"{dname} {n}x{inner}: copy {self.copy:.1f} us, cusoftmax {self.ours:.1f} us "
              f"({self.copy / self.ours:.3f} of copy)", flush=True)

    def check(self, copy):
        """None, or what is wrong with y: a copy bit for bit; a softmax within twice the dtype's
        bound of cusoftmax's result everywhere and within the bound of a float64 reference on
        sampled columns (the benchmark's check)."""
        x, y = self.x, self.y
        if copy:
            return None if bool(cupy.array_equal(y.view(cupy.uint8), x.view(cupy.uint8))) else "copy differs"
        rtol, atol = _accuracy.TOLERANCE[self.dname]
        off = ~(cupy.abs(y.astype(cupy.float32) - self.ref) <= 2 * (atol + rtol * cupy.abs(self.ref)))
        if bool(off.any()):
            return f"{int(off.sum())} elements off cusoftmax's result"
        return bench._reference_ok(cupy, x, y, 0, self.dname)

    def measure(self, run, copy):
        """run() once on a NaN-filled y and checked, then timed: (us, what was wrong or ""), the
        time NaN where the check failed or the launch raised."""
        self.y.data.memset_async(0xFF, self.y.nbytes)
        try:
            run()
            bad = self.check(copy)
        except cupy.cuda.driver.CUDADriverError as e:  # e.g. a cluster that cannot launch
            bad = str(e)
        return (float("nan") if bad else self.timer.events(run)), bad or ""

    def times(self, us):
        """A row's timing columns."""
        return dict(us=round(us, 1), of_copy=round(self.copy / us, 3), vs_cusoftmax=round(self.ours / us, 3))


class Table:
    """Rows to `path` (CSV, flushed as each is added) and printed, less `quiet`'s columns."""

    def __init__(self, path, quiet=("dtype", "n", "inner")):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.file, self.writer, self.quiet = open(path, "w", newline=""), None, quiet

    def add(self, row):
        if self.writer is None:
            self.writer = csv.DictWriter(self.file, fieldnames=list(row))
            self.writer.writeheader()
        self.writer.writerow(row)
        self.file.flush()
        print("  " + " ".join(f"{k}={v}" for k, v in row.items() if k not in self.quiet), flush=True)
