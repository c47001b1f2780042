"""The errors a placement raises, whichever decider chose it."""

from __future__ import annotations

from typing import Any

from berth.core.errors import BerthError


class NoPlacementError(BerthError):
    """No candidate cluster fits the request; `details` says why, cluster by cluster."""

    def __init__(self, message: str, reason: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.reason = reason
        self.details = details


class ContentionError(BerthError):
    """Every attempt lost its race with another writer (bounded retries exhausted)."""


class BadRequestError(BerthError):
    def __init__(self, field_name: str, message: str, code: str = "invalid_input") -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.code = code
