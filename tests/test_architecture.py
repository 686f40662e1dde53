"""The package rules of DESIGN.md, checked on the source: no import cycles between
first-party modules (counting imports inside functions); `deltalog/` imports nothing from
`sharing/`, `app/` or `client/`; outside `deltalog/` itself, only `sharing/tables.py`
imports the log reader's history, change feed and error modules (other code may catch the
library's base errors, exported at `deltalog`'s root, to degrade gracefully, but never a
specific one)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support import REPO_ROOT

PACKAGES = ("deltalog", "sharing", "app", "client", "pipeline")
DOOR = "sharing.tables"
LOG_READER_INTERNALS = ("deltalog.history", "deltalog.changes", "deltalog.errors")
# Base classes a caller may catch without knowing what the log reader does.
BASE_ERRORS = frozenset({"DeltaError", "StorageError", "DeletionVectorError"})


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(imported module, names) for every import in `module`, at the top or inside a
    function, except under `if TYPE_CHECKING:`. For `from package import submodule` the
    submodule is the imported module."""
    tree = ast.parse(MODULES[module].read_text())
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST) -> Iterator[tuple[str, tuple[str, ...]]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                yield from (item for orelse in child.orelse for item in visit(orelse))
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, ()
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                names = tuple(alias.name for alias in child.names)
                submodules = [n for n in names if f"{base}.{n}" in MODULES]
                others = tuple(n for n in names if n not in submodules)
                if others or not submodules:
                    yield base, others
                for name in submodules:  # `from sharing.query import capabilities`
                    yield f"{base}.{name}", ()
            yield from visit(child)

    yield from visit(tree)


def _first_party(name: str) -> str | None:
    """The first-party module `name` refers to (a package's __init__ for a name inside it)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _graph() -> dict[str, set[str]]:
    """Which first-party modules each module imports: every import, at the top or inside a
    function (a deferred import still ties the two modules together; it only hides the
    cycle until a call runs it)."""
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        edges = set()
        for imported, _ in _imports(module):
            target = _first_party(imported)
            if target is not None and target != module:
                edges.add(target)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a path back to its start) through each back edge a depth-first walk
    meets; empty when the graph is acyclic."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def walk(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                walk(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module)
    return cycles


def test_no_import_cycles() -> None:
    """Registration flows one way: a module that others build on (a kind table, the store's
    migrations, a package's shared machinery) never imports them back, not even inside a
    function. (Backends load their SDKs inside functions; those are not first-party.)"""
    cycles = _cycles(_graph())
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_sees_deferred_and_long_cycles() -> None:
    """The shapes the check exists for: a registry importing its backends inside a function
    while each backend imports the registry, and a longer loop through three modules."""
    deferred = {"kinds": {"s3"}, "s3": {"kinds", "base"}, "base": set()}
    assert _cycles(deferred) == [["kinds", "s3", "kinds"]]
    loop = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(loop) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    # and on the source: a function-level import is an edge
    graph = _graph()
    assert "deltalog.storage.s3" in graph["deltalog.storage.backends"]


def test_routes_import_no_other_route() -> None:
    """Routes share code through app.deps and app.responses, not through each other."""
    for module in MODULES:
        if not module.startswith("app.routes."):
            continue
        for imported, _ in _imports(module):
            target = _first_party(imported) or ""
            if target.startswith("app.routes.") and target != module:
                # the query route hands async queries to the async route's `submit`
                assert (module, target) == ("app.routes.tables", "app.routes.queries"), (
                    f"{module} imports {target}"
                )


def test_deltalog_imports_no_server_code() -> None:
    for module in MODULES:
        if not module.startswith("deltalog"):
            continue
        for imported, _ in _imports(module):
            root = imported.split(".")[0]
            assert root not in ("sharing", "app", "client", "pipeline"), (
                f"{module} imports {imported}"
            )


def test_the_server_and_the_recipient_side_never_import_spark_or_the_pipeline() -> None:
    """`pipeline/` is the provider's Spark side: the server runs without PySpark, and never
    runs Spark inside a request; the recipient side has its own source (client.spark)."""
    for module in MODULES:
        if not module.startswith(("app", "sharing", "client")):
            continue
        for imported, _ in _imports(module):
            root = imported.split(".")[0]
            assert root != "pipeline", f"{module} imports {imported}"
            if not module.startswith("client.spark"):
                assert root != "pyspark", f"{module} imports {imported}"


def test_the_pipeline_builds_on_sharing_and_deltalog_only() -> None:
    for module in MODULES:
        if not module.startswith("pipeline"):
            continue
        for imported, _ in _imports(module):
            root = imported.split(".")[0]
            assert root not in ("app", "client"), f"{module} imports {imported}"


def test_only_the_table_service_imports_the_log_readers_internals() -> None:
    errors_module = "deltalog"
    tree = ast.parse(MODULES["deltalog.errors"].read_text())
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    specific_errors = classes - BASE_ERRORS
    offenders = []
    for module in MODULES:
        if module.startswith("deltalog") or module == DOOR:
            continue
        for imported, names in _imports(module):
            if imported.startswith(LOG_READER_INTERNALS):
                offenders.append(f"{module} imports {imported}")
            if imported == errors_module and specific_errors.intersection(names):
                offenders.append(f"{module} imports {sorted(specific_errors & set(names))}")
            if imported == errors_module and {"history", "changes", "errors"} & set(names):
                offenders.append(f"{module} imports deltalog's {names}")
    assert offenders == []
