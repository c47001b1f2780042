"""Claims, releases and renames on a `HostTable` that can be undone exactly.

A live migration holds the instance on both hosts while it runs: its target is claimed under a
temporary id, the source is released when the move completes, and the temporary allocation takes
the instance's id. `Journal.rollback` undoes all of it in reverse, generations included.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from berth.core.table import Allocation, HostTable

I64 = npt.NDArray[np.int64]


def in_flight_id(instance_id: str) -> str:
    """The id of a migration's target allocation while the instance still runs on its source."""
    return instance_id + "~migrating"


def rename(table: HostTable, old: str, new: str) -> None:
    alloc = table.allocations.pop(old)
    table.allocations[new] = replace(alloc, instance_id=new)


@dataclass
class Journal:
    table: HostTable
    _log: list[tuple[str, object, int]] = field(default_factory=list)

    def claim_target(self, alloc: Allocation, target: str, cell_use: I64, host_use: I64) -> None:
        """Claim `alloc`'s instance on `target` under its in-flight id (source still held)."""
        row = self.table.row(target)
        generation = int(self.table.generation[row])
        iid = in_flight_id(alloc.instance_id)
        self.table.claim(
            iid,
            target,
            alloc.flavor,
            cell_use,
            host_use,
            server_group=alloc.server_group,
            project=alloc.project,
            migratable=alloc.migratable,
        )
        self._log.append(("claim", iid, generation))

    def release_source(self, instance_id: str) -> None:
        alloc = self.table.allocations[instance_id]
        generation = int(self.table.generation[self.table.index[alloc.host]])
        self.table.release(instance_id)
        self._log.append(("release", alloc, generation))

    def finish(self, instance_id: str) -> None:
        """The move completed: the target allocation takes the instance's id."""
        rename(self.table, in_flight_id(instance_id), instance_id)
        self._log.append(("rename", instance_id, 0))

    def migrate(self, alloc: Allocation, target: str, cell_use: I64, host_use: I64) -> None:
        """One whole move: claim the target, release the source, finish."""
        self.claim_target(alloc, target, cell_use, host_use)
        self.release_source(alloc.instance_id)
        self.finish(alloc.instance_id)

    def mark(self) -> int:
        return len(self._log)

    def rollback(self, to: int = 0) -> None:
        """Undo every change after `mark() == to`, newest first, restoring generations."""
        table = self.table
        while len(self._log) > to:
            kind, what, generation = self._log.pop()
            if kind == "claim":
                assert isinstance(what, str)
                table.unclaim(what, generation)
            elif kind == "release":
                assert isinstance(what, Allocation)
                table.claim(
                    what.instance_id,
                    what.host,
                    what.flavor,
                    what.cell_use,
                    what.host_use,
                    server_group=what.server_group,
                    project=what.project,
                    migratable=what.migratable,
                )
                table.generation[table.index[what.host]] = generation
            else:
                assert isinstance(what, str)
                rename(table, what, in_flight_id(what))
