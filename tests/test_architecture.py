"""The house rules of docs/architecture.md, checked on the source tree.

Every module of `src/berth` (Alembic migrations aside) is parsed, not imported, so the checks are
cheap and see in-function imports too: an import written inside a function to dodge a cycle is
still an edge of the graph and still a cycle.
"""

from __future__ import annotations

import ast
import graphlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100

# package -> the berth packages it may import (besides itself), from docs/architecture.md.
ALLOWED = {
    "berth.core": set(),
    "berth.fleet": {"berth.core"},
    "berth.policy": {"berth.core", "berth.fleet"},
    "berth.solvers": {"berth.core"},
    "berth.sim": {"berth.core", "berth.fleet", "berth.policy", "berth.solvers"},
    "berth.store": {"berth.core", "berth.elastic"},
    "berth.cloud": {"berth.core"},
    "berth.elastic": {"berth.core", "berth.cloud"},
    "berth.service": {
        "berth.core",
        "berth.fleet",
        "berth.policy",
        "berth.store",
        "berth.cloud",
        "berth.elastic",
    },
}


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    imports: set[str] = field(default_factory=set)
    long_functions: list[str] = field(default_factory=list)


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


@cache
def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for path in sorted((SRC / "berth").rglob("*.py")):
        if "migrations" in path.parts:
            continue
        name = _module_name(path)
        text = path.read_text()
        found[name] = Module(name, path, text.count("\n"))
    for mod in found.values():
        package = mod.name if mod.path.name == "__init__.py" else mod.name.rpartition(".")[0]
        for node in ast.walk(ast.parse(mod.path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    mod.long_functions.append(f"{node.name} ({length} lines)")
            elif isinstance(node, ast.Import | ast.ImportFrom):
                mod.imports |= {t for t in _imported(node, package) if t in found and t != mod.name}
    return found


def _package_of(name: str) -> str:
    return ".".join(name.split(".")[:2])


def test_the_tree_is_found() -> None:
    assert "berth.core.engine" in modules()
    assert modules()["berth.core.engine"].imports


def test_no_module_is_too_long() -> None:
    long = {m.name: m.lines for m in modules().values() if m.lines > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_too_long() -> None:
    long = {m.name: m.long_functions for m in modules().values() if m.long_functions}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_no_import_cycle_between_modules() -> None:
    """A package importing its own submodules from `__init__` is not a cycle of design."""
    graph = {
        m.name: {t for t in m.imports if not t.startswith(m.name + ".")} for m in modules().values()
    }
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_what_they_may(package: str) -> None:
    allowed = ALLOWED[package] | {package}
    wrong = sorted(
        f"{m.name} imports {t}"
        for m in modules().values()
        if _package_of(m.name) == package
        for t in m.imports
        if _package_of(t) not in allowed
    )
    assert not wrong, wrong


# third-party packages that one module alone may import (docs/architecture.md, `berth.sim`)
ONLY_IN = {"distributed": {"berth.sim.capacity_exec"}, "ray": {"berth.sim.capacity_exec"}}


def test_cluster_libraries_are_imported_by_their_one_module() -> None:
    wrong = []
    for mod in modules().values():
        for node in ast.walk(ast.parse(mod.path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            wrong += [
                f"{mod.name} imports {name}"
                for name in names
                if name.split(".")[0] in ONLY_IN and mod.name not in ONLY_IN[name.split(".")[0]]
            ]
    assert not wrong, wrong
