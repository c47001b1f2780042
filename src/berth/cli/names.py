"""Names and limits that `--help` texts show, without importing the modules that define them
(they load numpy and pydantic, and `berth --help` must load neither: docs/architecture.md).
`tests/cli/test_startup.py` checks each equals its original."""

from __future__ import annotations

from enum import StrEnum

PROFILES = ("nova", "berth", "spread", "pack", "first_fit", "best_fit", "worst_fit")
"""`berth.core.config.PROFILES`, in order"""
MAX_ADMISSION = 4
"""`berth.core.defrag.admit.MAX_ADMISSION`"""
DEFAULT_SIZING = "90xstd-2s+11xssd-2s+14xdpdk-2s"
"""`berth.sim.synthetic.DEFAULT_SIZING`"""


class BusinessChoice(StrEnum):
    """`berth.policy.model.Business`, as an option's choices."""

    ON_DEMAND = "on-demand"
    AUTO_SCALING = "auto-scaling"
    PREEMPTIBLE = "preemptible"
    ELASTIC = "elastic"
