"""The host types on offer for `berth plan-capacity`: ``--offer TYPE[:PRICE]`` terms or a YAML
file (docs/plan-capacity.md)::

    offers:                # host type -> price per host (money, weight: any positive unit)
      std-2s: 9000
      big-2s: 14000
    host_types:            # optional: types of your own (Host fields without name and zone)
      big-2s:
        numa_cells: [{shared_cpus: 64, memory_mb: 524288}, {shared_cpus: 64, memory_mb: 524288}]

Types are the built-in ones (`berth.sim.hosttypes`) or the file's own. Every problem is one
error naming the term or the file and key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from berth.core.model import Host
from berth.fleet.io import describe_validation_error
from berth.sim.capacity_plan import Offer, PlanError
from berth.sim.hosttypes import HOST_TYPES


def parse_offers(
    terms: list[str], extra_types: dict[str, dict[str, Any]] | None = None
) -> tuple[list[Offer], dict[str, dict[str, Any]]]:
    """Offers and their host types from ``--offer`` values (``TYPE``, ``TYPE:PRICE``, or the
    path of an offers YAML file)."""
    types: dict[str, dict[str, Any]] = {**HOST_TYPES, **(extra_types or {})}
    offers: list[Offer] = []
    for term in terms:
        path = Path(term)
        if term.endswith((".yaml", ".yml")) or path.is_file():
            found, own = _from_file(path)
            types.update(own)
            offers.extend(found)
        else:
            offers.append(_from_term(term))
    if not offers:
        raise PlanError("no host type on offer: give --offer TYPE:PRICE (e.g. std-2s:9000)")
    seen: set[str] = set()
    for offer in offers:
        if offer.name in seen:
            raise PlanError(f"--offer: host type {offer.name!r} is offered twice")
        seen.add(offer.name)
        if offer.name not in types:
            raise PlanError(
                f"--offer: unknown host type {offer.name!r} (known: {', '.join(types)}; "
                "define your own under host_types: in an offers file)"
            )
        _check_type(offer.name, types[offer.name])
    return offers, {o.name: dict(types[o.name]) for o in offers}


def _from_term(term: str) -> Offer:
    name, sep, price_text = term.strip().partition(":")
    if not name:
        raise PlanError(f"--offer {term!r}: expected TYPE or TYPE:PRICE (e.g. std-2s:9000)")
    if not sep:
        return Offer(name, 1.0)
    try:
        price = float(price_text)
    except ValueError:
        raise PlanError(f"--offer {term!r}: price {price_text!r} is not a number") from None
    return Offer(name, _price(price, f"--offer {term!r}"))


def _price(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(f"{where}: the price must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise PlanError(f"{where}: the price must be above 0, got {value!r}")
    return float(value)


def _from_file(path: Path) -> tuple[list[Offer], dict[str, dict[str, Any]]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PlanError(f"{path}: cannot read the offers file ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("offers"), dict):
        raise PlanError(f"{path}: expected a mapping with offers: {{host type: price}}")
    unknown = set(data) - {"offers", "host_types"}
    if unknown:
        raise PlanError(f"{path}: unknown key {sorted(unknown)[0]!r} (offers, host_types)")
    own = data.get("host_types") or {}
    if not isinstance(own, dict) or not all(isinstance(v, dict) for v in own.values()):
        raise PlanError(f"{path}: host_types must map a name to host fields")
    offers = [
        Offer(str(name), _price(price, f"{path}: offers.{name}"))
        for name, price in data["offers"].items()
    ]
    return offers, {str(k): v for k, v in own.items()}


def _check_type(name: str, fields: dict[str, Any]) -> None:
    try:
        Host.model_validate({**fields, "name": name, "availability_zone": "nova"})
    except ValidationError as exc:
        raise PlanError(f"host type {name!r}: {describe_validation_error(exc)}") from None
