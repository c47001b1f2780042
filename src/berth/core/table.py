"""`HostTable`: the whole fleet as columns, with exact claims and per-host generations.

One numpy array per attribute; a host is a row. Names map to rows in O(1). Strings are interned
(`vocabulary`), hosts become columns by `host_columns`, changes are logged for derived caches by
`table_changes`, and snapshot cells are read by `snapshot_cells`. Every claim and release changes
the used columns of exactly one row and bumps that row's generation; a claim that would
over-commit any column is refused whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core import kernels
from berth.core.demand import Demand, FixedPlan, build_demand
from berth.core.errors import ClaimError, FleetError, SpecError, StaleGenerationError
from berth.core.flavors import FlavorSpec, NumaMode, parse_flavor
from berth.core.host_columns import capacities, distances, merged_metadata, trait_bits, widen
from berth.core.model import Fleet, Host, Instance, ServerGroup
from berth.core.nominal import Nominal
from berth.core.numa import dispatch
from berth.core.numa.vector import fits, resource_major, take
from berth.core.resources import CELL_BASE, HOST_NAMES, HOST_RESOURCES, cell_resource_name
from berth.core.snapshot_cells import stated_cells, stated_use
from berth.core.table_changes import ChangeTracking
from berth.core.vocabulary import KeyedValues, Vocabulary, extend_keyed

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
INT32_MAX = np.iinfo(np.int32).max
INT32_MAX_INT = int(INT32_MAX)


@dataclass(frozen=True)
class Allocation:
    """An instance's exact footprint on its host."""

    instance_id: str
    host: str
    flavor: str
    cell_use: I64  # (cells, cell columns)
    host_use: I64  # (host columns,)
    server_group: str | None = None
    project: str = "default"
    migratable: bool = True


