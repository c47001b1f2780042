"""`Store` and `DefragStore` are the unions of their parts (`berth.store.repo`,
`berth.store.defrag`): each method is defined by exactly one part."""

from __future__ import annotations

from berth.store.db import Database
from berth.store.defrag import DefragStore
from berth.store.defrag_plans import DefragPlans
from berth.store.defrag_rows import DefragTables
from berth.store.defrag_steps import DefragSteps
from berth.store.repo import RESOURCES, Store


def _owners(parts: tuple[type, ...]) -> dict[str, str]:
    owner: dict[str, str] = {}
    for part in parts:
        for name in vars(part):
            if name.startswith("__"):
                continue
            assert name not in owner, f"{name} is defined by {owner[name]} and {part.__name__}"
            owner[name] = part.__name__
    return owner


def test_store_resources_define_disjoint_methods() -> None:
    assert all(issubclass(resource, Database) for resource in RESOURCES)
    _owners((Database, *RESOURCES, Store))
    assert set(Store.__mro__) == {Store, *RESOURCES, Database, object}


def test_defrag_parts_define_disjoint_methods() -> None:
    _owners((DefragTables, DefragPlans, DefragSteps, DefragStore))
    assert set(DefragStore.__mro__) == {DefragStore, DefragPlans, DefragSteps, DefragTables, object}
