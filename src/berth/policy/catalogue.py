"""The flavor catalogue: base flavors x variants -> concrete core flavors, and candidate lists.

A concrete flavor is the base flavor with its family's, its own and the variant's extra specs
(later wins), named base name + variant suffix (`v.c3.large` + `.numa1`). Every concrete flavor
is parsed by the core's `parse_flavor` when the catalogue is built, so a variant that makes no
sense for a flavor (an odd vCPU count split over two cells) is an error naming both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from berth.core.errors import SpecError
from berth.core.flavors import parse_flavor
from berth.core.model import Flavor
from berth.policy.errors import MultiCloudInputError
from berth.policy.model import (
    EVICTABLE,
    BaseFlavor,
    Business,
    Family,
    FamilyRule,
    Policy,
    Variant,
)


@dataclass(frozen=True)
class Candidate:
    """One way to realise a request: a variant, its concrete core flavor and its pool."""

    variant: str
    flavor: str
    pool: str


@dataclass(frozen=True)
class Candidates:
    base: str
    business: Business
    user: str
    items: tuple[Candidate, ...]
    may_preempt: bool
    rule: str
    """Where the order came from: 'business type on-demand' or 'user bigdata'."""


class Catalogue:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.families: dict[Family, FamilyRule] = {f.name: f for f in policy.families}
        self.bases: dict[str, BaseFlavor] = {f.name: f for f in policy.flavors}
        self.variants: dict[str, Variant] = {v.name: v for v in policy.variants}
        self.pools = {p.name: p for p in policy.pools}
        self.flavors: dict[str, Flavor] = {}
        """Concrete flavor name -> core flavor."""
        self.concrete: dict[tuple[str, str], Candidate] = {}
        """(base, variant) -> candidate, for every applicable pair."""
        self.origin: dict[str, tuple[str, str]] = {}
        """Concrete flavor -> (base, variant)."""
        aliases = {a.name: a.device_type for a in policy.pci_aliases}
        for i, base in enumerate(policy.flavors):
            family = self.families[base.family]
            for j, variant in enumerate(policy.variants):
                if variant.families is not None and base.family not in variant.families:
                    continue
                name = base.name + variant.suffix
                if name in self.flavors:
                    raise MultiCloudInputError(
                        f"flavors[{i}] x variants[{j}]: concrete flavor {name!r} "
                        f"also comes from {'/'.join(self.origin[name])}"
                    )
                flavor = Flavor(
                    name=name,
                    vcpus=base.vcpus,
                    memory_mb=base.memory_mb,
                    root_gb=base.root_gb,
                    ephemeral_gb=base.ephemeral_gb,
                    disk_kind=family.disk_kind,
                    extra_specs={
                        **family.extra_specs,
                        **base.extra_specs,
                        **variant.extra_specs,
                    },
                )
                try:
                    parse_flavor(flavor, aliases)
                except SpecError as exc:
                    raise MultiCloudInputError(
                        f"flavors[{i}] ({base.name}) x variants[{j}] ({variant.name}): {exc}"
                    ) from None
                self.flavors[name] = flavor
                self.origin[name] = (base.name, variant.name)
                self.concrete[(base.name, variant.name)] = Candidate(
                    variant.name, name, variant.pool or family.pool
                )

    # ------------------------------------------------------------------ lookups
    def base(self, name: str) -> BaseFlavor:
        try:
            return self.bases[name]
        except KeyError:
            raise MultiCloudInputError(f"--flavor: unknown flavor {name!r}") from None

    def variants_of(self, base: str) -> list[Candidate]:
        """Every applicable variant of a base flavor, in policy order."""
        return [c for (b, _), c in self.concrete.items() if b == base]

    def offered(self, base: str, offer: list[str] | None) -> bool:
        """Whether an IDC's offer list (base names or family names; None = all) includes it."""
        if offer is None:
            return True
        flavor = self.bases[base]
        return base in offer or flavor.family.value in offer

    def candidates(self, base: str, business: Business, user: str) -> Candidates:
        """The candidate variants, in order, for this business type and user.

        Special-user rules (first match, business-specific before general) replace the order,
        the pool, or whether the request may evict. Variants that do not apply to the flavor's
        family are skipped.
        """
        self.base(base)
        rule = self.policy.business.get(business) or self.policy.business[Business.PREEMPTIBLE]
        order = list(rule.variants)
        may_preempt = rule.may_preempt
        source = f"business type {business.value}"
        pool: str | None = None
        match = self._user_rule(business, user)
        if match is not None:
            source = f"user {user}" + (f" ({business.value})" if match.business else "")
            order = list(match.variants) if match.variants is not None else order
            pool = match.pool
            if match.may_preempt is not None:
                may_preempt = match.may_preempt
        if business in EVICTABLE:
            may_preempt = False  # never, whatever a rule says (the model refuses it too)
        items = []
        for variant in order:
            found = self.concrete.get((base, variant))
            if found is None:
                continue
            if pool is not None:
                found = Candidate(found.variant, found.flavor, pool)
            items.append(found)
        return Candidates(base, business, user, tuple(items), may_preempt, source)

    def _user_rule(self, business: Business, user: str) -> _UserRuleView | None:
        general = None
        for rule in self.policy.users:
            if rule.user != user:
                continue
            if rule.business == business:
                return _UserRuleView(rule.variants, rule.pool, rule.may_preempt, True)
            if rule.business is None and general is None:
                general = _UserRuleView(rule.variants, rule.pool, rule.may_preempt, False)
        return general

    def pool_traits(self) -> Mapping[str, list[str]]:
        return {name: list(p.traits) for name, p in self.pools.items()}


@dataclass(frozen=True)
class _UserRuleView:
    variants: list[str] | None
    pool: str | None
    may_preempt: bool | None
    business: bool
