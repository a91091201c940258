"""The benchmark with dispatch constants changed, to measure a tuning constant against another
value in the same run: `python3 tools/bench_variant.py NAME=VALUE ... -- BENCH ARGS`.

Example: `tools/bench_variant.py ONLINE_MIN_CHUNK_BYTES=65536 -- --methods online --widths 1048576`;
a table as a Python literal: `"BLOCK_THREADS=((16384, 128), (32768, 256), (65536, 256), (1e30, 1024))"`,
`"REGISTERS_WIDE_SPAN_MAX_BYTES={2: 2048, 4: 20480}"`."""

import ast
import sys

from cusoftmax import _dispatch
from cusoftmax.bench import main


def apply(assignments):
    for item in assignments:
        name, _, value = item.partition("=")
        if not hasattr(_dispatch, name):
            raise SystemExit(f"cusoftmax._dispatch has no constant {name}")
        old = getattr(_dispatch, name)
        # Tuples and dicts (tables such as BLOCK_THREADS, REGISTERS_WIDE_SPAN_MAX_BYTES) as Python
        # literals of the same type, numbers by their type.
        if isinstance(old, (tuple, dict)):
            new = ast.literal_eval(value)
            if not isinstance(new, type(old)):
                raise SystemExit(f"{name} is a {type(old).__name__}, not {value!r}")
        else:
            new = type(old)(value)
        setattr(_dispatch, name, new)
        print(f"variant: {name} = {getattr(_dispatch, name)}", flush=True)


if __name__ == "__main__":
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    apply(argv[:cut])
    sys.exit(main(argv[cut + 1:]))
