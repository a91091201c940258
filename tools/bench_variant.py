"""The benchmark with dispatch constants changed, to measure a tuning constant against another
value in the same run: `python3 tools/bench_variant.py NAME=VALUE ... -- BENCH ARGS`.

Example: `tools/bench_variant.py ONLINE_MIN_CHUNK=16384 -- --methods online --widths 1048576`."""

import sys

from cusoftmax import _dispatch
from cusoftmax.bench import main


def apply(assignments):
    for item in assignments:
        name, _, value = item.partition("=")
        if not hasattr(_dispatch, name):
            raise SystemExit(f"cusoftmax._dispatch has no constant {name}")
        setattr(_dispatch, name, type(getattr(_dispatch, name))(value))
        print(f"variant: {name} = {getattr(_dispatch, name)}", flush=True)


if __name__ == "__main__":
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    apply(argv[:cut])
    sys.exit(main(argv[cut + 1:]))
