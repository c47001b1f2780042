"""A flavor's consumption as vectors in the table's column layout (see `resources`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from berth.core.flavors import FlavorSpec, NumaMode, PciPolicy
from berth.core.model import DiskKind
from berth.core.resources import (
    C_HUGE,
    C_MEM,
    C_PCPU,
    C_VCPU,
    CELL_BASE,
    H_HDD,
    H_MEM,
    H_SSD,
    H_VCPU,
    HOST_RESOURCES,
)

I64 = npt.NDArray[np.int64]
Cols = tuple[tuple[int, int], ...]
"""(column, amount) for each column a vector asks for (its nonzero entries)."""


@dataclass(frozen=True)
class RowDemand:
    """A `Demand`'s constants as Python integers, for `berth.core.numa.scalar` (one host at a
    time): the columns each vector asks for, precomputed once per flavor."""

    mode: NumaMode
    host: Cols
    host_use: list[int]  # the host columns, full width
    pci: Cols  # host-level PCI, by cell column
    units: Cols  # cells[0]: what SINGLE and EVEN count per cell
    cells: tuple[list[int], ...]  # the cells rows, full width
    fixed: tuple[tuple[int, int, int], ...]  # FIXED: (column, a, b) where a + b != 0
    flex: tuple[tuple[int, int, int], ...]  # FLEX: (column, total, per-cell minimum)
    width: int
    source: Demand = field(repr=False, compare=False)  # for hosts of more than two cells


@dataclass(frozen=True)
class PackedDemand:
    """`RowDemand` as int64 arrays, for the compiled count and placement (`numa.compiled`):
    ``mode`` the `NumaMode` value, (column, amount) pairs for ``host``, ``pci`` and ``units``,
    the (column, a, b) / (column, total, minimum) triples of ``fixed`` / ``flex`` (shapes
    (k, 2) and (k, 3), k possibly 0), the guest ``cells`` rows (full width) and ``host_use``."""

    mode: int
    host: I64
    pci: I64
    units: I64
    fixed: I64
    flex: I64
    cells: I64
    host_use: I64


@dataclass(frozen=True)
class PackedReferences:
    """Several `PackedDemand` (the references a weigher protects), concatenated pack by pack:
    reference f's pairs of ``host`` are ``host[at[f, 0]:at[f, 1]]``, of ``pci``
    ``pci[at[f, 2]:at[f, 3]]``, then ``units``, ``fixed`` and ``flex`` likewise."""

    modes: I64
    vcpus: I64
    at: I64
    host: I64
    pci: I64
    units: I64
    fixed: I64
    flex: I64

    @classmethod
    def of(cls, refs: list[PackedDemand], vcpus: list[int]) -> PackedReferences:
        packs = {}
        at = np.zeros((len(refs), 10), dtype=np.int64)
        for k, (name, width) in enumerate(
            [("host", 2), ("pci", 2), ("units", 2), ("fixed", 3), ("flex", 3)]
        ):
            parts = [getattr(r, name) for r in refs]
            ends = np.cumsum([len(p) for p in parts])
            at[:, 2 * k + 1] = ends
            at[:, 2 * k] = ends - [len(p) for p in parts]
            packs[name] = np.concatenate(parts).reshape(-1, width) if parts else _pairs((), width)
        return cls(
            modes=np.array([r.mode for r in refs], dtype=np.int64),
            vcpus=np.array(vcpus, dtype=np.int64),
            at=at,
            **packs,
        )


def _pairs(items: tuple[tuple[int, ...], ...], width: int) -> I64:
    return np.array(items, dtype=np.int64).reshape(len(items), width)


def _nonzero(vec: list[int], base: int = 0) -> Cols:
    return tuple((base + i, v) for i, v in enumerate(vec) if v)


@dataclass(frozen=True, eq=False)
class Demand:
    """What one instance of a flavor takes, ready for vectorised arithmetic.

    ``cells`` holds the guest cells' vectors: one row for SINGLE, two for EVEN and FIXED, and for
    FLEX the per-cell minimums (two equal rows) while ``total`` holds the whole guest.
    ``pci`` is the host-level PCI demand (devices that may come from any of the guest's cells).
    EVEN and FIXED guests of k cells have k rows.
    """

    spec: FlavorSpec
    host: I64
    cells: I64
    total: I64
    pci: I64

    @property
    def mode(self) -> NumaMode:
        return self.spec.numa_mode

    @property
    def guest_cells(self) -> int:
        """How many host cells one guest takes (0 when floating)."""
        mode = self.mode
        return 0 if mode == NumaMode.NONE else 2 if mode == NumaMode.FLEX else len(self.cells)

    @property
    def cpu_column(self) -> int:
        return C_PCPU if self.spec.dedicated_cpus else C_VCPU

    @property
    def mem_column(self) -> int:
        return C_HUGE if self.spec.hugepages else C_MEM

    @cached_property
    def rows(self) -> RowDemand:
        """The same demand as Python integers (computed on first use, then kept)."""
        cells = tuple(row.tolist() for row in self.cells)
        total = self.total.tolist()
        fixed: tuple[tuple[int, int, int], ...] = ()
        if self.mode == NumaMode.FIXED:
            a, b = cells[0], cells[1]
            fixed = tuple((c, a[c], b[c]) for c in range(len(a)) if a[c] + b[c])
        flex: tuple[tuple[int, int, int], ...] = ()
        if self.mode == NumaMode.FLEX:
            flex = tuple((c, total[c], cells[0][c]) for c in range(CELL_BASE) if total[c])
        return RowDemand(
            mode=self.mode,
            host=_nonzero(self.host.tolist()),
            host_use=self.host.tolist(),
            pci=_nonzero(self.pci.tolist(), CELL_BASE),
            units=_nonzero(cells[0]) if cells else (),
            cells=cells,
            fixed=fixed,
            flex=flex,
            width=len(total),
            source=self,
        )

    @cached_property
    def packed(self) -> PackedDemand:
        """`rows` as arrays for the compiled count (computed on first use, then kept)."""
        rd = self.rows
        return PackedDemand(
            mode=int(rd.mode),
            host=_pairs(rd.host, 2),
            pci=_pairs(rd.pci, 2),
            units=_pairs(rd.units, 2),
            fixed=_pairs(rd.fixed, 3),
            flex=_pairs(rd.flex, 3),
            cells=self.cells.copy() if self.cells.size else np.zeros((0, rd.width), np.int64),
            host_use=self.host.copy(),
        )

    def cells_used(self, cell_use: I64) -> list[tuple[int, int, int]]:
        """(cell, vCPUs, memory MB) for each host cell a footprint uses; empty when floating."""
        cpu, mem = self.cpu_column, self.mem_column
        return [
            (c, int(cell_use[c, cpu]), int(cell_use[c, mem]))
            for c in range(cell_use.shape[0])
            if cell_use[c, cpu] or cell_use[c, mem]
        ]


def build_demand(spec: FlavorSpec, device_types: list[str]) -> Demand:
    """Vectorise `spec` for a table whose PCI columns are `device_types` (all must be known)."""
    width = CELL_BASE + len(device_types)
    host = np.zeros(HOST_RESOURCES, dtype=np.int64)
    if not spec.dedicated_cpus:
        host[H_VCPU] = spec.vcpus
    if not spec.hugepages:
        host[H_MEM] = spec.memory_mb
    host[H_SSD if spec.disk_kind == DiskKind.SSD else H_HDD] = spec.disk_gb

    cpu = C_PCPU if spec.dedicated_cpus else C_VCPU
    mem = C_HUGE if spec.hugepages else C_MEM
    cells = np.zeros((len(spec.cells), width), dtype=np.int64)
    for i, shape in enumerate(spec.cells):
        cells[i, cpu] = shape.vcpus
        cells[i, mem] = shape.memory_mb
    total = np.zeros(width, dtype=np.int64)
    total[cpu] = spec.vcpus
    total[mem] = spec.memory_mb

    pci = np.zeros(len(device_types), dtype=np.int64)
    for device, count in spec.pci.items():
        pci[device_types.index(device)] = count
    if spec.numa_mode == NumaMode.SINGLE and spec.pci_policy == PciPolicy.REQUIRED:
        cells[0, CELL_BASE:] = pci
        total[CELL_BASE:] = pci
        pci = np.zeros_like(pci)
    return Demand(spec=spec, host=host, cells=cells, total=total, pci=pci)


@dataclass(frozen=True, eq=False)
class FixedPlan:
    """A footprint that does not depend on the host, as read-only arrays shared by every
    allocation of the flavor."""

    cell_use: I64
    host_use: I64

    @classmethod
    def of(cls, cell_use: I64, host_use: I64) -> FixedPlan:
        cells = np.array(cell_use, dtype=np.int64)
        hosts = np.array(host_use, dtype=np.int64)
        cells.flags.writeable = False
        hosts.flags.writeable = False
        return cls(cells, hosts)
