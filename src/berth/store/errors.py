"""Errors raised by the store. The service maps each to an HTTP status and a stable code."""

from __future__ import annotations

from berth.core.errors import BerthError


class StoreError(BerthError):
    code = "store_error"


class NotFoundError(StoreError):
    code = "not_found"

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"{kind} {name!r} not found")
        self.kind = kind
        self.name = name


class AlreadyExistsError(StoreError):
    code = "already_exists"

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"{kind} {name!r} already exists")
        self.kind = kind
        self.name = name


class InvalidReferenceError(StoreError):
    """A name refers to something that does not exist (the message names the field)."""

    code = "invalid_reference"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class InUseError(StoreError):
    code = "in_use"


class GenerationConflictError(StoreError):
    """A host or deployment set changed since it was read; nothing was written."""

    code = "generation_conflict"

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"{kind} {name!r} changed since it was read")
        self.kind = kind
        self.name = name


class PlanRejectedError(StoreError):
    """The plan no longer fits the current rows (re-verification at commit); nothing written."""

    code = "plan_rejected"


class IdempotencyRaceError(StoreError):
    """Another request with the same idempotency key committed first; nothing was written."""

    code = "idempotency_race"
