"""The service's placing layers import one way: the replica knows no decider or policy code."""

from __future__ import annotations

import ast
from pathlib import Path

import berth.service

SERVICE = Path(berth.service.__file__).parent


def imported(module: Path) -> set[str]:
    """Every module a file imports, at any depth of its body."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_replica_imports_no_policy_or_placing_code():
    names = imported(SERVICE / "replica.py")
    assert not {n for n in names if n.startswith(("berth.policy", "berth.service.placing"))}
    assert "berth.service.policy_topology" not in names


def test_placing_modules_import_nothing_above_them():
    for module in (SERVICE / "placing").glob("*.py"):
        names = imported(module)
        assert "berth.service.app" not in names, module.name
        assert not {n for n in names if n.startswith("berth.service.routes")}, module.name
