"""The benchmark's default sweep (it runs on a GPU only; its cases are plain Python)."""

import importlib.util
import json
from pathlib import Path

import pytest

from cusoftmax import bench, planning
from cusoftmax.bench import host as _bench_host
from _support import GPU_REASON


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


def test_bench_variant_builds_a_tuning_by_field_type():
    """tools/bench_variant.py: numbers by their type, tuple and dict tables as literals of theirs;
    the default tuning is left as it is."""
    path = Path(__file__).resolve().parent.parent / "tools" / "bench_variant.py"
    spec = importlib.util.spec_from_file_location("bench_variant", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    before = planning.TUNING
    got = tool.variant(["registers_short_span_min_bytes=512", "block_threads=((16384, 128), (1e30, 1024))",
                        "registers_wide_span_max_bytes={2: 2048, 4: 20480}", "cluster_spill_max=0.25"])
    assert got.registers.short_span_min_bytes == 512
    assert got.block.threads == ((16384, 128), (1e30, 1024))
    assert got.registers.wide_span_max_bytes == {2: 2048, 4: 20480}
    assert isinstance(got.registers.wide_span_max_bytes, planning.BySize) and hash(got)
    assert got.cluster.spill_max == 0.25 and got.warp.waves == before.warp.waves
    assert planning.TUNING is before and planning.active() is before
    assert planning.TUNING.registers.short_span_min_bytes == 1024
    with pytest.raises(SystemExit, match="is a dict"):
        tool.variant(["registers_wide_span_max_bytes=(2048, 20480)"])
    with pytest.raises(SystemExit, match="no value"):
        tool.variant(["NO_SUCH_FIELD=1"])


def test_host_sweep_honours_its_options():
    cases = list(_bench_host.cases(bench._parse(["--host"])))
    assert {d for d, _, _ in cases} == {"float64", "float32", "float16", "bfloat16"}
    assert {(s, a) for _, s, a in cases} == {
        ((_bench_host.HOST_TOTAL // w, w), -1) for w in _bench_host.WIDTHS} | {
        ((_bench_host.HOST_TOTAL // _bench_host.AXIS0_WIDTH, _bench_host.AXIS0_WIDTH), 0)}
    args = bench._parse(["--host", "--dtypes", "float32", "--widths", "512", "--total", "2**12",
                         "--no-axis0"])
    assert list(_bench_host.cases(args)) == [("float32", (8, 512), -1)]


@pytest.mark.parametrize("op", bench.BENCH_OPS)
@pytest.mark.parametrize("extra", [[], ["--where", "padding"], ["--scale", "0.5"]])
def test_host_bench_runs_every_op_and_writes_its_results(op, extra, tmp_path, capsys):
    """Each op, and where= / scale=, is timed (a small sweep) and its table written to --out."""
    argv = ["--host", "--op", op, "--dtypes", "float32", "--widths", "64", "--total", "256",
            "--repeat", "1", "--no-axis0", "--out", str(tmp_path), *extra]
    if op.endswith("_vjp") and extra[:1] == ["--scale"]:
        with pytest.raises(SystemExit, match="take no scale"):
            bench.main(argv)
        return
    assert bench.main(argv) == 0
    assert "The host path (NumPy arrays)" in capsys.readouterr().out
    (found,) = tmp_path.glob("*.table.json")
    table = json.loads(found.read_text())
    assert table["meta"]["op"] == op and table["meta"]["kind"] == "host"
    assert [(r[0], r[3]) for r in table["lines"]] == [(op, "4x256"), (op, "4x64")]
    page = tmp_path / "BENCHMARKS.md"
    from cusoftmax.bench import report

    assert report.main([tmp_path], page) == 0
    text = page.read_text()
    assert text.startswith("# Benchmarks") and "## The host path" in text and "4x64" in text


def test_report_orders_gpu_tables_first_in_the_family_order(tmp_path):
    from cusoftmax.bench import report

    for kind, op in (("host", "softmax"), ("gpu", "logsumexp"), ("gpu", "softmax")):
        report.write_table(tmp_path, f"{kind}-{op}", {"kind": kind, "op": op, "device": kind,
                                                       "date": "2026-12-04", "legend": "L"},
                           ["a"], [["1"]])
    heads = [line for line in report.render([tmp_path]).splitlines() if line.startswith("## ")]
    assert heads == ["## softmax (gpu, 2026-12-04)", "## logsumexp (gpu, 2026-12-04)",
                     "## The host path (host, 2026-12-04)"]
    with pytest.raises(SystemExit, match="no"):
        report.render([tmp_path / "empty"])


def test_dask_mode_parses_and_needs_a_gpu():
    args = bench._parse(["--dask", "--dask-chunks", "8,16,32", "--dask-cluster"])
    assert args.dask and args.dask_cluster and args.dask_chunks == "8,16,32"
    if GPU_REASON is not None:  # no GPU: a message and exit status 2, nothing timed
        assert bench.main(["--dask"]) == 2


def test_segment_peers_compute_what_the_functions_do():
    """The segment bench's peers (PyG's softmax and the backward of its autograd, JAX's chain
    and its vjp), run on the host here, give the segment functions' results: their times are
    of the same computation."""
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    import numpy as np

    import cusoftmax
    from cusoftmax.bench import segment as bench

    rng = np.random.default_rng(2)
    lengths = bench.zipf_lengths(rng, 500, 50, 64)
    count = len(lengths)
    ids = np.repeat(np.arange(count), lengths)
    x, dy = rng.standard_normal((2, 500, 3)).astype(np.float32)
    try:
        import torch_geometric  # noqa: F401
        pyg = True
    except ImportError:
        pyg = False
    for op in (*bench.SEGMENT_OPS, *bench.SEGMENT_VJPS):
        fn = getattr(cusoftmax, op)
        forward = op.removesuffix("_vjp")
        x64 = x.astype(np.float64)
        want = (fn(getattr(cusoftmax, forward)(x64, ids, num_segments=count), dy, ids,
                   num_segments=count) if op != forward else fn(x64, ids, num_segments=count))
        peers = bench._peers(op, count, torch, (jax, jax.numpy))
        assert ("PyG" in peers) == (pyg and forward == "segment_softmax")
        assert {"JAX", "JAX sorted"} <= set(peers)
        args = (torch.from_numpy(x), torch.from_numpy(ids), jax.numpy.asarray(x),
                jax.numpy.asarray(ids.astype(np.int32)), torch.from_numpy(dy),
                jax.numpy.asarray(dy))
        for name, setup in peers.items():
            got = setup(*args)()
            got = got.detach().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5, err_msg=f"{op} {name}")
