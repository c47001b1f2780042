"""Claims and releases: the optimistic, all-or-nothing transaction that records a placement.

A claim updates each touched host with ``WHERE generation = :read`` and checks the row count,
re-verifies the footprints against the instances rows it now holds locked, and only then inserts;
any failure rolls the whole transaction back (no partial claim, even if the process dies). Claims
and releases take their row locks in one order (deployment sets, then hosts, each in name order,
then instances, then IP pools), so that concurrent ones queue instead of deadlocking.
Writes that change a host bump its generation and append events in the same transaction, so the
event log and the rows never disagree. On PostgreSQL a claim without evictions runs the same
statements in two round trips (`berth.store.pgclaim`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from berth.store import pgclaim
from berth.store import schema as t
from berth.store.db import Database, EventItem, bump_group
from berth.store.errors import (
    GenerationConflictError,
    IdempotencyRaceError,
    NotFoundError,
    PlanRejectedError,
)
from berth.store.footprint import Footprint, sum_footprints
from berth.store.instances import free_ip
from berth.store.outcomes import idempotency_values, outcome_values, record_outcome_in
from berth.store.records import (
    CommitResult,
    EventRow,
    HostCapacity,
    Idempotent,
    InstanceRow,
    NewInstance,
    Outcome,
    instance_row,
    instance_set_key,
    split_set_key,
)

# Statements of the claim path, built once (building them per call costs more than running them).
_HOST_CAS = (
    update(t.hosts)
    .where(t.hosts.c.name == bindparam("h"), t.hosts.c.generation == bindparam("g"))
    .values(generation=t.hosts.c.generation + bindparam("k"))
)
_ON_HOSTS = select(
    t.instances.c.host, t.instances.c.project, t.instances.c.server_group, t.instances.c.placement
).where(t.instances.c.host.in_(bindparam("hosts", expanding=True)))
_INSERT_INSTANCES = insert(t.instances)


@dataclass(frozen=True)
class _Claim:
    """The arguments of one `commit_placement` call, and its time."""

    placement_id: str
    instances: Sequence[NewInstance]
    host_generations: dict[str, int]
    group_generations: dict[str, int]
    """set key (`berth.store.records.set_key`) -> generation read"""
    capacities: dict[str, HostCapacity]
    evict: Sequence[tuple[str, str]]
    idempotent: Idempotent | None
    outcome: Outcome | None
    preemptible_limit: tuple[str, int] | None
    now: float


class Claims(Database):
    """Claiming placements (with their evictions) and releasing instances."""

    def commit_placement(
        self,
        *,
        placement_id: str,
        instances: Sequence[NewInstance],
        host_generations: dict[str, int],
        group_generations: dict[str, int],
        capacities: dict[str, HostCapacity],
        evict: Sequence[tuple[str, str]] = (),
        idempotent: Idempotent | None = None,
        outcome: Outcome | None = None,
        preemptible_limit: tuple[str, int] | None = None,
    ) -> CommitResult:
        """Claim `instances` (after evicting `evict`: (instance id, reason)) all or nothing.

        Raises `GenerationConflictError` when a touched host or deployment set is no longer at the
        generation read, `PlanRejectedError` when the footprints no longer fit the current rows,
        `IdempotencyRaceError` when the idempotency key was used meanwhile. Nothing is written then.
        """
        claim = _Claim(
            placement_id,
            instances,
            host_generations,
            group_generations,
            capacities,
            evict,
            idempotent,
            outcome,
            preemptible_limit,
            time.time(),
        )
        try:
            if not self.sqlite and not evict and preemptible_limit is None:
                return self._commit_two_trips(claim)
            with self._write() as conn:
                return self._commit_in(conn, claim)
        except IntegrityError as exc:
            if idempotent is not None and "idempotency" in str(exc.orig).lower():
                raise IdempotencyRaceError(f"idempotency key {idempotent.key!r} was used") from None
            raise PlanRejectedError(f"conflicting write: {exc.orig}") from None

    def _commit_in(self, conn: Connection, c: _Claim) -> CommitResult:
        """The general path, in one transaction: lock, evict, re-verify, then write."""
        result = CommitResult()
        # 1. deployment sets, then hosts, each in name order (no lock-order deadlocks)
        result.groups = self._bump_sets(conn, c.group_generations)
        victims = self._victims(conn, c.evict)
        self._bump_hosts(conn, c, victims)
        # 2. evictions
        step = dict.fromkeys(c.host_generations, 0)
        items = self._evict(conn, c, victims, step, result)
        # 3. re-verify the plan against the current rows of the touched hosts
        self._verify(conn, c.instances, c.capacities, c.group_generations)
        if c.preemptible_limit is not None:
            self._verify_preemptible(conn, c.instances, *c.preemptible_limit)
        # 4. IPs, then claims
        _take_ips(conn, _ips_wanted(c.instances))
        conn.execute(
            _INSERT_INSTANCES, [_instance_values(i, c.placement_id, c.now) for i in c.instances]
        )
        items += _claimed_events(c, step, result.groups)
        if c.idempotent is not None:
            conn.execute(insert(t.idempotency).values(idempotency_values(c.idempotent, c.now)))
        if c.outcome is not None:
            record_outcome_in(conn, c.outcome, c.now)
        result.events = self._append(conn, items)
        return result

    @staticmethod
    def _bump_sets(conn: Connection, group_generations: dict[str, int]) -> dict[str, int]:
        """Check and bump each deployment set's generation, in key order; the generations after
        (by set key)."""
        after: dict[str, int] = {}
        for gid in sorted(group_generations):
            project, set_id = split_set_key(gid)
            gen = conn.execute(
                update(t.deployment_sets)
                .where(
                    t.deployment_sets.c.project == project,
                    t.deployment_sets.c.id == set_id,
                    t.deployment_sets.c.generation == group_generations[gid],
                )
                .values(generation=t.deployment_sets.c.generation + 1)
                .returning(t.deployment_sets.c.generation)
            ).scalar()
            if gen is None:
                raise GenerationConflictError("deployment set", gid)
            after[gid] = int(gen)
        return after

    @staticmethod
    def _bump_hosts(conn: Connection, c: _Claim, victims: Sequence[InstanceRow]) -> None:
        """Check and bump each touched host's generation by its changes, in name order."""
        ops = _host_changes(c.host_generations, victims, c.instances)
        for host in sorted(c.host_generations):
            res = conn.execute(
                _HOST_CAS, {"h": host, "g": c.host_generations[host], "k": ops[host]}
            )
            if res.rowcount != 1:
                raise GenerationConflictError("host", host)

    def _evict(
        self,
        conn: Connection,
        c: _Claim,
        victims: Sequence[InstanceRow],
        step: dict[str, int],
        result: CommitResult,
    ) -> list[EventItem]:
        """Delete the victims (recording each eviction); their `instance_released` events."""
        items: list[EventItem] = []
        for v, (_, reason) in zip(victims, c.evict, strict=True):
            conn.execute(delete(t.instances).where(t.instances.c.id == v.id))
            free_ip(conn, v.network)
            conn.execute(
                insert(t.evictions).values(
                    instance_id=v.id,
                    host=v.host,
                    project=v.project,
                    flavor=v.flavor,
                    reason=reason,
                    placement_id=c.placement_id,
                    created_at=c.now,
                )
            )
            step[v.host] += 1
            victim_group_gen = bump_group(conn, v.project, v.server_group)
            victim_set = instance_set_key(v.project, v.server_group)
            if victim_set in result.groups and victim_group_gen is not None:
                result.groups[victim_set] = victim_group_gen
            items.append(
                (
                    "instance_released",
                    v.host,
                    c.host_generations[v.host] + step[v.host],
                    {
                        "instance_id": v.id,
                        "cluster": v.cluster,
                        "project": v.project,
                        "server_group": v.server_group,
                        "network": v.network,
                        "group_generation": victim_group_gen,
                        "evicted": True,
                        "reason": reason,
                    },
                )
            )
            result.evicted.append(v)
        return items

    def _commit_two_trips(self, c: _Claim) -> CommitResult:
        """`commit_placement` without evictions on PostgreSQL: the same statements, locks and
        checks in two round trips (`berth.store.pgclaim`)."""
        ops = _host_changes(c.host_generations, (), c.instances)
        after = {gid: gen + 1 for gid, gen in c.group_generations.items()}  # if the check passes
        items = _claimed_events(c, dict.fromkeys(c.host_generations, 0), after)
        wanted = _ips_wanted(c.instances)
        writes = pgclaim.ClaimWrites(
            sets=[(gid, c.group_generations[gid]) for gid in sorted(c.group_generations)],
            hosts=[(h, c.host_generations[h], ops[h]) for h in sorted(c.host_generations)],
            verify_hosts=sorted({i.host for i in c.instances}),
            sized_sets=sorted(c.group_generations) if c.instances else [],
            networks=[(n, wanted[n]) for n in sorted(wanted)],
            instances=[_instance_values(i, c.placement_id, c.now) for i in c.instances],
            idempotency=None if c.idempotent is None else idempotency_values(c.idempotent, c.now),
            outcome=None if c.outcome is None else outcome_values(c.outcome, c.now),
            events=items,
            ts=c.now,
            replica=self.replica,
        )
        result = CommitResult()

        def verify(read: pgclaim.ClaimRead) -> None:
            result.groups = {gid: gen for gid, (gen, _, _, _) in read.sets.items()}
            if c.instances:
                sets = {
                    gid: (p, per_host, size) for gid, (_, p, per_host, size) in read.sets.items()
                }
                _check_plan(read.rows, c.instances, c.capacities, sets, read.sizes)

        ids = pgclaim.commit(self.engine, writes, verify)
        result.events = [
            EventRow(new_id, c.now, kind, host, gen, self.replica, payload)
            for new_id, (kind, host, gen, payload) in zip(ids, items, strict=True)
        ]
        return result

    def _verify_preemptible(
        self, conn: Connection, new: Sequence[NewInstance], region: str, limit: int
    ) -> None:
        """At most `limit` preemptible instances in the region's (IDC's) clusters, counted under
        a lock on the region's row so that concurrent commits of other replicas queue here."""
        adding = sum(1 for i in new if i.preemptible)
        if not adding:
            return
        lock = select(t.regions.c.name).where(t.regions.c.name == region)
        if not self.sqlite:  # SQLite has one writer at a time already
            lock = lock.with_for_update()
        conn.execute(lock)
        clusters = select(t.clusters.c.name).where(t.clusters.c.region == region)
        current = conn.execute(
            select(func.count()).where(
                t.instances.c.preemptible.is_(True), t.instances.c.cluster.in_(clusters)
            )
        ).scalar_one()
        if current + adding > limit:
            raise PlanRejectedError(
                f"IDC {region!r} holds {current} preemptible instances; its limit is {limit}"
            )

    def _victims(self, conn: Connection, evict: Sequence[tuple[str, str]]) -> list[InstanceRow]:
        out = []
        for iid, _ in evict:
            row = conn.execute(select(t.instances).where(t.instances.c.id == iid)).first()
            if row is None:
                raise GenerationConflictError("instance", iid)
            out.append(instance_row(row))
        return out

    def _verify(
        self,
        conn: Connection,
        new: Sequence[NewInstance],
        capacities: dict[str, HostCapacity],
        group_generations: dict[str, int],
    ) -> None:
        hosts = sorted({i.host for i in new})
        if not hosts:
            return
        rows = [
            (r.host, instance_set_key(r.project, r.server_group), r.placement)
            for r in conn.execute(_ON_HOSTS, {"hosts": hosts})
        ]
        sets: dict[str, tuple[str, int, int | None]] = {}
        sizes: dict[str, int] = {}
        for gid in group_generations:
            project, set_id = split_set_key(gid)
            g = conn.execute(
                select(t.deployment_sets).where(
                    t.deployment_sets.c.project == project, t.deployment_sets.c.id == set_id
                )
            ).first()
            if g is None:
                raise PlanRejectedError(f"deployment set {gid!r} no longer exists")
            sets[gid] = (g.policy, g.max_per_host, g.max_size)
            if g.max_size is not None or g.policy == "affinity":
                sizes[gid] = conn.execute(
                    select(func.count()).where(
                        t.instances.c.project == project, t.instances.c.server_group == set_id
                    )
                ).scalar_one()
        _check_plan(rows, new, capacities, sets, sizes)

    def release(
        self, instance_id: str, *, project: str | None = None, reason: str | None = None
    ) -> tuple[InstanceRow, EventRow]:
        """Delete an instance and free its footprint (bumping its host's generation).

        With `project`, only an instance of that project is found (others are "not found").
        With `reason`, the release is recorded as an eviction.
        """
        with self._write() as conn:
            q = select(t.instances).where(t.instances.c.id == instance_id)
            if project is not None:
                q = q.where(t.instances.c.project == project)
            row = conn.execute(q).first()
            if row is None:
                raise NotFoundError("instance", instance_id)
            inst = instance_row(row)
            # Row locks in the claim's order (deployment set, host, instance, IP pool), so that a
            # release and a concurrent claim on PostgreSQL queue instead of deadlocking.
            group_gen = bump_group(conn, inst.project, inst.server_group)
            gen = conn.execute(
                update(t.hosts)
                .where(t.hosts.c.name == inst.host)
                .values(generation=t.hosts.c.generation + 1)
                .returning(t.hosts.c.generation)
            ).scalar_one()
            gone = conn.execute(delete(t.instances).where(t.instances.c.id == instance_id))
            if gone.rowcount != 1:  # released by someone else since the read: roll back
                raise NotFoundError("instance", instance_id)
            free_ip(conn, inst.network)
            if reason is not None:
                conn.execute(
                    insert(t.evictions).values(
                        instance_id=inst.id,
                        host=inst.host,
                        project=inst.project,
                        flavor=inst.flavor,
                        reason=reason,
                        placement_id=None,
                        created_at=time.time(),
                    )
                )
            payload = {
                "instance_id": inst.id,
                "cluster": inst.cluster,
                "network": inst.network,
                "project": inst.project,
                "server_group": inst.server_group,
                "group_generation": group_gen,
                "evicted": reason is not None,
                "reason": reason,
            }
            ev = self._append(conn, [("instance_released", inst.host, int(gen), payload)])
            return inst, ev[0]


