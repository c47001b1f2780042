"""Errors of driving a cloud, as the API reports them (rows of `berth.service.errors`)."""

from __future__ import annotations

from typing import Any

from berth.core.errors import BerthError


class BootFailedError(BerthError):
    """No host of a placement's decision (the chosen one, then its alternates) booted one of its
    servers; every claim of the placement was released. `details` names each host tried and
    what the cloud said."""

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.details = details


class CloudUnavailableError(BerthError):
    """The cloud did not answer (or refused) a call Berth needs to go on (join, inventory)."""


class ClaimRefusedError(BerthError):
    """Berth's own model says the instance does not fit on that host (nothing was written)."""
