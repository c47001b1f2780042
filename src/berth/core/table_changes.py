"""What changed in a host table since a version (the touch log), and the caches kept from it.

`table.HostTable` builds on `ChangeTracking`: every claim, release or state change bumps
`version` and marks its row in `touched` and in a short log, so that caches derived from the
free columns recompute only the rows changed since they were last read.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
RowFunction = Callable[[I64 | None], npt.NDArray[Any]]

LOG_READ = 32
"""`changed_since` reads the touch log up to this many versions back, else scans all hosts."""
LOG_KEEP = 1024
"""Touch-log entries kept (then trimmed to half): bounded memory for a long-lived table."""

DERIVED_CACHE = 512
"""Keys kept by `ChangeTracking.derived` (LRU): about three per flavor in use (count, cell fit,
fragmentation cost), 4-9 bytes per host each. Large catalogues need the room: at 128 a
74-flavor catalogue thrashed."""


class ChangeTracking:
    """Versions, per-host touches and the touch log of a table, with the caches derived from
    them. The table appends rows to `touched` and resets the caches when its rows or flavors
    change."""

    def __init__(self) -> None:
        self.version = 0
        """Bumped by every change; never goes back, unlike generations after an undo."""
        self.touched = np.zeros(0, dtype=np.int64)
        """Per host, the `version` of its last change (what derived caches compare against)."""
        self._log: list[int] = []
        """The row each version since `_log_base` changed (a bounded tail; see `changed_since`)."""
        self._log_base = 0
        self._derived: dict[Hashable, tuple[int, npt.NDArray[Any]]] = {}
        self._state: dict[Hashable, Any] = {}
        """Caches that readers update in place (e.g. a weigher's per-host values for many
        flavors at once); dropped by `copy`, `add_flavor` and `add_hosts`, never shared."""

    def derived(self, key: Hashable, compute: RowFunction) -> npt.NDArray[Any]:
        """A per-host value derived from the free columns, cached and kept exact incrementally.

        `compute(rows)` returns the value for those rows (None = every host, in row order; read
        them with `free_rows`); it must depend only on those rows' free columns and on static
        table data such as flavors. The first call computes every host; later calls recompute
        only hosts changed since (by `touched`). At most `DERIVED_CACHE` keys are kept (LRU).
        The returned array is shared: read it, never write to it.
        """
        cached = self._derived.pop(key, None)
        if cached is None:
            values = compute(None)
        else:
            seen, values = cached
            if seen != self.version:
                rows = self.changed_since(seen)
                if rows.size:
                    values = values.copy()
                    values[rows] = compute(rows)
        self._derived[key] = (self.version, values)
        while len(self._derived) > DERIVED_CACHE:
            self._derived.pop(next(iter(self._derived)))
        return values

    def state(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The cache stored under `key`, made by `make()` on first use.

        Unlike `derived`, its owner updates it in place (reading `changed_since` itself), so it
        is never shared: `copy` drops it, as do `add_flavor` and `add_hosts`.
        """
        try:
            return self._state[key]
        except KeyError:
            found = self._state[key] = make()
            return found

    def changed_since(self, seen: int) -> I64:
        """Rows changed after version `seen`, ascending (what ``touched > seen`` selects).

        A few versions back, read from the log of touched rows (no pass over every host);
        further back, or before the log's start, scan `touched`.
        """
        behind = self.version - seen
        if behind <= LOG_READ and seen >= self._log_base:
            recent = self._log[seen - self._log_base :]
            if behind == 1:
                return np.array(recent, dtype=np.int64)
            return np.array(sorted(set(recent)), dtype=np.int64)
        return np.flatnonzero(self.touched > seen)

    def recent_changes(self, seen: int) -> list[int] | None:
        """The rows changed after version `seen` as the touch log has them (in order, a row
        once per change), or None when the log does not reach back that far: a cheaper
        `changed_since` for callers that tolerate repeats."""
        if self.version - seen <= LOG_READ and seen >= self._log_base:
            return self._log[seen - self._log_base :]
        return None

    def _touch(self, row: int) -> None:
        self.version += 1
        self.touched[row] = self.version
        self._log_row(row)

    def _log_row(self, row: int) -> None:
        """Append `row` to the touch log (its version is `version`), trimmed when long."""
        self._log.append(row)
        if len(self._log) > LOG_KEEP:
            drop = len(self._log) - LOG_KEEP // 2
            del self._log[:drop]
            self._log_base += drop
