"""``python -m cusoftmax.bench --report DIR ...``: BENCHMARKS.md from the tables the bench wrote
(``*.table.json`` in each result folder), a section per table, GPU ops first in the family's
order, then the host's."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .common import format_table

ORDER = ("softmax", "log_softmax", "logsumexp", "softmax_vjp", "log_softmax_vjp",
         "softmax_topk")
INTRO = """# Benchmarks

The current table of each operation, written by `python -m cusoftmax.bench --report DIR ...`
from the result folders of `python -m cusoftmax.bench --op OP --out DIR` (GPU) and
`python -m cusoftmax.bench --host --op OP --out DIR` (no GPU). Earlier runs are in
`docs/history/`.
"""


def write_table(out: Path, name: str, meta: dict, head, lines) -> Path:
    """One result table as ``out/<name>.table.json``: `meta` holds at least the device, the
    date, the op and a legend line."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.table.json"
    path.write_text(json.dumps({"meta": meta, "head": head, "lines": lines}, indent=1))
    return path


def _order(table) -> tuple:
    meta = table["meta"]
    op = meta.get("op", "")
    return (meta.get("kind") == "host", ORDER.index(op) if op in ORDER else len(ORDER),
            meta.get("variant", ""), meta.get("date", ""))


def render(folders) -> str:
    """The page: INTRO, then each table found under `folders` with its heading and legend."""
    tables = [json.loads(p.read_text())
              for f in folders for p in sorted(Path(f).glob("*.table.json"))]
    if not tables:
        raise SystemExit(f"no *.table.json under {', '.join(map(str, folders))}")
    parts, host = [INTRO], []
    for t in sorted(tables, key=_order):
        meta = t["meta"]
        if meta.get("kind") == "host":  # one table: the host's ops share their columns
            host.append(t)
            continue
        title = " ".join(v for v in (meta.get("op"), meta.get("variant")) if v)
        parts.append(f"## {title} ({meta['device']}, {meta['date']})\n\n{meta['legend']}\n\n"
                     f"{format_table(t['head'], t['lines'])}\n")
    if host:
        meta = host[0]["meta"]
        lines = [line for t in host for line in t["lines"]]
        parts.append(f"## The host path ({meta['device']}, {meta['date']})\n\n{meta['legend']}\n\n"
                     f"{format_table(host[0]['head'], lines)}\n")
    return "\n".join(parts)


def main(folders, path="BENCHMARKS.md") -> int:
    Path(path).write_text(render(folders))
    print(f"wrote {path} ({time.strftime('%Y-%m-%d')}) from {len(folders)} folder(s)")
    return 0
