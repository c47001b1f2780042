"""`Store` is the union of its resource classes (`berth.store.repo`): each method is defined once."""

from __future__ import annotations

from berth.store.db import Database
from berth.store.repo import RESOURCES, Store


def test_resource_classes_define_disjoint_methods() -> None:
    owner: dict[str, str] = {}
    for resource in RESOURCES:
        assert issubclass(resource, Database)
        for name in vars(resource):
            if name.startswith("__"):
                continue
            assert name not in owner, f"{name} is defined by {owner[name]} and {resource.__name__}"
            owner[name] = resource.__name__
    assert set(Store.__mro__[1:-2]) == set(RESOURCES)
