"""The package rules of DESIGN.md, checked on the source: no import cycles between
first-party modules; `deltalog/` imports nothing from `sharing/`, `app/` or `client/`;
outside `deltalog/` itself, only `sharing/tables.py` imports the log reader's history,
change feed and error modules (other code may catch the library's base errors, exported
at `deltalog`'s root, to degrade gracefully, but never a specific one)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support import REPO_ROOT

PACKAGES = ("deltalog", "sharing", "app", "client")
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


def _imports(module: str, *, top_level: bool = False) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(imported module, names) for every import in `module` (only those run when the
    module is imported with `top_level`), except under `if TYPE_CHECKING:`. For `from
    package import submodule` the submodule is the imported module."""
    tree = ast.parse(MODULES[module].read_text())
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST) -> Iterator[tuple[str, tuple[str, ...]]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                yield from (item for orelse in child.orelse for item in visit(orelse))
                continue
            if top_level and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
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
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        edges = set()
        for imported, _ in _imports(module, top_level=True):
            target = _first_party(imported)
            if target is not None and target != module:
                edges.add(target)
        graph[module] = edges
    return graph


def test_no_import_cycles() -> None:
    """Between the imports a module runs when it is imported. (Imports inside functions
    are how backends load their SDK on first use; the routes must not use them to dodge
    a cycle, see test_routes_import_no_other_route.)"""
    graph = _graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def walk(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph[module]):
            # A package imported by one of its own modules is a package namespace, not a
            # cycle to untangle, when the package's __init__ imports nothing back.
            if state.get(target) == 1:
                cycle = stack[stack.index(target) :]
                if not (len(cycle) > 1 and all(m.startswith(cycle[0] + ".") for m in cycle[1:])):
                    cycles.append([*cycle, target])
            elif target not in state:
                walk(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module)
    assert cycles == []


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
            assert root not in ("sharing", "app", "client"), f"{module} imports {imported}"


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
