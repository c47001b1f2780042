"""Per-host sums of free columns that a decision reads over every host, kept by the table.

The vCPU filter (pinned guests) and the vCPU weigher read, on every decision, a sum over each
host's cells and host columns. Both depend only on each host's free columns, so the table's
`derived` cache keeps them (`table_changes.ChangeTracking.derived`): a decision after no change
reads the kept array, one after a claim recomputes the claimed host only. Integers: the sums are
exact in any order, the same values as summing afresh.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.resources import C_PCPU, H_VCPU
from berth.core.table import HostTable

I64 = npt.NDArray[np.int64]


def free_pinned(table: HostTable) -> I64:
    """Free pinnable CPUs of each host, over all its cells (shared, read-only)."""

    def compute(rows: I64 | None) -> I64:
        cells = table.free_rows(rows)[0]
        if cells.shape[1] == 2:  # two contiguous columns cost less than a strided sum
            out: I64 = cells[:, 0, C_PCPU] + cells[:, 1, C_PCPU]
            return out
        return np.asarray(cells[:, :, C_PCPU].sum(axis=1), dtype=np.int64)

    return _read_only(table.derived(("free pinned CPUs",), compute))


def free_vcpus(table: HostTable) -> I64:
    """Free shared vCPUs plus free pinnable CPUs of each host (the vCPU weigher's column;
    shared, read-only)."""

    def compute(rows: I64 | None) -> I64:
        cells, host = table.free_rows(rows)
        if cells.shape[1] == 2:
            out: I64 = host[:, H_VCPU] + cells[:, 0, C_PCPU] + cells[:, 1, C_PCPU]
            return out
        return np.asarray(host[:, H_VCPU] + cells[:, :, C_PCPU].sum(axis=1), dtype=np.int64)

    return _read_only(table.derived(("free vCPUs",), compute))


def _read_only(values: I64) -> I64:
    """The kept array, shared by every reader until a claim changes it: no one may write."""
    values.flags.writeable = False
    return values
