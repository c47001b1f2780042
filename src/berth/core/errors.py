"""Errors raised by the core. Each message names the field or spec at fault."""

from __future__ import annotations


class BerthError(Exception):
    """Base of every error the core raises on bad input."""


class SpecError(BerthError):
    """A flavor's extra specs, a request or a configuration value is invalid."""


class FleetError(BerthError):
    """A fleet snapshot is inconsistent (unknown names, instances that do not fit their host)."""


class ClaimError(BerthError):
    """A claim or release could not be applied; the table is unchanged."""


class StaleGenerationError(ClaimError):
    """A change was based on a host generation that is no longer current."""
