"""The policy and topology file schemas (pydantic): every error names its field path.

Two documents:

* the **policy** (rules): resource pools by traits, the flavor catalogue (families, base flavors,
  variants), candidate variants per business type, special-user overrides, preemptible limits,
  deployment-set defaults and how to choose a cluster;
* the **topology** (state): regions -> IDCs (images, offered flavors) -> clusters (networks with
  free IPs, hosts, running instances with their business type and creation time) and the
  deployment sets.

Both are plain data; `berth.policy.loader` reads them from files, `berth.policy.topology` builds
the runtime objects.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from berth.core.config import SchedulerConfig
from berth.core.model import (
    IDENT_RULE,
    MAX_CPUS,
    MAX_QUANTITY,
    DiskKind,
    Host,
    Instance,
    Name,
    NonNeg,
    PciAlias,
    is_ident,
    not_bool,
)

Positive = Annotated[int, BeforeValidator(not_bool), Field(ge=1, le=MAX_QUANTITY)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Business(StrEnum):
    ON_DEMAND = "on-demand"
    AUTO_SCALING = "auto-scaling"
    PREEMPTIBLE = "preemptible"
    ELASTIC = "elastic"
    """The elastic pools' batch-worker VMs (docs/elastic.md): evictable like preemptible ones,
    but drained first by their loop, and outside the preemptible limits (their own quotas bound
    them). Its rule is optional: without one, elastic requests take the preemptible rule's."""


EVICTABLE = frozenset({Business.PREEMPTIBLE, Business.ELASTIC})
"""Business types whose instances on-demand requests may evict, and which never evict."""
OPTIONAL_RULES = frozenset({Business.ELASTIC})


class Family(StrEnum):
    COMPUTE = "compute"
    MEMORY = "memory"
    GENERAL = "general"
    LOCAL_HDD = "local-hdd"
    LOCAL_SSD = "local-ssd"
    GPU = "gpu"


class ClusterChoice(StrEnum):
    MOST_CAPACITY = "most-capacity"
    """The cluster that can take the most more instances of the flavor (spread over clusters)."""
    PACK = "pack"
    """The cluster with the least room that still takes the whole request (keep others whole)."""
    ORDER = "order"
    """The first cluster, in topology order, that takes the whole request."""


class DeploymentScope(StrEnum):
    HOST = "host"
    RACK = "rack"


# ---------------------------------------------------------------------------- policy
class Pool(_Strict):
    """A resource pool: the hosts carrying every trait in `traits`."""

    name: Name
    traits: list[Name] = Field(min_length=1)
    description: str = ""


