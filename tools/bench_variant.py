"""The benchmark under a variant of the tuning, to measure a value against another in the same
run: `python3 tools/bench_variant.py NAME=VALUE ... -- BENCH ARGS`, NAME a value's flat name in
`cusoftmax.planning.Tuning` (its slice and field: `online_min_chunk_bytes`).

Example: `tools/bench_variant.py online_min_chunk_bytes=65536 -- --methods online --widths 1048576`;
a table as a Python literal: `"block_threads=((16384, 128), (32768, 256), (65536, 256), (1e30, 1024))"`,
`"registers_wide_span_max_bytes={2: 2048, 4: 20480}"`."""

import ast
import sys

from cusoftmax import planning
from cusoftmax.bench import main


def variant(assignments, base=planning.TUNING) -> planning.Tuning:
    """`base` with each NAME=VALUE of `assignments`: numbers by the field's type, tuples and
    tables by element size as Python literals of theirs."""
    values = base.values()
    changes = {}
    for item in assignments:
        name, _, value = item.partition("=")
        if name not in values:
            raise SystemExit(f"cusoftmax.planning.Tuning has no value {name}")
        old = values[name]
        if isinstance(old, (tuple, dict)):
            new = ast.literal_eval(value)
            kind = "dict" if isinstance(old, dict) else "tuple"
            if not isinstance(new, dict if kind == "dict" else tuple):
                raise SystemExit(f"{name} is a {kind}, not {value!r}")
            changes[name] = type(old)(new)
        else:
            changes[name] = type(old)(value)
        print(f"variant: {name} = {changes[name]}", flush=True)
    return base.vary(**changes)


if __name__ == "__main__":
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    with planning.use(variant(argv[:cut])):
        sys.exit(main(argv[cut + 1:]))