def _host_changes(
    host_generations: dict[str, int],
    victims: Sequence[InstanceRow],
    instances: Sequence[NewInstance],
) -> dict[str, int]:
    """How many rows a claim changes on each host read (its generation bump); a victim or an
    instance on a host not read is `PlanRejectedError`."""
    ops: dict[str, int] = dict.fromkeys(host_generations, 0)
    for v in victims:
        if v.host not in ops:
            raise PlanRejectedError(f"eviction of {v.id!r} touches unread host {v.host!r}")
        ops[v.host] += 1
    for inst in instances:
        if inst.host not in ops:
            raise PlanRejectedError(f"instance {inst.id!r} on unread host {inst.host!r}")
        ops[inst.host] += 1
    return ops


def _ips_wanted(instances: Sequence[NewInstance]) -> dict[str, int]:
    """Network -> the IPs the new instances take of it."""
    wanted: dict[str, int] = {}
    for i in instances:
        if i.network is not None:
            wanted[i.network] = wanted.get(i.network, 0) + 1
    return wanted


def _take_ips(conn: Connection, wanted: dict[str, int]) -> None:
    """Reserve the IPs, network by network in name order; too few free is `PlanRejectedError`."""
    for net in sorted(wanted):
        res = conn.execute(
            update(t.ip_pools)
            .where(
                t.ip_pools.c.name == net,
                t.ip_pools.c.used + wanted[net] <= t.ip_pools.c.total,
            )
            .values(used=t.ip_pools.c.used + wanted[net])
        )
        if res.rowcount != 1:
            raise PlanRejectedError(f"network {net!r} has no {wanted[net]} free IPs")


