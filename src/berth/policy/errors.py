"""The multi-cloud policy layer's errors: bad input, and a decision that no longer holds."""

from __future__ import annotations

from berth.core.errors import BerthError


class MultiCloudInputError(BerthError):
    """Bad input to the multi-cloud policy layer (unknown region, flavor, cluster, deployment
    set, instance; a catalogue entry that makes no sense): one clear line."""


class PolicyConflictError(BerthError):
    """A placement no longer holds at commit (state changed since the decision)."""
