"""Flavor extra specs parsed once into a typed `FlavorSpec`.

Nova's vocabulary is used where one exists (`hw:cpu_policy`, `hw:numa_nodes`, `hw:numa_cpus.N`,
`hw:numa_mem.N`, `hw:mem_page_size`, `hw:pci_numa_affinity_policy`, `pci_passthrough:alias`,
`trait:X`, `aggregate_instance_extra_specs:K`, `capabilities:K`, `trust:trusted_host`).
Berth adds one documented spec family for uneven two-cell guests (docs/flavors.md):

* `berth:numa_split=flexible` — the guest's vCPUs and memory may be split unevenly over two host
  cells, each cell getting at least `berth:numa_min_vcpus` vCPUs (default vcpus // 4, at least 1)
  and `berth:numa_min_memory_mb` MB (default memory scaled by the same share).

Parsing happens once per flavor when a fleet is loaded; the hot path never reads strings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

from berth.core.errors import SpecError
from berth.core.model import DiskKind, Flavor
from berth.core.spec_ops import OPERATORS, match

_Bad = Callable[[str, str], SpecError]
"""Builds the error for one extra-spec key: (key, why) -> SpecError."""


MAX_GUEST_CELLS = 8
"""The most guest NUMA cells a flavor may ask for (`hw:numa_nodes`), as many as a host has."""


class NumaMode(IntEnum):
    NONE = 0  # floats over the whole host (no guest NUMA topology)
    SINGLE = 1  # one guest cell on one host cell
    EVEN = 2  # k guest cells (2 to 8) of equal size on k distinct host cells
    FIXED = 3  # k guest cells of stated, unequal sizes (hw:numa_cpus.N / hw:numa_mem.N)
    FLEX = 4  # two guest cells, split chosen by Berth within stated minimums


class PciPolicy(IntEnum):
    REQUIRED = 0  # devices must sit in a host cell the guest uses
    PREFERRED = 1  # any cell, the guest's own first


@dataclass(frozen=True)
class CellShape:
    vcpus: int
    memory_mb: int


@dataclass(frozen=True)
class SpecMatch:
    """One `key op value` requirement against host aggregate metadata or capabilities.

    `req` is the spec's text as written; it is evaluated exactly as Nova's
    `extra_specs_ops.match` does (`spec_ops.match`). `op` and `value` name it in explanations.
    `each_value`: the host's text is a comma-joined set of values (aggregate metadata, which
    Nova splits at commas and matches value by value); else one value (a capability).
    """

    key: str
    op: str
    value: str
    req: str = ""
    each_value: bool = True

    def matches(self, actual: str) -> bool:
        if self.each_value:
            return any(match(v, self.req) for v in actual.split(","))
        return match(actual, self.req)


@dataclass(frozen=True)
class FlavorSpec:
    name: str
    vcpus: int
    memory_mb: int
    disk_gb: int
    disk_kind: DiskKind
    dedicated_cpus: bool
    page_size_kb: int  # 0 = small pages, -1 = any huge page size, else the exact size
    numa_mode: NumaMode
    cells: tuple[CellShape, ...]  # SINGLE: 1, EVEN/FIXED: k (2..8), FLEX: the two minimums
    pci: dict[str, int]  # device type -> count
    pci_policy: PciPolicy
    required_traits: frozenset[str]
    forbidden_traits: frozenset[str]
    aggregate_specs: tuple[SpecMatch, ...]
    capability_specs: tuple[SpecMatch, ...]
    trusted: bool
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def hugepages(self) -> bool:
        return self.page_size_kb != 0

    @property
    def numa(self) -> bool:
        return self.numa_mode != NumaMode.NONE


_PAGE_SIZES = {
    "small": 0,
    "any": 0,  # 'any' always runs on small pages here: they exist on every host.
    "large": -1,
    "2mb": 2048,
    "2048": 2048,
    "2048kb": 2048,
    "1gb": 1048576,
    "1048576": 1048576,
    "1048576kb": 1048576,
}


def parse_flavor(flavor: Flavor, pci_aliases: dict[str, str]) -> FlavorSpec:
    """Turn a flavor's extra specs into a `FlavorSpec`; `SpecError` names the offending key."""
    specs = flavor.extra_specs
    where = f"flavor {flavor.name!r}: extra_specs"

    def bad(key: str, why: str) -> SpecError:
        return SpecError(f"{where}[{key!r}]: {why}")

    _refuse_unsupported(specs, bad)
    policy = specs.get("hw:cpu_policy", "shared").lower()
    if policy not in ("shared", "dedicated"):
        raise bad("hw:cpu_policy", f"must be 'shared' or 'dedicated', got {policy!r}")
    dedicated = policy == "dedicated"

    page_raw = specs.get("hw:mem_page_size", "small").lower()
    if page_raw not in _PAGE_SIZES:
        raise bad("hw:mem_page_size", f"unknown page size {page_raw!r}")
    page_size_kb = _PAGE_SIZES[page_raw]

    mode, cells = _numa_shape(flavor, dedicated, page_size_kb, bad)

    pci = _parse_pci(specs.get("pci_passthrough:alias"), pci_aliases, bad)
    pci_policy = _pci_policy(specs, bad)

    required, forbidden, aggregate_specs, capability_specs = _matches(specs, bad)

    trusted_raw = specs.get("trust:trusted_host", "").lower()
    if trusted_raw not in ("", "trusted", "untrusted"):
        raise bad("trust:trusted_host", f"must be 'trusted' or 'untrusted', got {trusted_raw!r}")

    disk_gb = flavor.root_gb + flavor.ephemeral_gb + -(-flavor.swap_mb // 1024)
    return FlavorSpec(
        name=flavor.name,
        vcpus=flavor.vcpus,
        memory_mb=flavor.memory_mb,
        disk_gb=disk_gb,
        disk_kind=flavor.disk_kind,
        dedicated_cpus=dedicated,
        page_size_kb=page_size_kb,
        numa_mode=mode,
        cells=cells,
        pci=pci,
        pci_policy=pci_policy,
        required_traits=frozenset(required),
        forbidden_traits=frozenset(forbidden),
        aggregate_specs=tuple(aggregate_specs),
        capability_specs=tuple(capability_specs),
        trusted=trusted_raw == "trusted",
        extra=dict(specs),
    )


_UNSUPPORTED: dict[str, tuple[frozenset[str], str]] = {
    # key -> (values that change nothing here, why the others are refused)
    "hw:cpu_thread_policy": (
        frozenset({"prefer"}),
        "Berth does not model SMT siblings; only 'prefer' (no placement constraint) is accepted",
    ),
    "hw:emulator_threads_policy": (
        frozenset({"share"}),
        "'isolate' takes one more pinned CPU, which Berth does not count",
    ),
    "hw:cpu_dedicated_mask": (frozenset(), "mixed shared/pinned guests are not supported"),
    "hw:mem_encryption": (frozenset({"false", "no", "0"}), "memory encryption is not modelled"),
    "hw:vpmem": (frozenset(), "persistent memory is not modelled"),
    "accel:device_profile": (frozenset(), "accelerator profiles are not modelled"),
}


def _refuse_unsupported(specs: dict[str, str], bad: _Bad) -> None:
    """Refuse, naming the key, every spec that would change placement in Nova but that Berth
    does not model: never place as if it were absent (docs/flavors.md)."""
    for key, value in specs.items():
        if ":" not in key:
            raise bad(
                key,
                "an unscoped spec is matched by Nova against both aggregate metadata and host "
                "attributes; write aggregate_instance_extra_specs:KEY or capabilities:KEY",
            )
        if key.startswith("resources"):
            raise bad(key, "resource-class requests (resources:CLASS=N) are not modelled")
        if key.startswith("capabilities:") and key.count(":") > 1:
            raise bad(key, "nested capabilities (capabilities:A:B) are not modelled")
        refused = _UNSUPPORTED.get(key)
        if refused is not None and value.strip().lower() not in refused[0]:
            raise bad(key, f"{value!r} is not supported: {refused[1]}")


def _numa_shape(
    flavor: Flavor, dedicated: bool, page_size_kb: int, bad: _Bad
) -> tuple[NumaMode, tuple[CellShape, ...]]:
    """The guest NUMA mode and its cell shapes (docs/numa.md): none, one cell, an even or
    explicit two-cell split, or a flexible one with per-cell minimums."""
    specs = flavor.extra_specs
    nodes_raw = specs.get("hw:numa_nodes")
    if nodes_raw is None:
        nodes = 1 if (dedicated or page_size_kb != 0) else 0
    else:
        if nodes_raw not in tuple(str(k) for k in range(1, MAX_GUEST_CELLS + 1)):
            raise bad("hw:numa_nodes", f"must be 1 to {MAX_GUEST_CELLS}, got {nodes_raw!r}")
        nodes = int(nodes_raw)

    split = specs.get("berth:numa_split", "even").lower()
    if split not in ("even", "flexible"):
        raise bad("berth:numa_split", f"must be 'even' or 'flexible', got {split!r}")
    explicit = [k for k in specs if k.startswith(("hw:numa_cpus.", "hw:numa_mem."))]

    cells: tuple[CellShape, ...] = ()
    if nodes == 0:
        mode = NumaMode.NONE
    elif nodes == 1:
        mode = NumaMode.SINGLE
        cells = (CellShape(flavor.vcpus, flavor.memory_mb),)
    elif split == "flexible":
        if nodes != 2:
            raise bad("berth:numa_split", "a flexible split is over exactly two cells")
        if explicit:
            raise bad(explicit[0], "cannot be combined with berth:numa_split=flexible")
        mode = NumaMode.FLEX
        cells = (_flex_minimums(flavor, bad),) * 2
    elif explicit:
        mode, cells = _explicit_cells(flavor, nodes, bad)
    else:
        if flavor.vcpus % nodes or flavor.memory_mb % nodes:
            raise bad(
                "hw:numa_nodes",
                f"an even {nodes}-cell split needs vcpus and memory_mb divisible by {nodes}; "
                "give hw:numa_cpus.N/hw:numa_mem.N"
                + (" or berth:numa_split=flexible" if nodes == 2 else ""),
            )
        mode = NumaMode.EVEN
        cells = (CellShape(flavor.vcpus // nodes, flavor.memory_mb // nodes),) * nodes
    return mode, cells


def _pci_policy(specs: dict[str, str], bad: _Bad) -> PciPolicy:
    pci_policy_raw = specs.get("hw:pci_numa_affinity_policy", "required").lower()
    if pci_policy_raw in ("required", "legacy"):
        return PciPolicy.REQUIRED
    if pci_policy_raw in ("preferred", "socket"):
        return PciPolicy.PREFERRED
    raise bad("hw:pci_numa_affinity_policy", f"unknown policy {pci_policy_raw!r}")


def _matches(
    specs: dict[str, str], bad: _Bad
) -> tuple[set[str], set[str], list[SpecMatch], list[SpecMatch]]:
    """Required and forbidden traits, and the aggregate and capability spec matches."""
    required: set[str] = set()
    forbidden: set[str] = set()
    aggregate_specs: list[SpecMatch] = []
    capability_specs: list[SpecMatch] = []
    for key, value in specs.items():
        if key.startswith("trait:"):
            trait = key.removeprefix("trait:")
            if value.lower() == "required":
                required.add(trait)
            elif value.lower() == "forbidden":
                forbidden.add(trait)
            else:
                raise bad(key, f"must be 'required' or 'forbidden', got {value!r}")
        elif key.startswith("aggregate_instance_extra_specs:"):
            aggregate_specs.append(_spec_match(key.split(":", 1)[1], value, each_value=True))
        elif key.startswith("capabilities:"):
            capability_specs.append(_spec_match(key.split(":", 1)[1], value, each_value=False))
    return required, forbidden, aggregate_specs, capability_specs


def _flex_minimums(flavor: Flavor, bad: _Bad) -> CellShape:
    specs = flavor.extra_specs
    if flavor.vcpus < 2:
        raise bad("berth:numa_split", "a two-cell guest needs at least 2 vcpus")
    min_vcpus = _int_spec(specs, "berth:numa_min_vcpus", max(1, flavor.vcpus // 4), bad)
    if not 1 <= min_vcpus <= flavor.vcpus // 2:
        raise bad("berth:numa_min_vcpus", f"must be between 1 and {flavor.vcpus // 2}")
    default_mem = max(1, flavor.memory_mb * min_vcpus // flavor.vcpus)
    min_mem = _int_spec(specs, "berth:numa_min_memory_mb", default_mem, bad)
    if not 1 <= min_mem <= flavor.memory_mb // 2:
        raise bad("berth:numa_min_memory_mb", f"must be between 1 and {flavor.memory_mb // 2}")
    return CellShape(min_vcpus, min_mem)


def _explicit_cells(
    flavor: Flavor, nodes: int, bad: _Bad
) -> tuple[NumaMode, tuple[CellShape, ...]]:
    specs = flavor.extra_specs
    for key in specs:
        if key.startswith(("hw:numa_cpus.", "hw:numa_mem.")):
            index = key.rsplit(".", 1)[1]
            if not index.isdigit() or int(index) >= nodes:
                raise bad(key, f"names no guest cell (cells 0-{nodes - 1})")
    seen: set[int] = set()
    shapes = []
    for cell in range(nodes):
        cpus_key, mem_key = f"hw:numa_cpus.{cell}", f"hw:numa_mem.{cell}"
        if cpus_key not in specs or mem_key not in specs:
            missing = cpus_key if cpus_key not in specs else mem_key
            raise bad(missing, "an explicit split needs numa_cpus and numa_mem for every cell")
        cpus = _cpu_list(specs[cpus_key], lambda why, k=cpus_key: bad(k, why))  # type: ignore[misc]
        if cpus & seen:
            raise bad(cpus_key, "overlaps the other cell's CPUs")
        seen |= cpus
        shapes.append(CellShape(len(cpus), _int_spec(specs, mem_key, 0, bad)))
    if seen != set(range(flavor.vcpus)):
        raise bad("hw:numa_cpus.0", f"cells must cover guest CPUs 0-{flavor.vcpus - 1} exactly")
    if sum(s.memory_mb for s in shapes) != flavor.memory_mb:
        raise bad("hw:numa_mem.0", f"cell memory must add up to {flavor.memory_mb}")
    if min(s.memory_mb for s in shapes) < 1:
        raise bad("hw:numa_mem.0", "each cell needs memory")
    mode = NumaMode.EVEN if len(set(shapes)) == 1 else NumaMode.FIXED
    return mode, tuple(shapes)


def _int_spec(specs: dict[str, str], key: str, default: int, bad: _Bad) -> int:
    raw = specs.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise bad(key, f"must be a whole number, got {raw!r}") from None


def _cpu_list(raw: str, bad: Callable[[str], SpecError]) -> set[int]:
    out: set[int] = set()
    try:
        for part in raw.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                out.update(range(lo, hi + 1))
            else:
                out.add(int(part))
    except ValueError:
        raise bad(f"bad CPU list {raw!r}") from None
    return out


def _parse_pci(raw: str | None, aliases: dict[str, str], bad: _Bad) -> dict[str, int]:
    if not raw:
        return {}
    out: dict[str, int] = {}
    for part in raw.split(","):
        name, _, count_raw = part.strip().partition(":")
        try:
            count = int(count_raw) if count_raw else 1
        except ValueError:
            raise bad("pci_passthrough:alias", f"bad count in {part!r}") from None
        if count < 1:
            raise bad("pci_passthrough:alias", f"count must be positive in {part!r}")
        device = aliases.get(name, name)
        out[device] = out.get(device, 0) + count
    return out


def _spec_match(key: str, raw: str, *, each_value: bool) -> SpecMatch:
    words = raw.split()
    if words and (words[0] in OPERATORS or words[0] == "<or>"):
        return SpecMatch(key, words[0], " ".join(words[1:]), raw, each_value)
    return SpecMatch(key, "s==", raw, raw, each_value)  # Nova: a bare value is string equality