class HostTable(ChangeTracking):
    """Columnar fleet state. Build with `HostTable.from_fleet`."""

    def __init__(self, device_types: list[str]) -> None:
        super().__init__()  # version, touched, the touch log and the derived caches
        self.device_types = list(device_types)
        self.width = CELL_BASE + len(self.device_types)
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.cell_cap = np.zeros((0, 2, self.width), dtype=np.int64)  # widened by add_hosts
        self.cell_free = np.zeros_like(self.cell_cap)
        self.host_cap = np.zeros((0, HOST_RESOURCES), dtype=np.int64)
        self.host_free = np.zeros_like(self.host_cap)
        self.n_cells = np.zeros(0, dtype=np.int8)
        self.distance: dict[int, list[list[int]]] = {}  # row -> NUMA distances, if reported
        self.page_kb = np.zeros(0, dtype=np.int32)
        self.n_instances = np.zeros(0, dtype=np.int32)
        self.generation = np.zeros(0, dtype=np.int64)
        self.enabled = np.zeros(0, dtype=bool)
        self.heartbeat = np.zeros(0, dtype=np.float64)
        self.trusted = np.zeros(0, dtype=bool)
        self.io_ops = np.zeros(0, dtype=np.int32)
        self.nominal = Nominal.empty()  # stated sizes before ratios (`nominal`)
        self.zones = Vocabulary()
        self.zone = np.zeros(0, dtype=np.int32)
        self.arches = Vocabulary()
        self.arch = np.zeros(0, dtype=np.int32)
        self.hypervisors = Vocabulary()
        self.hypervisor = np.zeros(0, dtype=np.int32)
        self.racks = Vocabulary()
        self.rack = np.zeros(0, dtype=np.int32)
        self.traits = Vocabulary()
        self.trait_bits = np.zeros((0, 1), dtype=np.uint64)
        self.aggregate_meta: dict[str, KeyedValues] = {}
        self.capabilities: dict[str, KeyedValues] = {}
        self.aggregates_of: list[tuple[str, ...]] = []
        self.flavors: dict[str, FlavorSpec] = {}
        self.demands: dict[str, Demand] = {}
        self.groups: dict[str, ServerGroup] = {}
        self.group_rows: dict[str, dict[int, int]] = {}
        self.allocations: dict[str, Allocation] = {}
        self.flavor_epoch = 0
        """Bumped whenever a flavor is added or redefined (for caches over the catalogue)."""
        self._everyone = np.ones(0, dtype=bool)
        self._fixed_plans: dict[str, FixedPlan | bool] = {}
        """Per flavor, the footprint that does not depend on the host (`plan_for`)."""

    # ------------------------------------------------------------------ building
    @classmethod
    def from_fleet(cls, fleet: Fleet) -> HostTable:
        """Build the table, parse flavors and claim every listed instance exactly."""
        device_types = sorted(
            {d for h in fleet.hosts for c in h.numa_cells for d in c.pci}
            | {a.device_type for a in fleet.pci_aliases}
        )
        table = cls(device_types)
        aliases = {a.name: a.device_type for a in fleet.pci_aliases}
        for flavor in fleet.flavors:
            spec = parse_flavor(flavor, aliases)
            table.add_flavor(spec)
        meta = {a.name: a.metadata for a in fleet.aggregates}
        table.add_hosts(fleet.hosts, meta)
        for group in fleet.server_groups:
            table.groups[group.id] = group
        for i, inst in enumerate(fleet.instances):
            try:
                table.claim_existing(inst)
            except (ClaimError, SpecError) as exc:
                raise FleetError(f"instances[{i}] ({inst.id}): {exc}") from None
        return table

    def add_flavor(self, spec: FlavorSpec) -> None:
        unknown = [d for d in spec.pci if d not in self.device_types]
        if unknown:
            raise SpecError(
                f"flavor {spec.name!r}: extra_specs['pci_passthrough:alias']: unknown PCI alias "
                f"or device type {unknown[0]!r}"
            )
        if spec.numa_mode.name == "FLEX" and spec.hugepages:
            raise SpecError(
                f"flavor {spec.name!r}: extra_specs['berth:numa_split']: a flexible split "
                "cannot use huge pages (page-size granularity); use an even or explicit split"
            )
        self.flavors[spec.name] = spec
        self.demands[spec.name] = build_demand(spec, self.device_types)
        self._derived = {}  # cached values may depend on the old definition of this name
        self._fixed_plans = {}
        self._state = {}
        self.flavor_epoch += 1

    def add_hosts(self, hosts: list[Host], aggregate_meta: dict[str, dict[str, str]]) -> None:
        """Append hosts as new rows. Existing rows, claims and generations are untouched."""
        for i, host in enumerate(hosts):
            if host.name in self.index:
                raise FleetError(f"hosts[{i}]: host {host.name!r} already exists")
            unknown = [d for c in host.numa_cells for d in c.pci if d not in self.device_types]
            if unknown:
                raise FleetError(f"hosts[{i}]: PCI device type {unknown[0]!r} is not known")
        n0, n = len(self.names), len(hosts)
        if n == 0:
            return
        cell_cap, host_cap = capacities(hosts, self.device_types, self.width, self.cell_cap)
        widen(self, cell_cap.shape[1])  # a wider host: pad every row's cells (docs/numa.md)
        self.distance.update(distances(hosts, n0))

        def cat(old: Any, new: Any, dtype: Any) -> Any:
            return np.concatenate([old, np.asarray(new, dtype=dtype)])

        self.cell_cap = resource_major(np.concatenate([self.cell_cap, cell_cap]))
        self.cell_free = resource_major(np.concatenate([self.cell_free, cell_cap]))
        self.host_cap = resource_major(np.concatenate([self.host_cap, host_cap]))
        self.host_free = resource_major(np.concatenate([self.host_free, host_cap]))
        self.n_cells = cat(self.n_cells, [len(h.numa_cells) for h in hosts], np.int8)
        self.page_kb = cat(self.page_kb, [h.hugepage_size_kb for h in hosts], np.int32)
        self.n_instances = cat(self.n_instances, np.zeros(n), np.int32)
        self.generation = cat(self.generation, np.zeros(n), np.int64)
        self.version += 1
        self.touched = cat(self.touched, np.full(n, self.version), np.int64)
        self._log, self._log_base = [], self.version  # every row changed: scan from here
        self._derived = {}
        self._state = {}
        self.enabled = cat(self.enabled, [h.enabled for h in hosts], bool)
        self.heartbeat = cat(self.heartbeat, [h.last_heartbeat for h in hosts], np.float64)
        self.trusted = cat(self.trusted, [h.trusted for h in hosts], bool)
        self.io_ops = cat(self.io_ops, [h.io_ops for h in hosts], np.int32)
        zone = [self.zones.code(h.availability_zone) for h in hosts]
        self.zone = cat(self.zone, zone, np.int32)
        arch = [self.arches.code(h.architecture) for h in hosts]
        self.arch = cat(self.arch, arch, np.int32)
        hyp = [self.hypervisors.code(h.hypervisor_type) for h in hosts]
        self.hypervisor = cat(self.hypervisor, hyp, np.int32)
        self.nominal = self.nominal.extend(hosts)
        rack = [self.racks.code(h.rack or f"host:{h.name}") for h in hosts]
        self.rack = cat(self.rack, rack, np.int32)

        self.trait_bits = trait_bits(self.trait_bits, self.traits, hosts)
        host_meta = merged_metadata(hosts, aggregate_meta)
        extend_keyed(self.aggregate_meta, host_meta, n0)
        extend_keyed(self.capabilities, [dict(h.capabilities) for h in hosts], n0)
        self.aggregates_of.extend(tuple(h.aggregates) for h in hosts)

        for r, host in enumerate(hosts, start=n0):
            self.names.append(host.name)
            self.index[host.name] = r
        self._everyone = np.ones(len(self.names), dtype=bool)
        self._everyone.flags.writeable = False

    def __len__(self) -> int:
        return len(self.names)

    def everyone(self) -> Mask:
        """A read-only all-True mask over the hosts: what a filter that does not apply returns.

        Shared, so filters that pass everyone cost nothing; it cannot be written to.
        """
        return self._everyone

    def row(self, host: str) -> int:
        try:
            return self.index[host]
        except KeyError:
            raise ClaimError(f"unknown host {host!r}") from None

    def demand(self, flavor: str) -> Demand:
        try:
            return self.demands[flavor]
        except KeyError:
            raise SpecError(f"unknown flavor {flavor!r}") from None

    @property
    def cell_used(self) -> I64:
        return self.cell_cap - self.cell_free

    @property
    def host_used(self) -> I64:
        return self.host_cap - self.host_free

    def group_count(self, group: str) -> I64:
        """Members of a server group per host (dense, shape (n,))."""
        out = np.zeros(len(self.names), dtype=np.int64)
        rows = self.group_rows.get(group)
        if rows:
            out[list(rows)] = list(rows.values())
        return out

    def instances_on(self, host: str) -> Iterator[Allocation]:
        return (a for a in self.allocations.values() if a.host == host)

    def free_rows(self, rows: I64 | None) -> tuple[I64, I64]:
        """(cell_free, host_free) of some rows (None = all), in the resource-major layout."""
        if rows is None:
            return self.cell_free, self.host_free
        return take(self.cell_free, rows), take(self.host_free, rows)

    def resource_counts(self, flavor: str) -> npt.NDArray[np.int32]:
        """`numa.vector.count` of `flavor` on every host (cached, see `derived`; int32: small)."""
        d = self.demand(flavor)

        def compute(rows: I64 | None) -> npt.NDArray[np.int32]:
            counts = dispatch.count_on(d, self.cell_free, self.host_free, rows)
            return np.minimum(counts, INT32_MAX).astype(np.int32)

        return self.derived(("count", flavor), compute)

    def cells_fit(self, flavor: str) -> Mask:
        """Hosts whose NUMA cells take one more instance of `flavor` (cached, see `derived`)."""
        d = self.demand(flavor)

        def compute(rows: I64 | None) -> Mask:
            cf, hf = self.cell_free, self.host_free
            return dispatch.count_on(d, cf, hf, rows, cells_only=True) >= 1

        return self.derived(("cells_fit", flavor), compute)

    # ------------------------------------------------------------------ claims
    def plan_for(self, flavor: str, row: int) -> tuple[I64, I64]:
        """Berth's claim rule on one host: (cell_use, host_use) of one more instance."""
        fixed = self._fixed_for(flavor)
        if fixed:
            assert isinstance(fixed, FixedPlan)
            return fixed.cell_use.copy(), fixed.host_use.copy()
        d = self.demand(flavor)  # one host: the claim rule's footprint (`dispatch.place_on`)
        cells = dispatch.place_on(d, self.cell_free, self.host_free, row, self.distance.get(row))
        return cells, d.host.copy()

    def _fixed_for(self, flavor: str) -> FixedPlan | bool:
        fixed = self._fixed_plans.get(flavor)
        if fixed is None:
            fixed = self._fixed_plans[flavor] = self._fixed_plan(self.demand(flavor))
        return fixed

    def _fixed_plan(self, d: Demand) -> FixedPlan | bool:
        """The footprint `place` gives on every host when it does not depend on the host's state
        (floating guests and even splits without host-level PCI); False otherwise."""
        if d.pci.any():
            return False
        cells = self.cell_cap.shape[1]
        if d.mode == NumaMode.NONE:
            return FixedPlan.of(np.zeros((cells, self.width), dtype=np.int64), d.host)
        if d.mode == NumaMode.EVEN and len(d.cells) == cells:  # every cell, on every host
            return FixedPlan.of(d.cells, d.host)
        return False

    def claim_planned(
        self,
        instance_id: str,
        row: int,
        flavor: str,
        *,
        server_group: str | None = None,
        project: str = "default",
    ) -> Allocation:
        """``claim(instance_id, names[row], flavor, *plan_for(flavor, row), ...)``, cheaper.

        For the engine's lean path (one decision, then its claim). The same checks, the same
        allocation and the same errors; the footprint is checked and applied in one compiled
        pass (`kernels.move_footprint`). A footprint that does not depend on the host has its
        arrays shared, read-only, by every allocation of the flavor (no copies); one that does
        comes from the claim rule on this host (`plan_for`).
        """
        if not 0 <= row < len(self.names):  # the kernel reads the row unchecked
            raise ClaimError(f"no host at row {row}")
        fixed = self._fixed_for(flavor)
        d = self.demand(flavor)
        if (
            instance_id in self.allocations
            or (server_group is not None and server_group not in self.groups)
            or d.spec.hugepages
        ):  # the general path (and its errors)
            cell_use, host_use = self.plan_for(flavor, row)
            return self.claim(
                instance_id,
                self.names[row],
                flavor,
                cell_use,
                host_use,
                server_group=server_group,
                project=project,
            )
        if isinstance(fixed, FixedPlan):  # shared, read-only: no copies
            cell_use, host_use = fixed.cell_use, fixed.host_use
        else:  # a footprint of its own (NUMA placement, PCI): the claim rule on this host
            cell_use, host_use = self.plan_for(flavor, row)
        # as `claim`: refused if any column (used or not) would be negative afterwards
        version = self.version + 1
        if not kernels.move_footprint(
            self.cell_free,
            self.host_free,
            row,
            cell_use,
            host_use,
            self.n_instances,
            self.generation,
            self.touched,
            version,
            -1,
        ):
            return self.claim(instance_id, self.names[row], flavor, cell_use, host_use)
        self.version = version
        self._log_row(row)
        host = self.names[row]
        alloc = Allocation(instance_id, host, flavor, cell_use, host_use, server_group, project)
        return self._enter(row, alloc)

    def claim(
        self,
        instance_id: str,
        host: str,
        flavor: str,
        cell_use: I64 | None = None,
        host_use: I64 | None = None,
        *,
        server_group: str | None = None,
        project: str = "default",
        migratable: bool = True,
        expected_generation: int | None = None,
    ) -> Allocation:
        """Record an instance on a host; refused whole if anything would over-commit.

        Without `cell_use`/`host_use` the claim rule decides the exact footprint.
        """
        if instance_id in self.allocations:
            raise ClaimError(f"instance {instance_id!r} already has an allocation")
        row = self.row(host)
        if expected_generation is not None and int(self.generation[row]) != expected_generation:
            raise StaleGenerationError(
                f"host {host!r} is at generation {int(self.generation[row])}, "
                f"not {expected_generation}"
            )
        if server_group is not None and server_group not in self.groups:
            raise ClaimError(f"unknown server group {server_group!r}")
        spec = self.demand(flavor).spec
        if spec.hugepages and not self.page_size_ok(spec, row)[0]:
            raise ClaimError(f"host {host!r} has no huge pages of the size flavor {flavor!r} needs")
        if cell_use is None or host_use is None:
            d = self.demand(flavor)
            if not fits(d, self.cell_free[row : row + 1], self.host_free[row : row + 1])[0]:
                raise ClaimError(f"flavor {flavor!r} does not fit on host {host!r}")
            cell_use, host_use = self.plan_for(flavor, row)
        cell_use = np.array(cell_use, dtype=np.int64)  # the allocation's own copies
        host_use = np.array(host_use, dtype=np.int64)
        cell_free, host_free = self.cell_free[row], self.host_free[row]
        cell_after, host_after = cell_free - cell_use, host_free - host_use
        # min over Python lists: a few short arrays cost less as lists than as numpy reductions
        if (
            min(cell_use.ravel().tolist() + host_use.tolist()) < 0
            or min(cell_after.ravel().tolist() + host_after.tolist()) < 0
        ):
            self.verify_fits(host, cell_use, host_use)  # raises, naming the resource
            raise ClaimError(f"footprint does not fit on host {host!r}")  # pragma: no cover
        cell_free[...] = cell_after
        host_free[...] = host_after
        alloc = Allocation(
            instance_id=instance_id,
            host=host,
            flavor=flavor,
            cell_use=cell_use,
            host_use=host_use,
            server_group=server_group,
            project=project,
            migratable=migratable,
        )
        return self._record(row, alloc)

    def _record(self, row: int, alloc: Allocation) -> Allocation:
        """The bookkeeping of a claim whose footprint is already taken from the free columns."""
        self.n_instances[row] += 1
        self.generation[row] += 1
        self._touch(row)
        return self._enter(row, alloc)

    def _enter(self, row: int, alloc: Allocation) -> Allocation:
        """A claim's entries beyond its columns and counters: its group's rows, the allocation."""
        if alloc.server_group is not None:
            rows = self.group_rows.setdefault(alloc.server_group, {})
            rows[row] = rows.get(row, 0) + 1
        self.allocations[alloc.instance_id] = alloc
        return alloc

    def verify_fits(self, host: str, cell_use: I64, host_use: I64) -> None:
        """Raise `ClaimError` naming the resource if this footprint does not fit on `host` now."""
        row = self.row(host)
        if (
            cell_use.dtype == host_use.dtype == np.int64
            and cell_use.shape == self.cell_free.shape[1:]
            and host_use.shape == self.host_free.shape[1:]
            and kernels.footprint_fits(self.cell_free, self.host_free, row, cell_use, host_use)
        ):
            return  # the common case, in one compiled pass; the details below name the failure
        if (cell_use < 0).any() or (host_use < 0).any():
            raise ClaimError(f"negative use on host {host!r}")
        if (cell_use <= self.cell_free[row]).all() and (host_use <= self.host_free[row]).all():
            return  # the common case; the details below are only for the error message
        cell_after = self.cell_cap[row] - self.cell_free[row] + cell_use
        over = np.argwhere(cell_after > self.cell_cap[row])
        if over.size:
            c, col = (int(x) for x in over[0])
            raise ClaimError(
                f"host {host!r} NUMA cell {c}: {cell_resource_name(col, self.device_types)} "
                f"would be {int(cell_after[c, col])} of {int(self.cell_cap[row, c, col])}"
            )
        host_after = self.host_cap[row] - self.host_free[row] + host_use
        over_h = np.flatnonzero(host_after > self.host_cap[row])
        if over_h.size:
            col = int(over_h[0])
            raise ClaimError(
                f"host {host!r}: {HOST_NAMES[col]} would be {int(host_after[col])} "
                f"of {int(self.host_cap[row, col])}"
            )

    def release(self, instance_id: str) -> Allocation:
        try:
            alloc = self.allocations.pop(instance_id)
        except KeyError:
            raise ClaimError(f"unknown instance {instance_id!r}") from None
        row = self.index[alloc.host]
        self.version += 1
        kernels.move_footprint(
            self.cell_free,
            self.host_free,
            row,
            alloc.cell_use,
            alloc.host_use,
            self.n_instances,
            self.generation,
            self.touched,
            self.version,
            1,
        )
        self._log_row(row)
        if alloc.server_group is not None:
            rows = self.group_rows[alloc.server_group]
            rows[row] -= 1
            if rows[row] == 0:
                del rows[row]
            if not rows:
                del self.group_rows[alloc.server_group]
        return alloc

    def unclaim(self, instance_id: str, generation: int) -> None:
        """Undo a tentative claim exactly, restoring the host's generation (no trace left)."""
        alloc = self.release(instance_id)
        self.generation[self.index[alloc.host]] = generation

    def claim_existing(self, inst: Instance) -> Allocation:
        """Claim an instance from a snapshot, at its stated cells when the snapshot says."""
        row = self.row(inst.host)
        spec = self.flavors.get(inst.flavor)
        if spec is None:
            raise SpecError(f"unknown flavor {inst.flavor!r}")
        cell_use = host_use = None
        if inst.numa is not None:
            d = self.demands[inst.flavor]
            cell_use, host_use = stated_use(d, inst.numa, self.cell_free[row], self.width)
        return self.claim(
            inst.id,
            inst.host,
            inst.flavor,
            cell_use,
            host_use,
            server_group=inst.server_group,
            project=inst.project,
            migratable=inst.migratable,
        )

    def snapshot_instances(self) -> list[Instance]:
        """Every allocation as a snapshot `Instance`, with its exact cells when it has a topology.

        Loading these back with the same hosts and flavors rebuilds the same footprints.
        """
        out = []
        for alloc in self.allocations.values():
            numa = stated_cells(self.demands[alloc.flavor], alloc.cell_use)
            out.append(
                Instance(
                    id=alloc.instance_id,
                    host=alloc.host,
                    flavor=alloc.flavor,
                    server_group=alloc.server_group,
                    project=alloc.project,
                    migratable=alloc.migratable,
                    numa=numa,
                )
            )
        return out

    def set_enabled(self, host: str, enabled: bool) -> None:
        row = self.row(host)
        self.enabled[row] = enabled
        self.generation[row] += 1
        self._touch(row)

    def set_heartbeat(self, host: str, when: float) -> bool:
        """Record a heartbeat; older timestamps never overwrite newer ones (returns False)."""
        row = self.row(host)
        if np.isnan(self.heartbeat[row]) or when > self.heartbeat[row]:
            self.heartbeat[row] = when
            return True
        return False

    def page_size_ok(self, spec: FlavorSpec, row: int | None = None) -> Mask:
        """Hosts (or the one `row`) whose huge-page size suits the flavor and divides each
        guest cell's memory."""
        page_kb = self.page_kb if row is None else self.page_kb[row : row + 1]
        if spec.page_size_kb == 0:  # small pages suit every host
            return self._everyone if row is None else np.ones(1, dtype=bool)
        page = page_kb.astype(np.int64)
        ok = page > 0 if spec.page_size_kb < 0 else page == spec.page_size_kb
        for shape in spec.cells:
            ok &= (shape.memory_mb * 1024) % np.maximum(page, 1) == 0
        return ok

    def copy(self) -> HostTable:
        """An independent snapshot: arrays copied, immutable records shared."""
        new = HostTable.__new__(HostTable)
        for key, value in self.__dict__.items():
            if key == "_everyone":
                new._everyone = value  # read-only, shared
            elif isinstance(value, np.ndarray):
                setattr(new, key, value.copy(order="K"))  # keep the resource-major layout
            elif key == "_derived":
                new._derived = dict(value)  # cached arrays are never written in place
            elif key == "_state":
                new._state = {}  # written in place: never shared
            elif key == "group_rows":
                new.group_rows = {g: dict(rows) for g, rows in value.items()}
            elif key in ("aggregate_meta", "capabilities"):
                setattr(new, key, {k: kv.copy() for k, kv in value.items()})
            elif isinstance(value, Vocabulary):
                setattr(new, key, Vocabulary(value.words))
            elif isinstance(value, dict | list):
                setattr(new, key, type(value)(value))
            else:
                setattr(new, key, value)
        return new

    def nbytes(self) -> int:
        """Bytes held in columns (the per-host memory figure of the benchmarks)."""
        total = sum(v.nbytes for v in self.__dict__.values() if isinstance(v, np.ndarray))
        total += sum(k.codes.nbytes for k in self.aggregate_meta.values())
        total += sum(k.codes.nbytes for k in self.capabilities.values())
        return int(total)
