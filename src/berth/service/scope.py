"""What a caller may name: another project's objects look exactly like missing ones to a tenant.

A placement's `same_host` / `different_host` hints name instances. A tenant naming another
project's instance must learn nothing about it (docs/service.md, "Auth"): not its host (a 201
next to it) and not that it exists (a 409 instead of the answer for an unknown id). So every
hint is looked up first: an id that does not exist, or (for a tenant) belongs to another
project, is the same 422 `invalid_reference` naming the hint (`same_host[0]`).
"""

from __future__ import annotations

from berth.service.auth import Principal
from berth.service.errors import ApiError
from berth.store.errors import NotFoundError
from berth.store.repo import Store


def check_hints(store: Store, p: Principal, hints: dict[str, tuple[str, ...]]) -> None:
    """422 for the first hinted instance id the caller cannot see (`hints`: field -> ids)."""
    visible = p.visible_project()
    for field, ids in hints.items():
        for i, iid in enumerate(ids):
            if not _visible_instance(store, iid, visible):
                raise ApiError(
                    422,
                    "invalid_reference",
                    f"{field}[{i}]: unknown instance {iid!r}",
                    field=f"{field}[{i}]",
                )


def _visible_instance(store: Store, iid: str, project: str | None) -> bool:
    try:
        row = store.get_instance(iid)
    except NotFoundError:
        return False
    return project is None or row.project == project