class FamilyRule(_Strict):
    """Defaults for a flavor family: its pool, disk kind and extra specs every variant gets."""

    name: Family
    pool: Name
    disk_kind: DiskKind = DiskKind.HDD
    extra_specs: dict[Name, str] = Field(default_factory=dict)

    @field_validator("extra_specs", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        return _stringify_specs(value)


class BaseFlavor(_Strict):
    """A product flavor as users name it (`v.c3.large`); variants make the concrete ones."""

    name: Name
    family: Family
    vcpus: Annotated[int, BeforeValidator(not_bool), Field(ge=1, le=MAX_CPUS)]
    memory_mb: Positive
    root_gb: NonNeg = 0
    ephemeral_gb: NonNeg = 0
    extra_specs: dict[Name, str] = Field(default_factory=dict)

    @field_validator("extra_specs", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        return _stringify_specs(value)


class Variant(_Strict):
    """A way to realise a base flavor: extra specs, a name suffix, optionally its own pool."""

    name: Name
    suffix: str = Field(
        description="appended to the base name; '' makes the variant carry the base name"
    )
    description: str = ""
    pool: Name | None = Field(None, description="None: the family's pool")
    families: list[Family] | None = Field(None, description="None: every family")
    extra_specs: dict[Name, str] = Field(default_factory=dict)

    @field_validator("extra_specs", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        return _stringify_specs(value)


class BusinessRule(_Strict):
    variants: list[Name] = Field(min_length=1, description="candidate variants, in order")
    may_preempt: bool = False


class UserRule(_Strict):
    """A special user: another candidate order and/or another pool, for one business type or
    all."""

    user: Name
    business: Business | None = None
    variants: list[Name] | None = None
    pool: Name | None = None
    may_preempt: bool | None = None

    @model_validator(mode="after")
    def _something(self) -> UserRule:
        if self.variants is None and self.pool is None and self.may_preempt is None:
            raise ValueError("a user rule needs variants, pool or may_preempt")
        return self


class PreemptibleLimits(_Strict):
    default: NonNeg | None = Field(None, description="per IDC; None: no limit")
    idcs: dict[Name, NonNeg] = Field(default_factory=dict)


class DeploymentDefaults(_Strict):
    max_size: Positive = 20
    scope: DeploymentScope = DeploymentScope.HOST
    create_on_use: bool = Field(True, description="an unknown set is created with these defaults")


class Placement(_Strict):
    cluster_choice: ClusterChoice = ClusterChoice.MOST_CAPACITY
    scheduler: SchedulerConfig | None = Field(
        None, description="the core scheduler of every cluster; None: the `profile`"
    )
    profile: Name = "berth"
    preemption_exact_limit: Annotated[int, Field(ge=0, le=16)] = 10


class Policy(_Strict):
    version: Literal[1] = 1
    pools: list[Pool] = Field(min_length=1)
    families: list[FamilyRule] = Field(min_length=1)
    flavors: list[BaseFlavor] = Field(min_length=1)
    variants: list[Variant] = Field(min_length=1)
    pci_aliases: list[PciAlias] = Field(default_factory=list)
    business: dict[Business, BusinessRule]
    users: list[UserRule] = Field(default_factory=list)
    preemptible_limits: PreemptibleLimits = PreemptibleLimits()
    deployment_sets: DeploymentDefaults = DeploymentDefaults()
    placement: Placement = Placement()

    @model_validator(mode="after")
    def _references(self) -> Policy:
        _unique("pools", [p.name for p in self.pools])
        _unique("families", [f.name.value for f in self.families])
        _unique("flavors", [f.name for f in self.flavors])
        _unique("variants", [v.name for v in self.variants])
        _unique("variants (suffix)", [v.suffix for v in self.variants])
        pools = {p.name for p in self.pools}
        families = {f.name for f in self.families}
        variants = {v.name for v in self.variants}
        for i, fam in enumerate(self.families):
            if fam.pool not in pools:
                raise ValueError(f"families[{i}].pool: unknown pool {fam.pool!r}")
        for i, flv in enumerate(self.flavors):
            if flv.family not in families:
                raise ValueError(f"flavors[{i}].family: family {flv.family.value!r} has no rule")
        for i, var in enumerate(self.variants):
            if var.pool is not None and var.pool not in pools:
                raise ValueError(f"variants[{i}].pool: unknown pool {var.pool!r}")
        missing = [b.value for b in Business if b not in self.business and b not in OPTIONAL_RULES]
        if missing:
            raise ValueError(f"business: missing rule for {missing[0]!r}")
        for btype, rule in self.business.items():
            for j, name in enumerate(rule.variants):
                if name not in variants:
                    raise ValueError(
                        f"business.{btype.value}.variants[{j}]: unknown variant {name!r}"
                    )
        for btype in EVICTABLE:
            if btype in self.business and self.business[btype].may_preempt:
                raise ValueError(
                    f"business.{btype.value}.may_preempt: {btype.value} requests never evict"
                )
        for i, urule in enumerate(self.users):
            for j, name in enumerate(urule.variants or []):
                if name not in variants:
                    raise ValueError(f"users[{i}].variants[{j}]: unknown variant {name!r}")
            if urule.pool is not None and urule.pool not in pools:
                raise ValueError(f"users[{i}].pool: unknown pool {urule.pool!r}")
            if urule.may_preempt and urule.business in EVICTABLE:
                raise ValueError(f"users[{i}].may_preempt: {urule.business} requests never evict")
        return self


# ---------------------------------------------------------------------------- topology
class Network(_Strict):
    name: Name
    free_ips: NonNeg


class ClusterInstance(Instance):
    """A running instance with what the policy layer needs to know about it."""

    business: Business = Business.ON_DEMAND
    created_at: float = 0.0
    user: Name = "default"
    deployment_set: Name | None = None

    @model_validator(mode="after")
    def _one_group(self) -> ClusterInstance:
        if self.server_group is not None:
            raise ValueError("server_group: use deployment_set in a topology")
        return self


class ClusterSpec(_Strict):
    name: Name
    enabled: bool = True
    networks: list[Network] = Field(default_factory=list)
    hosts: list[Host] = Field(default_factory=list)
    instances: list[ClusterInstance] = Field(default_factory=list)


class IdcSpec(_Strict):
    name: Name
    images: list[Name] = Field(default_factory=list)
    flavors: list[Name] | None = Field(
        None, description="base flavors or family names offered here; None: all"
    )
    clusters: list[ClusterSpec] = Field(default_factory=list)


class RegionSpec(_Strict):
    name: Name
    idcs: list[IdcSpec] = Field(min_length=1)


class DeploymentSetSpec(_Strict):
    name: Name
    max_size: Positive = 20
    scope: DeploymentScope = DeploymentScope.HOST
    project: Name = Field("default", description="the project owning the set; its members'")


class TopologySpec(_Strict):
    version: Literal[1] = 1
    now: float | None = Field(None, description="reference time (heartbeats, instance ages)")
    regions: list[RegionSpec] = Field(min_length=1)
    deployment_sets: list[DeploymentSetSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> TopologySpec:
        _unique("regions", [r.name for r in self.regions])
        idcs = [i.name for r in self.regions for i in r.idcs]
        _unique("idcs", idcs)
        if set(idcs) & {r.name for r in self.regions}:
            raise ValueError("regions: a region and an IDC share a name")
        _unique("clusters", [c.name for r in self.regions for i in r.idcs for c in i.clusters])
        clusters = [c for r in self.regions for i in r.idcs for c in i.clusters]
        _unique_across("host", [(c.name, [h.name for h in c.hosts]) for c in clusters])
        _unique_across("instance", [(c.name, [x.id for x in c.instances]) for c in clusters])
        _unique("deployment_sets", [s.name for s in self.deployment_sets])
        sets = {s.name for s in self.deployment_sets}
        for ri, region in enumerate(self.regions):
            for ii, idc in enumerate(region.idcs):
                for ci, cluster in enumerate(idc.clusters):
                    where = f"regions[{ri}].idcs[{ii}].clusters[{ci}]"
                    _unique(f"{where}.networks", [n.name for n in cluster.networks])
                    hosts = {h.name for h in cluster.hosts}
                    for k, inst in enumerate(cluster.instances):
                        if inst.host not in hosts:
                            raise ValueError(
                                f"{where}.instances[{k}].host: {inst.host!r} is not a host of "
                                f"cluster {cluster.name!r}"
                            )
                        if inst.deployment_set is not None and inst.deployment_set not in sets:
                            raise ValueError(
                                f"{where}.instances[{k}].deployment_set: unknown set "
                                f"{inst.deployment_set!r}"
                            )
        _check_names(self)
        _check_sets(self)
        return self

    def clusters_with_paths(self) -> list[tuple[str, ClusterSpec]]:
        """Every cluster with its field path (`regions[0].idcs[1].clusters[2]`)."""
        return [
            (f"regions[{ri}].idcs[{ii}].clusters[{ci}]", cluster)
            for ri, region in enumerate(self.regions)
            for ii, idc in enumerate(region.idcs)
            for ci, cluster in enumerate(idc.clusters)
        ]


def _check_names(spec: TopologySpec) -> None:
    """Everything a topology load writes must be addressable through the API afterwards, so
    its names follow the API's identifier rule (`IDENT_PATTERN`, docs/api.md)."""
    named: list[tuple[str, str]] = []
    for ri, region in enumerate(spec.regions):
        named.append((f"regions[{ri}].name", region.name))
        for ii, idc in enumerate(region.idcs):
            named.append((f"regions[{ri}].idcs[{ii}].name", idc.name))
    for where, cluster in spec.clusters_with_paths():
        named.append((f"{where}.name", cluster.name))
        named += [(f"{where}.networks[{k}].name", n.name) for k, n in enumerate(cluster.networks)]
        named += [(f"{where}.hosts[{k}].name", h.name) for k, h in enumerate(cluster.hosts)]
        named += [(f"{where}.instances[{k}].id", i.id) for k, i in enumerate(cluster.instances)]
    named += [(f"deployment_sets[{k}].name", s.name) for k, s in enumerate(spec.deployment_sets)]
    named += [
        (f"deployment_sets[{k}].project", s.project) for k, s in enumerate(spec.deployment_sets)
    ]
    for field, name in named:
        if not is_ident(name):
            raise ValueError(f"{field}: {name!r} is not a valid name ({IDENT_RULE})")


def _check_sets(spec: TopologySpec) -> None:
    """Deployment sets keep anti-affinity (at most one member per host; with scope rack, per
    rack of an IDC) and at most `max_size` members, as placements keep them (docs/policy.md)."""
    sets = {s.name: s for s in spec.deployment_sets}
    seen: dict[tuple[str, ...], str] = {}
    members: dict[str, int] = {}
    for ri, region in enumerate(spec.regions):
        for ii, idc in enumerate(region.idcs):
            for ci, cluster in enumerate(idc.clusters):
                racks = {h.name: h.rack for h in cluster.hosts}
                for k, inst in enumerate(cluster.instances):
                    if inst.deployment_set is None:
                        continue
                    ds = sets[inst.deployment_set]
                    where = f"regions[{ri}].idcs[{ii}].clusters[{ci}].instances[{k}]"
                    if inst.project != ds.project:  # a set holds instances of its own project
                        raise ValueError(
                            f"{where}.project: {inst.project!r} is not the project of deployment "
                            f"set {ds.name!r} ({ds.project!r})"
                        )
                    keys: list[tuple[str, ...]] = [(ds.name, "host", inst.host)]
                    rack = racks[inst.host]
                    if ds.scope == DeploymentScope.RACK and rack is not None:
                        keys.append((ds.name, "rack", idc.name, rack))
                    for key in keys:
                        other = seen.setdefault(key, inst.id)
                        if other != inst.id:
                            raise ValueError(
                                f"{where}.host: deployment set {ds.name!r} already has instance "
                                f"{other!r} on {key[1]} {key[-1]!r} (anti-affinity)"
                            )
                    members[ds.name] = members.get(ds.name, 0) + 1
                    if members[ds.name] > ds.max_size:
                        raise ValueError(
                            f"{where}.deployment_set: deployment set {ds.name!r} has more than "
                            f"its max_size of {ds.max_size} members"
                        )


def _unique(field: str, names: list[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise ValueError(f"{field}[{i}]: duplicate name {name!r}")
        seen.add(name)


def _unique_across(kind: str, groups: list[tuple[str, list[str]]]) -> None:
    """Names unique over all clusters; the error names both clusters."""
    seen: dict[str, str] = {}
    for cluster, names in groups:
        for name in names:
            if name in seen:
                where = seen[name] if seen[name] != cluster else f"{cluster}' twice ('{cluster}"
                raise ValueError(f"{kind} {name!r} appears in clusters {where!r} and {cluster!r}")
            seen[name] = cluster


def _stringify_specs(value: object) -> object:
    if isinstance(value, dict):
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    return value
