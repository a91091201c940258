"""The package's layers import only downward (no cycle, read from the source), the core never
imports the bench, and a call passes through each module at most twice."""

import ast
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import cusoftmax

PACKAGE = Path(cusoftmax.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports anywhere in its source (functions too); ``from
    . import a`` is an edge to the submodule a where there is one, else to the package."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    module = f"{base}.{node.module}" if node.module else base
                else:
                    module = node.module or ""
                for a in node.names:
                    sub = f"{module}.{a.name}"
                    edges.add(sub if sub in paths else module)
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names)
        graph[name] = {e for e in edges if e in paths and e != name}
    return graph


def _cycle(graph):
    """A cycle of the graph as a list of modules, or None."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = "done"
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycle():
    graph = import_graph()
    assert "cusoftmax._family" in graph["cusoftmax._api"]  # the reader sees the edges
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_a_package_init_imports_its_submodules_only_downward():
    """A cycle through a package's __init__ (a submodule importing its package) counts too."""
    graph = import_graph()
    graph["cusoftmax._x"] = {"cusoftmax"}
    graph["cusoftmax"] = graph["cusoftmax"] | {"cusoftmax._x"}
    assert _cycle(graph)  # the check itself can fail


def test_the_core_never_imports_the_bench():
    graph = import_graph()
    core = [m for m in graph if not m.startswith("cusoftmax.bench")]
    assert core and all(not any(e.startswith("cusoftmax.bench") for e in graph[m]) for m in core)


# The front: the layers a call passes through on its way to the computation (the array
# operations of _host and _composed, the planning and the launch are what it calls).
FRONT = {f"cusoftmax.{m}" for m in ("_api", "_family", "_topk", "_args", "_engine", "_arrays",
                                    "_dask")}


def _entries(call):
    """How many times each module of the front is entered (called into from another module)
    during call()."""
    counts, stack = Counter(), []

    def profile(frame, event, arg):
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            outer = stack[-1] if stack else None
            if module in FRONT and module != outer:
                counts[module] += 1
            stack.append(module)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return counts


@pytest.mark.parametrize("call", [
    lambda x: cusoftmax.log_softmax(x), lambda x: cusoftmax.softmax_topk(x, 3),
    lambda x: cusoftmax.softmax(x, axis=0), lambda x: cusoftmax.logsumexp(x, axis=1),
    lambda x: cusoftmax.softmax_vjp(x, x)], ids=["log_softmax", "softmax_topk", "softmax",
                                                "logsumexp", "softmax_vjp"])
def test_a_call_enters_each_module_at_most_twice(call):
    x = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
    for _ in range(2):  # a first call, then one like it
        counts = _entries(lambda: call(x))
        assert counts and max(counts.values()) <= 2, counts
