"""The import graph of the product's packages: no cycle, no import up the layers, and no
module but the app factory importing a route module (what routes and others share lives in
app/wire.py, app/intake.py, ...).

The layers, lowest first (docs/architecture.md, Layout): ``storage`` (RocksDB, keys,
records, the staged transaction); ``workers.rules`` (pure policies); ``workers.timers``
(the timer kinds' key codecs); ``workers.ops`` (what runs inside a group commit);
``workers`` (the engine and one module per thread); ``app`` (HTTP); ``cli`` and
``pipeline``. A module belongs to the layer of the longest prefix that names it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {
    "storage": 0,
    "workers.rules": 1,
    "workers.timers": 2,
    "workers.ops": 3,
    "workers": 4,
    "app": 5,
    "cli": 6,
    "pipeline": 6,
}
PACKAGES = ("storage", "workers", "app", "cli", "pipeline")
ASSEMBLER = "app.main"  # includes every router


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def _graph() -> dict[str, set[str]]:
    """Each module's imports of the others, at module level (a TYPE_CHECKING block or an
    import inside a function is not an edge: it cannot close a cycle at import time)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                edges.add(node.module)
                edges |= {f"{node.module}.{a.name}" for a in node.names}
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_cycle() -> None:
    graph = _graph()
    assert len(graph) > 80
    assert _cycles(graph) == []


def _layer(name: str) -> int:
    return max(
        (len(prefix), rank)
        for prefix, rank in LAYERS.items()
        if name == prefix or name.startswith(prefix + ".")
    )[1]


def test_no_import_goes_up_the_layers() -> None:
    layer = _layer
    upward = [(m, d) for m, deps in _graph().items() for d in deps if layer(d) > layer(m)]
    assert upward == []


def test_only_the_app_factory_imports_a_route_module() -> None:
    sideways = [
        (m, d)
        for m, deps in _graph().items()
        for d in deps
        if d.startswith("app.routes.") and not m.startswith("app.routes") and m != ASSEMBLER
    ]
    assert sideways == []
