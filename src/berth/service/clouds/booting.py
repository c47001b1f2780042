"""Booting what Berth placed: intent first, then the cloud; alternates when the cloud says no.

After a placement's claims are committed in Berth's store, each instance is booted in its
cluster on exactly its host (`CloudDriver.boot`, server name = instance id):

1. The boot intents are written durably (`Store.put_intents`, state `intent`) before the first
   cloud call, so that a retry or a restarted replica finds the server by name
   (`berth.service.clouds.reconcile` adopts it, or boots it when the cloud never got it).
2. A refusal (`REFUSED`, an unknown host) or a build that ends in ERROR releases the claim,
   claims the next alternate the decision returned (`claiming.claim_on`) and boots there; the
   failed attempt is recorded (`tried`). When no alternate is left, the record is `failed` with
   every host tried and why, and the claim stays released.
3. A placement is all or nothing: when one of its instances cannot boot anywhere, the servers of
   the others are deleted and their claims released, and the request fails with
   `BootFailedError` (409 `boot_failed`, the hosts tried in its details).

`UNREACHABLE` means the outcome is unknown: the claim and the intent stay, and the next
reconciliation adopts the server if it exists, or boots it. A build that fails later (the change
feed reports ERROR) goes through step 2 from the sync loop (`retry_build`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from berth.cloud.driver import BootRequest, CloudDriver, CloudError, CloudErrorKind, ServerState
from berth.service.clouds.claiming import Claim, claim_on
from berth.service.clouds.errors import BootFailedError, ClaimRefusedError
from berth.service.clouds.registry import CloudRegistry
from berth.service.replica import Replica
from berth.store.errors import NotFoundError
from berth.store.repo import ServerRecord

log = logging.getLogger("berth.service.clouds")

WORKERS = 8
"""Boots of one replica in flight at once (a cloud call each)."""


@dataclass(frozen=True)
class BootTarget:
    """One instance of a placement: the host chosen and the alternates, best first."""

    claim: Claim
    host: str
    alternates: tuple[str, ...]


class Booter:
    """Boots placed instances through their cluster's driver (one per replica)."""

    def __init__(self, replica: Replica, registry: CloudRegistry) -> None:
        self.replica = replica
        self.store = replica.store
        self.registry = registry
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="berth-boot")
        self._lock = threading.Lock()
        self._inflight: set[str] = set()

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    # ------------------------------------------------------------------ who is booting
    def inflight(self, instance_id: str) -> bool:
        """True while this replica is booting `instance_id` (the sync loop leaves it alone)."""
        with self._lock:
            return instance_id in self._inflight

    @contextlib.contextmanager
    def _booting(self, ids: Sequence[str]) -> Iterator[None]:
        with self._lock:
            self._inflight.update(ids)
        try:
            yield
        finally:
            with self._lock:
                self._inflight.difference_update(ids)

    # ------------------------------------------------------------------ a placement
    def write_intents(self, cluster: str, targets: Sequence[BootTarget]) -> None:
        """Step 1: the intents, durably, before any cloud call."""
        self.store.put_intents(
            [(t.claim.instance_id, cluster, t.host, t.claim.flavor, t.alternates) for t in targets]
        )

    def boot_placement(self, cluster: str, targets: Sequence[BootTarget]) -> list[ServerRecord]:
        """Write the intents, boot every instance (alternates on refusal); all or nothing."""
        driver = self.registry.get(cluster)
        if driver is None:
            return []
        self.write_intents(cluster, targets)
        ids = [t.claim.instance_id for t in targets]
        with self._booting(ids):
            records = list(
                self._pool.map(lambda t: self.boot(driver, t.claim, t.host, t.alternates), targets)
            )
            failed = [r for r in records if r.state == "failed"]
            if failed:
                self._roll_back(driver, records, failed)
        if failed:
            raise BootFailedError(
                "; ".join(f"{r.instance_id}: {r.fault}" for r in failed),
                {
                    "reason": "boot_failed",
                    "instances": {r.instance_id: list(r.tried) for r in failed},
                },
            )
        return records

    def boot(
        self, driver: CloudDriver, claim: Claim, host: str, alternates: Sequence[str]
    ) -> ServerRecord:
        """Boot on `host`, then on the alternates while the cloud says no; the final record."""
        left = tuple(alternates)
        while True:
            record, error = self.boot_once(driver, claim, host)
            if record is not None:
                return record
            moved = self.next_host(claim, host, left, error)
            if isinstance(moved, ServerRecord):
                return moved
            host, left = moved

    def boot_once(
        self, driver: CloudDriver, claim: Claim, host: str
    ) -> tuple[ServerRecord | None, str]:
        """One boot on `host`: the record when the cloud took it (or its answer is unknown),
        else None and what went wrong."""
        request = BootRequest(
            name=claim.instance_id,
            flavor=claim.flavor,
            host=host,
            project=claim.project,
            metadata={"berth_instance": claim.instance_id},
        )
        try:
            server = driver.boot(request)
        except CloudError as exc:
            if exc.kind is CloudErrorKind.UNREACHABLE:  # unknown outcome: reconcile decides
                log.warning("boot of %s on %s: %s", claim.instance_id, host, exc)
                return self.store.set_server(claim.instance_id, state="intent", fault=str(exc)), ""
            return None, str(exc)
        if server.state is ServerState.ERROR:
            with contextlib.suppress(CloudError):
                driver.delete(server.id)
            return None, f"failed: {server.fault or 'the build failed'}"
        record = self.store.record_boot(
            claim.instance_id, server.id, server.state.value, server.host or host
        )
        return record, ""

    def next_host(
        self, claim: Claim, host: str, alternates: Sequence[str], error: str
    ) -> tuple[str, tuple[str, ...]] | ServerRecord:
        """Step 2: release the claim on `host` and claim the first alternate that fits in
        Berth's model; (host, the alternates after it), or the `failed` record."""
        iid = claim.instance_id
        self.store.set_server(
            iid, state="intent", fault=error, tried={"host": host, "error": error}
        )
        with contextlib.suppress(NotFoundError):
            self.replica.release(iid)
        for i, alt in enumerate(alternates):
            try:
                claim_on(self.replica, claim, alt)
            except ClaimRefusedError as exc:
                why = f"berth: {exc}"
                self.store.set_server(
                    iid, state="intent", fault=why, tried={"host": alt, "error": why}
                )
                continue
            self.store.put_intent(iid, claim.cluster, alt, claim.flavor, alternates[i + 1 :])
            return alt, tuple(alternates[i + 1 :])
        record = self.store.get_server(iid)
        tried = "; ".join(f"{t['host']}: {t['error']}" for t in record.tried)
        return self.store.set_server(
            iid, state="failed", fault=f"no host booted it ({tried})", alternates=()
        )

    def retry_build(
        self, driver: CloudDriver, record: ServerRecord, server_id: str, fault: str
    ) -> None:
        """A build the cloud accepted ended in ERROR (from the change feed): delete that server,
        and boot again on the next alternate, or give up (`failed`, claim released)."""
        iid = record.instance_id
        with self._booting([iid]):
            with contextlib.suppress(CloudError):
                driver.delete(server_id)
            try:
                claim = Claim.of(self.store.get_instance(iid))
            except NotFoundError:
                self.store.set_server(iid, state="failed", fault=f"failed: {fault}")
                return
            moved = self.next_host(claim, record.host, record.alternates, f"failed: {fault}")
            if isinstance(moved, tuple):
                self.boot(driver, claim, *moved)

    def resume(self, driver: CloudDriver, record: ServerRecord) -> ServerRecord:
        """Boot an intent the cloud never got (a restart between intent and boot)."""
        iid = record.instance_id
        with self._booting([iid]):
            try:
                claim = Claim.of(self.store.get_instance(iid))
            except NotFoundError:  # the claim is gone: nothing to boot
                return self.store.set_server(
                    iid, state="failed", fault="claim released before boot"
                )
            return self.boot(driver, claim, record.host, record.alternates)

    def _roll_back(
        self, driver: CloudDriver, records: Sequence[ServerRecord], failed: Sequence[ServerRecord]
    ) -> None:
        """Step 3: undo the placement's booted instances (their servers and claims)."""
        why = "rolled back: " + ", ".join(f"{r.instance_id} could not boot" for r in failed)
        for r in records:
            if r.state == "failed":
                continue
            if r.server_id is not None:
                with contextlib.suppress(CloudError):
                    driver.delete(r.server_id)
            with contextlib.suppress(NotFoundError):
                self.replica.release(r.instance_id)
            self.store.set_server(r.instance_id, state="failed", fault=why)
