"""A seeded synthetic day of a 360-like cloud (docs/simulator.md, "Synthetic day").

What it models, from the 360 Cloud scheduler's description (MISSION B1-B5, B11):

* **Topology**: `idcs` IDCs (availability zones) and `clusters` clusters shared out over them
  in proportion to IDC popularity (0.35 / 0.25 / 0.2 / 0.1 / ..., normalised; at least one
  each), so that "N hosts per cluster" gives every IDC capacity in line with its demand.
  Requests name an IDC.
* **Flavor catalogue**: families c (compute, 2 GiB per vCPU), g (general, 4 GiB), m (memory,
  8 GiB), d (local HDD, 4 GiB + 50 GB HDD per vCPU), i (local SSD, 8 GiB + 50 GB SSD per vCPU,
  trait CUSTOM_POOL_LOCAL_SSD), n (network-enhanced DPDK: pinned CPUs, 1 GiB huge pages,
  4 GiB per vCPU, trait CUSTOM_POOL_DPDK); families c, g, m, d forbid both pool traits, so
  each pool keeps its hosts (B1); sizes 2, 4, 8, 16, 32 vCPUs (``large`` ...
  ``8xlarge``); variants ``.numa1`` (one guest NUMA node, at most 128 GiB) and ``.numa2``
  (two, sizes >= 4).
* **Business types** (B5): on-demand 70 % of creation events (single-NUMA 70 %, dual-NUMA
  20 %, DPDK 10 %), auto-scaling 20 % (single-NUMA only, families c and g, bursts of 1-6 VMs),
  preemptible 10 % (dual-NUMA only).
* **Deployment sets** (B4): 12 % of on-demand creation events create a set of 2-8 VMs of one
  flavor that must sit on distinct hosts (anti-affinity, one per host).
* **Arrivals**: a non-homogeneous Poisson process with a diurnal rate
  ``lambda(t) ~ 1 + 0.6 cos(2 pi (t - 15h) / 24h)`` (peak mid-afternoon, trough at 3 a.m.),
  scaled so that a day has `creations_per_day` VMs on average (default 3,700, as 360
  reports), counting every VM of a burst or set.
* **Lifetimes** (heavy-tailed): on-demand 30 % log-normal (median 2 h, sigma 1.2), 50 %
  log-normal (median 1 day, sigma 1.2), 20 % Pareto (alpha 1.2, minimum 5 days); auto-scaling
  log-normal (median 3 h, sigma 1.0); preemptible log-normal (median 2 h, sigma 1.3).
* **Warm start**: the same process runs for `history_days` before the day; VMs still alive at
  time 0 are the initial population (negative start, placed during warm-up), so the day starts
  in steady state; deletions during the day come from both.

Sizes: size shares 2: 35 %, 4: 30 %, 8: 20 %, 16: 10 %, 32: 5 %; family shares c 25 %,
g 35 %, m 20 %, d 12 %, i 8 % (the DPDK share is taken by family n). Everything is drawn from
one `numpy.random.Generator` seeded with `seed`: the same seed gives the same trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from berth.core.model import DiskKind, Flavor, GroupPolicy, ServerGroup
from berth.sim.trace import DAY, HOUR, Business, Trace, TraceError

GIB = 1024
SIZES = (2, 4, 8, 16, 32)
SIZE_NAMES = {2: "large", 4: "xlarge", 8: "2xlarge", 16: "4xlarge", 32: "8xlarge"}
SIZE_SHARE = (0.35, 0.30, 0.20, 0.10, 0.05)
FAMILIES = ("c", "g", "m", "d", "i")
FAMILY_SHARE = (0.25, 0.35, 0.20, 0.12, 0.08)
MEM_PER_VCPU = {"c": 2, "g": 4, "m": 8, "d": 4, "i": 8, "n": 4}
IDC_NAMES = ("bj-a", "bj-b", "sh-a", "gz-a", "sz-a", "wh-a", "cd-a", "xa-a")
IDC_WEIGHTS = (0.35, 0.25, 0.2, 0.1, 0.05, 0.03, 0.01, 0.01)


@dataclass(frozen=True)
class SyntheticConfig:
    seed: int = 0
    creations_per_day: float = 3700.0
    days: float = 1.0
    history_days: float = 60.0
    idcs: int = 4
    clusters: int = 8
    """Clusters in all, shared out over the IDCs by popularity (at least one each)."""
    on_demand: float = 0.70
    auto_scaling: float = 0.20
    preemptible: float = 0.10
    deployment_set_share: float = 0.12
    diurnal_amplitude: float = 0.6
    peak_hour: float = 15.0


def catalogue() -> list[Flavor]:
    """Every flavor the generator can ask for (names like ``g3.2xlarge.numa2``)."""
    out: list[Flavor] = []
    for fam in (*FAMILIES, "n"):
        for size in SIZES:
            for nodes in (1, 2):
                if nodes == 2 and size < 4:
                    continue
                specs: dict[str, str] = {"hw:numa_nodes": str(nodes)}
                disk = 0
                kind = DiskKind.HDD
                if fam in ("c", "g", "m", "d"):  # pools are isolated by trait (B1)
                    specs["trait:CUSTOM_POOL_LOCAL_SSD"] = "forbidden"
                    specs["trait:CUSTOM_POOL_DPDK"] = "forbidden"
                if fam == "d":
                    disk = 50 * size
                elif fam == "i":
                    disk, kind = 50 * size, DiskKind.SSD
                    specs["trait:CUSTOM_POOL_LOCAL_SSD"] = "required"
                elif fam == "n":
                    specs.update(
                        {
                            "hw:cpu_policy": "dedicated",
                            "hw:mem_page_size": "1GB",
                            "trait:CUSTOM_POOL_DPDK": "required",
                        }
                    )
                out.append(
                    Flavor(
                        name=f"{fam}3.{SIZE_NAMES[size]}.numa{nodes}",
                        vcpus=size,
                        memory_mb=size * MEM_PER_VCPU[fam] * GIB,
                        ephemeral_gb=disk,
                        disk_kind=kind,
                        extra_specs=specs,
                    )
                )
    return out


def _rate(t: np.ndarray, cfg: SyntheticConfig) -> np.ndarray:
    """Relative creation-event rate at times t (seconds), mean 1 over a day."""
    phase = 2 * math.pi * ((t / HOUR) - cfg.peak_hour) / 24.0
    return 1.0 + cfg.diurnal_amplitude * np.cos(phase)


def _lifetimes(rng: np.random.Generator, business: np.ndarray) -> np.ndarray:
    n = business.size
    out = np.empty(n)
    od = business == Business.ON_DEMAND
    k = int(od.sum())
    mix = rng.random(k)
    short = rng.lognormal(math.log(2 * HOUR), 1.2, k)
    medium = rng.lognormal(math.log(DAY), 1.2, k)
    long = 5 * DAY * (1 + rng.pareto(1.2, k))
    out[od] = np.where(mix < 0.3, short, np.where(mix < 0.8, medium, long))
    auto = business == Business.AUTO_SCALING
    out[auto] = rng.lognormal(math.log(3 * HOUR), 1.0, int(auto.sum()))
    pre = business == Business.PREEMPTIBLE
    out[pre] = rng.lognormal(math.log(2 * HOUR), 1.3, int(pre.sum()))
    return np.minimum(out, 3 * 365 * DAY)


def _clusters_per_idc(cfg: SyntheticConfig) -> list[int]:
    """Largest-remainder share of `cfg.clusters` by IDC weight, at least one per IDC."""
    w = np.array(IDC_WEIGHTS[: cfg.idcs])
    total = max(cfg.clusters, cfg.idcs)
    raw = w / w.sum() * total
    out = np.maximum(1, np.floor(raw).astype(int))
    while out.sum() < total:
        out[int(np.argmax(raw - out))] += 1
    while out.sum() > total:
        out[int(np.argmax(np.where(out > 1, out - raw, -np.inf)))] -= 1
    return [int(x) for x in out]


def generate(cfg: SyntheticConfig | None = None) -> Trace:
    """The trace: `cfg.days` of requests after `cfg.history_days` of warm-up history."""
    cfg = cfg or SyntheticConfig()
    if cfg.idcs < 1 or cfg.idcs > len(IDC_NAMES):
        raise TraceError(f"synthetic: idcs must be between 1 and {len(IDC_NAMES)}")
    rng = np.random.default_rng(cfg.seed)
    flavors = catalogue()
    mix = np.array([cfg.on_demand, cfg.auto_scaling, cfg.preemptible], dtype=float)
    mix /= mix.sum()
    times = _event_times(rng, cfg, mix)
    events = _Events.draw(rng, cfg, mix, times)
    rows = _Rows.expand(events, {f.name: i for i, f in enumerate(flavors)})
    start = np.array(rows.time)
    business = np.array(rows.business, dtype=np.int8)
    end = start + _lifetimes(rng, business)
    return _trace(cfg, flavors, rows, start, end, business)


def _event_times(rng: np.random.Generator, cfg: SyntheticConfig, mix: np.ndarray) -> np.ndarray:
    """Creation events over history and day, thinned to the diurnal rate, in time order."""
    # VMs per creation event, to turn creations/day into events/day
    mean_burst = 3.5  # auto-scaling bursts: uniform 1..6
    mean_set = 5.0  # deployment sets: uniform 2..8
    od_size = 1 + cfg.deployment_set_share * (mean_set - 1)
    per_event = mix[0] * od_size + mix[1] * mean_burst + mix[2]
    events_per_day = cfg.creations_per_day / per_event

    t0, t1 = -cfg.history_days * DAY, cfg.days * DAY
    span = t1 - t0
    peak = 1.0 + cfg.diurnal_amplitude
    n_candidates = rng.poisson(events_per_day * span / DAY * peak)
    times = np.sort(rng.uniform(t0, t1, n_candidates))
    keep = rng.random(n_candidates) < _rate(times, cfg) / peak
    return times[keep]


@dataclass(frozen=True)
class _Events:
    """Per creation event: its time and what it asks for (one column each)."""

    times: np.ndarray
    kind: np.ndarray
    idc: np.ndarray
    size: np.ndarray
    family: np.ndarray
    variant: np.ndarray
    is_set: np.ndarray
    count: np.ndarray

    @classmethod
    def draw(
        cls, rng: np.random.Generator, cfg: SyntheticConfig, mix: np.ndarray, times: np.ndarray
    ) -> _Events:
        n_ev = times.size
        kind = rng.choice(3, size=n_ev, p=mix)
        weights = np.array(IDC_WEIGHTS[: cfg.idcs])
        idc = rng.choice(cfg.idcs, size=n_ev, p=weights / weights.sum())
        size = rng.choice(len(SIZES), size=n_ev, p=SIZE_SHARE)
        family = rng.choice(len(FAMILIES), size=n_ev, p=FAMILY_SHARE)
        variant = rng.random(n_ev)
        is_set = (kind == Business.ON_DEMAND) & (rng.random(n_ev) < cfg.deployment_set_share)
        count = np.ones(n_ev, dtype=np.int64)
        count[kind == Business.AUTO_SCALING] = rng.integers(1, 7, int((kind == 1).sum()))
        count[is_set] = rng.integers(2, 9, int(is_set.sum()))
        return cls(times, kind, idc, size, family, variant, is_set, count)


def _flavor_name(business: int, size: int, fam: str, variant: float) -> str:
    """The flavor one event asks for: auto-scaling single-NUMA compute, preemptible two-NUMA,
    on-demand with a share of DPDK (``n``) and two-NUMA variants."""
    s = size
    if business == Business.AUTO_SCALING:
        fam = "c" if fam in ("c", "m") else "g"
        nodes = 1
    elif business == Business.PREEMPTIBLE:
        nodes = 2
    elif variant < 0.10:
        fam, nodes = "n", 1 if variant < 0.07 else 2
    else:
        nodes = 1 if variant < 0.80 else 2
    if nodes == 2 and s < 4:
        s = 4
    if nodes == 1 and s * MEM_PER_VCPU[fam] > 128:
        nodes = 2  # a single-NUMA guest must fit one host cell (256 GiB, half for others)
    return f"{fam}3.{SIZE_NAMES[s]}.numa{nodes}"


@dataclass
class _Rows:
    """One row per requested VM (events expanded by their count), as Python lists."""

    time: list[float]
    flavor: list[int]
    business: list[int]
    zone: list[int]
    group: list[int]
    groups: list[ServerGroup]

    @classmethod
    def expand(cls, ev: _Events, index: dict[str, int]) -> _Rows:
        rows = cls([], [], [], [], [], [])
        for e in range(ev.times.size):
            b = int(ev.kind[e])
            fam = FAMILIES[int(ev.family[e])]
            name = _flavor_name(b, SIZES[int(ev.size[e])], fam, float(ev.variant[e]))
            g = -1
            if ev.is_set[e]:
                g = len(rows.groups)
                rows.groups.append(
                    ServerGroup(
                        id=f"dset-{g:05d}", policy=GroupPolicy.ANTI_AFFINITY, max_server_per_host=1
                    )
                )
            for j in range(int(ev.count[e])):
                rows.time.append(float(ev.times[e]) + j * 1.0)  # members one second apart
                rows.flavor.append(index[name])
                rows.business.append(b)
                rows.zone.append(int(ev.idc[e]))
                rows.group.append(g)
        return rows


def _trace(
    cfg: SyntheticConfig,
    flavors: list[Flavor],
    rows: _Rows,
    start: np.ndarray,
    end: np.ndarray,
    business: np.ndarray,
) -> Trace:
    """The rows still alive at the day's start or later, in time order, as a `Trace`."""
    alive = (start >= 0) | (end > 0)  # drop history that ended before the day
    order = np.argsort(start[alive], kind="stable")
    sel = np.flatnonzero(alive)[order]
    used_groups = sorted({rows.group[i] for i in sel if rows.group[i] >= 0})
    remap = {g: k for k, g in enumerate(used_groups)}
    group_col = np.array(
        [remap[rows.group[i]] if rows.group[i] >= 0 else -1 for i in sel], dtype=np.int32
    )
    flavor_col = np.array([rows.flavor[i] for i in sel], dtype=np.int32)
    used_flavors = sorted(set(flavor_col.tolist()))
    fmap = {f: k for k, f in enumerate(used_flavors)}
    return Trace(
        name=f"synthetic-{cfg.seed}",
        ids=[f"vm-{k:06d}" for k in range(sel.size)],
        start=start[sel],
        end=end[sel],
        flavor=np.array([fmap[int(f)] for f in flavor_col], dtype=np.int32),
        business=business[sel],
        flavor_names=[flavors[f].name for f in used_flavors],
        flavors={flavors[f].name: flavors[f] for f in used_flavors},
        zone=np.array([rows.zone[i] for i in sel], dtype=np.int32),
        zones=[IDC_NAMES[k] for k in range(cfg.idcs)],
        group=group_col,
        groups=[rows.groups[g] for g in used_groups],
        clusters=[
            (IDC_NAMES[k], f"c{c + 1}")
            for k, n in enumerate(_clusters_per_idc(cfg))
            for c in range(n)
        ],
        window_start=0.0,
        horizon=cfg.days * DAY,
        window=HOUR,
        source=f"synthetic (seed {cfg.seed})",
        notes=[
            f"360-like day: ~{cfg.creations_per_day:g} creations/day, {cfg.idcs} IDCs, "
            f"{cfg.clusters} clusters, warm start from {cfg.history_days:g} days of history"
        ],
    )


DEFAULT_SIZING = "90xstd-2s+11xssd-2s+14xdpdk-2s"
"""Per-cluster default fleet for the synthetic trace (8 clusters -> 920 hosts)."""
