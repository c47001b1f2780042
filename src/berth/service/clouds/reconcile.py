"""Keeping Berth's claims equal to the cloud's servers: one change at a time, and in full.

`Repair.server` and `Repair.gone` apply what the change feed says about one server; `reconcile`
compares the whole cluster (`CloudDriver.servers()`) with Berth's instances and server records
and repairs every difference:

* a server Berth booted or adopted is gone: its claim is released;
* a server is on another host than Berth's claim (moved behind Berth's back): the claim moves
  (released, then claimed on that host); a move that is a defrag step is left to
  `defrag_exec`, which confirms or aborts the step;
* a server Berth does not know: imported as an instance (claimed on its host, its record
  adopted); one whose claim Berth gave up on (`failed`) is an orphan and is deleted;
* a boot intent with no server (a restart between intent and boot): booted now, on its host
  or its alternates (`Booter.resume`); an intent whose server exists (a restart between boot
  and the record) is adopted; an instance with no record at all is treated as an intent.

Instances and intents younger than `grace` seconds are left alone (another replica may be in
the middle of booting them), as are the ones this replica is booting (`Booter.inflight`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field

from berth.cloud.driver import CloudDriver, CloudError, Server, ServerState
from berth.service.clouds.booting import Booter
from berth.service.clouds.claiming import Claim, check_fits, claim_on
from berth.service.clouds.defrag_exec import DefragExecutor
from berth.service.clouds.errors import ClaimRefusedError
from berth.service.replica import Replica
from berth.store.defrag import is_migration
from berth.store.errors import NotFoundError, PlanRejectedError
from berth.store.repo import InstanceRow, ServerRecord, instance_set_key

log = logging.getLogger("berth.service.clouds")

ELASTIC = "elastic"
ELASTIC_SERVER = "berth_vm"
"""The elastic pools' VMs (business type `elastic`; their servers carry `berth_vm` in their
metadata) belong to the elastic loop (`berth.service.elastic`), which boots them under the VM's
name and reconciles them itself: the repairs here leave them alone."""

GONE = ("deleted", "failed")
"""Record states whose server is not (or no longer) Berth's."""


@dataclass
class Repairs:
    """What one reconcile (or one change) did, by kind: instance ids."""

    released: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    imported: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    booted: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unaccounted: dict[str, str] = field(default_factory=dict)

    def count(self) -> int:
        return sum(len(v) for v in vars(self).values())

    def merge(self, other: Repairs) -> None:
        for key in ("released", "moved", "imported", "adopted", "booted", "deleted"):
            getattr(self, key).extend(getattr(other, key))
        self.unaccounted.update(other.unaccounted)