def _claimed_events(
    c: _Claim, step: dict[str, int], group_after: dict[str, int]
) -> list[EventItem]:
    """The `instance_claimed` events, each host's generations counted on from `step`."""
    items: list[EventItem] = []
    for i in c.instances:
        step[i.host] += 1
        items.append(
            _claimed(
                i,
                c.placement_id,
                c.host_generations[i.host] + step[i.host],
                group_after.get(instance_set_key(i.project, i.server_group) or ""),
                c.now,
            )
        )
    return items


def _instance_values(i: NewInstance, placement_id: str, now: float) -> dict[str, Any]:
    """The instances row of a new claim."""
    return {
        "id": i.id,
        "project": i.project,
        "flavor": i.flavor,
        "host": i.host,
        "cluster": i.cluster,
        "server_group": i.server_group,
        "placement": i.footprint,
        "placement_id": placement_id,
        "business_type": i.business_type,
        "preemptible": i.preemptible,
        "migratable": i.migratable,
        "created_at": now if i.created_at is None else i.created_at,
        "network": i.network,
    }


def _claimed(
    i: NewInstance, placement_id: str, generation: int, group_generation: int | None, now: float
) -> tuple[str, str | None, int | None, dict[str, Any]]:
    """The `instance_claimed` event of a new claim (kind, host, generation after, payload)."""
    return (
        "instance_claimed",
        i.host,
        generation,
        {
            "instance_id": i.id,
            "cluster": i.cluster,
            "flavor": i.flavor,
            "footprint": i.footprint,
            "server_group": i.server_group,
            "group_generation": group_generation,
            "project": i.project,
            "placement_id": placement_id,
            "preemptible": i.preemptible,
            "business_type": i.business_type,
            "network": i.network,
            "created_at": now if i.created_at is None else i.created_at,
        },
    )


