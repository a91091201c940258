"""The benchmark's default sweep (it runs on a GPU only; its cases are plain Python)."""

from cusoftmax import bench


def test_default_sweep_covers_every_dtype_on_both_axes():
    cases = list(bench._cases(bench._parse([])))
    total = 2**26
    for dt in bench.DEFAULT_DTYPES:
        rows = {shape for d, shape, axis in cases if d == dt and axis == -1 and shape[0] > 1}
        assert rows == {(total // w, w) for w in bench.DEFAULT_WIDTHS}
        assert [shape for d, shape, axis in cases if d == dt and axis == 0] == bench.AXIS0_SHAPES
    assert [(d, shape) for d, shape, axis in cases if shape[0] == 1] == [
        ("float32", (1, n)) for n in bench.LONG_ROWS]
    assert len(cases) == len(set(cases))


def test_options_cut_the_sweep():
    cases = list(bench._cases(bench._parse(["--dtypes", "float16", "--widths", "32,64",
                                            "--no-axis0", "--no-long"])))
    assert cases == [("float16", (2**21, 32), -1), ("float16", (2**20, 64), -1)]