class Repair:
    """Applies the cloud's truth about one cluster's servers to Berth's claims."""

    def __init__(
        self,
        replica: Replica,
        booter: Booter,
        defrag: DefragExecutor,
        grace: float = 30.0,
        build_timeout: float = 600.0,
    ) -> None:
        self.replica = replica
        self.store = replica.store
        self.booter = booter
        self.defrag = defrag
        self.grace = grace
        self.build_timeout = build_timeout

    # ------------------------------------------------------------------ one change
    def server(self, cluster: str, driver: CloudDriver, s: Server, out: Repairs) -> None:
        """The server `s` is as it says (created, changed state or host)."""
        if ELASTIC_SERVER in s.metadata:
            return  # an elastic pool's VM: its loop keeps its claim and its server
        record = self.store.server_by_cloud_id(cluster, s.id) or self.store.find_server(s.name)
        iid = record.instance_id if record is not None else s.name
        if record is not None and record.server_id == s.id and record.state == "deleted":
            return  # news older than the server's deletion
        if s.state is ServerState.DELETED:  # a delete under way (Nova's delete.start) is gone
            self.gone(cluster, s.id, out)
            return
        if record is not None and record.server_id not in (None, s.id):
            if s.state is ServerState.ERROR:  # an earlier failed build of ours, left behind
                self._delete(driver, s, out)
            return
        if self.booter.inflight(iid):  # record the news; the booter acts on failures
            if (
                record is not None
                and record.server_id in (None, s.id)
                and s.state is not ServerState.ERROR
            ):
                self.store.set_server(iid, state=s.state.value, server_id=s.id, host=s.host)
            return
        if self.defrag.observe(s, iid, record):
            return
        if record is not None and record.state == "failed":
            self._delete(driver, s, out)  # Berth gave up on it: an orphan
            return
        if s.state is ServerState.ERROR:
            if record is not None and record.state in ("intent", "building"):
                self.booter.retry_build(driver, record, s.id, s.fault or "the build failed")
            elif record is not None:
                self.store.set_server(iid, state="error", fault=s.fault, server_id=s.id)
            return
        if self._stuck(record, s):
            assert record is not None
            why = f"still building after {self.build_timeout:g} s"
            self.booter.retry_build(driver, record, s.id, why)
            return
        inst = self._instance(iid)
        if record is None or record.state == "deleted":
            if inst is None:
                self._import(cluster, s, out)
            else:  # our claim, its record lost: adopt
                self.store.adopt_server(
                    iid, cluster, s.id, s.host or inst.host, s.flavor, s.state.value
                )
                out.adopted.append(iid)
            record = self.store.find_server(iid)
            inst = self._instance(iid)
        elif record.server_id is None:
            out.adopted.append(iid)
        if record is not None and (
            record.server_id != s.id or record.state != s.state.value or record.host != s.host
        ):
            self.store.set_server(iid, state=s.state.value, server_id=s.id, host=s.host)
        if inst is None:
            if record is not None and s.host is not None and iid not in out.imported:
                self._import(cluster, s, out)  # its claim was released, the server lives on
            return
        if s.host is not None and s.host != inst.host and s.state is not ServerState.BUILDING:
            self._move(inst, s.host, out)

    def gone(self, cluster: str, server_id: str, out: Repairs) -> None:
        """The cloud's server `server_id` no longer exists."""
        record = self.store.server_by_cloud_id(cluster, server_id)
        if record is None or record.state in GONE:
            return
        iid = record.instance_id
        self.store.set_server(iid, state="deleted")
        if self.booter.inflight(iid):
            return
        with contextlib.suppress(NotFoundError):
            self.replica.release(iid)
            out.released.append(iid)

    # ------------------------------------------------------------------ in full
    def reconcile(self, cluster: str, driver: CloudDriver) -> Repairs:
        """Compare everything and repair every difference (see the module's docstring)."""
        out = Repairs()
        self.replica.sync()
        servers = driver.servers()
        for s in servers:
            try:
                self.server(cluster, driver, s, out)
            except (CloudError, PlanRejectedError) as exc:
                out.unaccounted[s.name] = str(exc)
        present = {s.name for s in servers} | {
            r.instance_id
            for s in servers
            if (r := self.store.server_by_cloud_id(cluster, s.id)) is not None
        }
        records = {r.instance_id: r for r in self.store.list_servers(cluster)}
        now = time.time()
        for inst in self.store.list_instances(cluster=cluster, limit=10_000_000):
            if is_migration(inst.id) or inst.id in present or self.booter.inflight(inst.id):
                continue
            if inst.business_type == ELASTIC:
                continue  # booted by the elastic loop under its VM's name; it reconciles it
            record = records.get(inst.id)
            if record is None or record.state == "intent":
                age = now - (inst.created_at if record is None else record.updated_at)
                if age >= self.grace:
                    self._resume(cluster, driver, inst, record, out)
                continue
            with contextlib.suppress(NotFoundError):
                self.replica.release(inst.id)
                out.released.append(inst.id)
            if record.state not in GONE:
                self.store.set_server(inst.id, state="deleted")
        for record in records.values():  # intents whose claim is gone: nothing to boot
            iid = record.instance_id
            if (
                record.state == "intent"
                and iid not in present
                and not self.booter.inflight(iid)
                and now - record.updated_at >= self.grace
                and self._instance(iid) is None
            ):
                self.store.set_server(iid, state="failed", fault="claim released before boot")
        return out

    # ------------------------------------------------------------------ repairs
    def _stuck(self, record: ServerRecord | None, s: Server) -> bool:
        """A server Berth booted that has been building for longer than `build_timeout`."""
        return (
            record is not None
            and s.state is ServerState.BUILDING
            and record.server_id == s.id
            and record.state == "building"
            and time.time() - record.updated_at > self.build_timeout
        )

    def _instance(self, iid: str) -> InstanceRow | None:
        try:
            return self.store.get_instance(iid)
        except NotFoundError:
            return None

    def _import(self, cluster: str, s: Server, out: Repairs) -> None:
        """A server Berth does not know: claim it where it runs and adopt it."""
        if s.host is None or s.state in (ServerState.ERROR, ServerState.DELETED):
            return
        group = s.server_group  # a member of a set Berth knows (of its project) joins it
        if instance_set_key(s.project, group) not in self.replica.groups:
            group = None
        claim = Claim(s.name, cluster, s.flavor, s.project, group, "cloud-import")
        try:
            claim_on(self.replica, claim, s.host, check_set=False)
        except ClaimRefusedError as exc:
            out.unaccounted[s.name] = str(exc)
            log.warning("server %s on %s: cannot be claimed: %s", s.name, s.host, exc)
            return
        self.store.adopt_server(s.name, cluster, s.id, s.host, s.flavor, s.state.value)
        out.imported.append(s.name)

    def _move(self, inst: InstanceRow, host: str, out: Repairs) -> None:
        """The server runs on `host`, not where Berth claimed it: move the claim (its
        deployment set follows as it is). When Berth's model says it does not fit there, the
        claim stays where it was (its resources stay accounted for) and the move is reported."""
        try:
            check_fits(self.replica, Claim.of(inst), host, check_set=False)
        except ClaimRefusedError as exc:
            out.unaccounted[inst.id] = f"moved to {host} by the cloud: {exc}"
            log.warning("instance %s moved to %s: cannot be claimed there: %s", inst.id, host, exc)
            return
        with contextlib.suppress(NotFoundError):
            self.replica.release(inst.id)
        try:
            claim_on(self.replica, Claim.of(inst), host, check_set=False)
        except ClaimRefusedError as exc:
            out.unaccounted[inst.id] = str(exc)
            log.warning("instance %s moved to %s: cannot be claimed there: %s", inst.id, host, exc)
            return
        self.store.set_server(inst.id, state="active", host=host)
        out.moved.append(inst.id)

    def _delete(self, driver: CloudDriver, s: Server, out: Repairs) -> None:
        with contextlib.suppress(CloudError):
            driver.delete(s.id)
            out.deleted.append(s.name)

    def _resume(
        self,
        cluster: str,
        driver: CloudDriver,
        inst: InstanceRow,
        record: ServerRecord | None,
        out: Repairs,
    ) -> None:
        """A claim whose server the cloud never got: boot it now."""
        if record is None:
            record = self.store.put_intent(inst.id, cluster, inst.host, inst.flavor, ())
        done = self.booter.resume(driver, record)
        (out.booted if done.state != "failed" else out.released).append(inst.id)