def _check_plan(
    rows: Sequence[tuple[str, str | None, Footprint]],
    new: Sequence[NewInstance],
    capacities: dict[str, HostCapacity],
    sets: dict[str, tuple[str, int, int | None]],
    sizes: dict[str, int],
) -> None:
    """Re-verify a plan against the rows read in its transaction: the current instances on the
    touched hosts (host, set key, footprint) plus the new ones fit every host's inventory, per NUMA
    cell and per host; each touched deployment set (policy, max per host, max size) keeps its
    anti-affinity or affinity and its size (`sizes`: the current members of the sets with a
    maximum size or affinity). Raises `PlanRejectedError`."""
    hosts = sorted({i.host for i in new})
    by_host: dict[str, list[Footprint]] = {h: [] for h in hosts}
    members: dict[tuple[str, str], int] = {}
    for host, group, fp in rows:
        by_host[host].append(fp)
        if group is not None:
            members[(group, host)] = members.get((group, host), 0) + 1
    for i in new:
        by_host[i.host].append(i.footprint)
        key = instance_set_key(i.project, i.server_group)
        if key is not None:
            members[(key, i.host)] = members.get((key, i.host), 0) + 1
    for host in hosts:
        cap = capacities.get(host)
        if cap is None:
            raise PlanRejectedError(f"no inventory given for host {host!r}")
        cell_used, host_used = sum_footprints(
            by_host[host], cap.device_types, cap.cell_cap.shape[0]
        )
        if (cell_used > cap.cell_cap).any() or (host_used > cap.host_cap).any():
            raise PlanRejectedError(f"host {host!r} would be over-committed")
    for gid, (policy, max_per_host, max_size) in sets.items():
        if policy == "affinity":
            _check_affinity(gid, rows, new, sizes.get(gid, 0))
        if policy == "anti-affinity":
            for (group, host), n in members.items():
                if group == gid and n > max_per_host:
                    raise PlanRejectedError(
                        f"deployment set {gid!r} would have {n} members on host {host!r}"
                    )
        if max_size is not None:
            adding = sum(1 for i in new if instance_set_key(i.project, i.server_group) == gid)
            if sizes.get(gid, 0) + adding > max_size:
                raise PlanRejectedError(f"deployment set {gid!r} would exceed {max_size} members")


def _check_affinity(
    gid: str,
    rows: Sequence[tuple[str, str | None, Footprint]],
    new: Sequence[NewInstance],
    members: int,
) -> None:
    """An affinity set's members share one host, across clusters (docs/service.md, "Placing"):
    the new members go to a host already holding members (`rows`: the instances on the touched
    hosts), or all to one host when the set has none (`members`: its current count)."""
    hosts = sorted({i.host for i in new if instance_set_key(i.project, i.server_group) == gid})
    if not hosts:
        return
    held = {host for host, group, _ in rows if group == gid}
    if members == 0 and len(hosts) > 1:
        raise PlanRejectedError(f"deployment set {gid!r} (affinity) would span hosts {hosts}")
    if members > 0 and not held.issuperset(hosts):
        raise PlanRejectedError(
            f"deployment set {gid!r} (affinity) has its members elsewhere than {hosts}"
        )
