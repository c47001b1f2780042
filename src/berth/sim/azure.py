"""The Azure VM packing trace sample (Protean, OSDI 2020; sizes from CoSpot, SoCC 2022).

Mapping to Berth (docs/simulator.md, "The Azure sample"):

* Each distinct (cores, ram) pair of the sample is one flavor, named ``az-c{cores}-r{ram}``.
  The sample's units are arbitrary but consistent (CoSpot's integer reconstruction): ``vcpus =
  ceil(cores / 2)`` and ``memory_mb = ram``. Cores are halved because Berth caps a flavor at
  4,096 vCPUs and the sample goes to 5,200 core units; every core value in the sample is even
  except 1 and 11 (231 of 52,509 VMs), which round up by half a unit. Everything else is exact.
* The column labelled ``vmTypeId`` is the priority: 0 regular (on-demand), 1 low priority
  (evictable): low-priority VMs are Berth's preemptible instances.
* Times are fractional days, converted to seconds. A negative start means the VM was already
  running when the 14-day window opened (placed during warm-up, reported apart); ``inf`` end
  means it outlived the window.
* The trace has no NUMA detail: Protean and CoSpot model a machine as a two-dimensional bin
  (cores, memory). Hosts are therefore one NUMA cell and flavors float (no ``hw:numa_nodes``),
  which is exactly that model; inventing two cells would add constraints the trace lacks.
* Machine capacities come from CoSpot's ``server_vm_cores_ram.json`` in the same units (see
  `berth.sim.hosttypes`, host types ``azure-1`` ... ``azure-16``).

The data are CC-BY 4.0; cite both papers wherever they are used (`CITATION`).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
from pathlib import Path

import numpy as np

from berth.core.model import Flavor
from berth.sim.trace import DAY, Business, Trace, TraceError

CITATION = (
    "Azure VM packing trace 2020, 1% sample (CC-BY 4.0): Ori Hadary et al., "
    '"Protean: VM Allocation Service at Scale", OSDI 2020; integer sizes from '
    'Syed M. Iqbal et al., "CoSpot: A Cooperative VM Allocation Framework for Increased '
    'Revenue from Spot Instances", SoCC 2022.'
)

SAMPLE = "relevant-vm-1pcnt_0.csv.gz"
COLUMNS = ("vmId", "tenantId", "cores", "ram", "vmTypeId", "starttime", "endtime")
DATA_ENV = "BERTH_AZURE_TRACE_DIR"
_DIR = "azure-packing-2020"


def find_azure_dir(explicit: str | Path | None = None) -> Path:
    """The directory holding the sample: `explicit` if given, else $BERTH_AZURE_TRACE_DIR if
    set, else ``azure-packing-2020/`` under ``./data``, ``./shared/data`` or ``../shared/data``
    (from the current directory, then from the repository).
    """
    candidates: list[Path] = []
    env = os.environ.get(DATA_ENV)
    if explicit is not None:
        candidates.append(Path(explicit))
    elif env:
        candidates.append(Path(env))
    else:
        repo = Path(__file__).resolve().parents[3]
        for base in (Path.cwd(), repo):
            for rel in ("data", "shared/data", "../shared/data"):
                candidates.append(base / rel / _DIR)
    for c in candidates:
        if (c / SAMPLE).exists():
            return c.resolve()
    tried = ", ".join(str(c) for c in candidates[:4])
    raise TraceError(
        f"Azure trace sample {SAMPLE} not found (tried {tried}, ...); "
        f"set ${DATA_ENV} to its directory"
    )


def flavor_name(cores: float, ram: float) -> str:
    return f"az-c{cores:g}-r{ram:g}"


def read_azure(directory: str | Path | None = None) -> Trace:
    """Read the 1% sample into a `Trace` (times in seconds, window [0, 14 days))."""
    root = find_azure_dir(directory)
    path = root / SAMPLE
    ids: list[str] = []
    start: list[float] = []
    end: list[float] = []
    flavor: list[int] = []
    business: list[int] = []
    index: dict[tuple[float, float], int] = {}
    flavors: dict[str, Flavor] = {}
    last = -math.inf
    with io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="") as stream:
        reader = csv.reader(stream)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != COLUMNS:
            raise TraceError(f"{path}:1: expected columns {','.join(COLUMNS)}, got {header}")
        for row in reader:
            line = reader.line_num
            try:
                vm, _tenant, cores_s, ram_s, prio_s, t0_s, t1_s = row
                cores, ram = float(cores_s), float(ram_s)
                prio = int(float(prio_s))
                t0, t1 = float(t0_s) * DAY, float(t1_s) * DAY
            except ValueError as exc:
                raise TraceError(f"{path}:{line}: {exc}") from None
            if cores <= 0 or ram <= 0:
                raise TraceError(f"{path}:{line}: cores and ram must be positive")
            if prio not in (0, 1):
                raise TraceError(f"{path}:{line}: priority (vmTypeId) must be 0 or 1")
            if t0 < last:
                raise TraceError(f"{path}:{line}: rows must be sorted by starttime")
            if t1 < t0:
                raise TraceError(f"{path}:{line}: endtime is before starttime")
            last = t0
            key = (cores, ram)
            k = index.get(key)
            if k is None:
                k = index[key] = len(index)
                name = flavor_name(cores, ram)
                flavors[name] = Flavor(
                    name=name, vcpus=math.ceil(cores / 2), memory_mb=math.ceil(ram)
                )
            ids.append(vm)
            start.append(t0)
            end.append(t1)
            flavor.append(k)
            business.append(int(Business.PREEMPTIBLE if prio == 1 else Business.ON_DEMAND))
    starts = np.array(start, dtype=np.float64)
    return Trace(
        name="azure",
        ids=ids,
        start=starts,
        end=np.array(end, dtype=np.float64),
        flavor=np.array(flavor, dtype=np.int32),
        business=np.array(business, dtype=np.int8),
        flavor_names=list(flavors),
        flavors=flavors,
        window_start=0.0,
        horizon=float(math.ceil(starts.max() / DAY) * DAY),
        window=DAY,
        source=str(path),
        citation=CITATION,
        notes=[
            "vcpus = ceil(cores/2), memory_mb = ram (CoSpot units); hosts are one NUMA cell",
            "priority 1 (low) VMs are preemptible; VMs with negative start are placed at warm-up",
        ],
    )
