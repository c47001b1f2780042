"""Replays for the capacity planner: one purchase, one replay; run here, on local processes, on a
Dask cluster or on a Ray cluster (docs/plan-capacity.md).

`CapacityProblem` is everything a worker needs (the trace, the existing fleet, the offered host
types, the policy); `evaluate(problem, purchase)` replays the fleet plus the purchase and
measures it (pure: the same problem and purchase give the same outcome on any worker). Runners
call it for a batch of purchases:

* `SerialRunner`: in this process, one after another;
* `ProcessRunner`: a `ProcessPoolExecutor` on this machine's cores; each worker receives the
  problem once, when it starts;
* `DaskRunner`: a `distributed.Client` (a scheduler's address, or a client the caller made);
  the problem is scattered to every worker once, then each task carries only a purchase;
* `RayRunner`: a Ray cluster (``ray://head:10001``, ``auto``, or a GCS address); the problem is
  put in the object store once, then each task carries only a purchase.

A runner has `workers` (how many replays it runs at once), is called with a batch of purchases
and returns their outcomes in the batch's order, and is closed once. `distributed` and `ray` are
imported here only, and only when their runner is made (docs/architecture.md).

A runner calls `on_done(outcome)` as each replay finishes (the CLI's progress bar).
"""

from __future__ import annotations

import logging
import multiprocessing
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.model import Fleet
from berth.sim.capacity_plan import Outcome, PlanError, Purchase
from berth.sim.fleets import Sizing, build_sizing
from berth.sim.policies import Policy
from berth.sim.replay import ACCEPTED, EVICTED, ReplayOptions, Simulation
from berth.sim.trace import Business, Trace

Done = Callable[[Outcome], None]


@dataclass(frozen=True)
class CapacityProblem:
    trace: Trace
    fleet: Fleet
    """The fleet as it is (it may have no hosts: a green field)."""
    offered: dict[str, dict[str, Any]]
    """Offered host type name -> Host fields (without name and zone), in offer order."""
    clusters: list[tuple[str, str]]
    """(IDC, cluster) pairs; a purchase buys its hosts in each."""
    policy: Policy
    target_business: tuple[int, ...] = (int(Business.ON_DEMAND),)
    seed: int = 0
    preemption: bool = True

    @property
    def target(self) -> npt.NDArray[np.bool_]:
        """The trace's requests the acceptance target counts."""
        return np.isin(self.trace.business, self.target_business)


def purchase_fleet(problem: CapacityProblem, purchase: Purchase) -> Fleet:
    """The existing fleet plus `purchase` (hosts named ``{idc}-{cluster}-{type}-new-{n:04d}``)."""
    names = list(problem.offered)
    counts = {f"{t}-new": n for t, n in zip(names, purchase, strict=True) if n}
    if not counts:
        return problem.fleet
    sizing = Sizing(
        per_cluster=counts,
        clusters=[(idc, name, None) for idc, name in problem.clusters],
        host_types={f"{t}-new": problem.offered[t] for t in names},
        text="purchase",
    )
    return problem.fleet.model_copy(update={"hosts": [*problem.fleet.hosts, *build_sizing(sizing)]})


def evaluate(problem: CapacityProblem, purchase: Purchase) -> Outcome:
    """Replay the trace on the fleet plus `purchase` under the problem's policy; measure it."""
    from berth.sim.evictions import default_evictor

    started = time.perf_counter()
    fleet = purchase_fleet(problem, purchase)
    if not fleet.hosts:
        return Outcome(purchase, 0.0, 0.0, None, 0.0, 0, 0.0)
    tr = problem.trace
    options = ReplayOptions(
        seed=problem.seed,
        sample_every=tr.window,
        evictor=default_evictor() if problem.preemption else None,
        bound=False,
    )
    run = Simulation(tr, fleet, options).run(problem.policy)
    target = list(problem.target_business)
    arrived = run.arrivals[:, target].sum(axis=1)
    accepted = run.accepted[:, target].sum(axis=1)
    placed = ((run.outcome == ACCEPTED) | (run.outcome == EVICTED)) & tr.preemptible
    evicted = (run.outcome == EVICTED) & tr.preemptible
    return Outcome(
        purchase=purchase,
        acceptance=_rate(int(accepted[1:].sum()), int(arrived[1:].sum())),
        warmup_acceptance=_rate(int(accepted[0]), int(arrived[0])),
        eviction_rate=_rate(int(evicted.sum()), int(placed.sum())),
        overall=_rate(int(run.accepted[1:].sum()), int(run.arrivals[1:].sum())),
        hosts=len(fleet.hosts),
        wall_s=time.perf_counter() - started,
    )


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


class SerialRunner:
    """Every replay in this process, one after another."""

    workers = 1

    def __init__(self, problem: CapacityProblem, on_done: Done | None = None) -> None:
        self.problem, self.on_done = problem, on_done

    def __call__(self, purchases: Sequence[Purchase]) -> list[Outcome]:
        out = []
        for x in purchases:
            out.append(evaluate(self.problem, x))
            if self.on_done is not None:
                self.on_done(out[-1])
        return out

    def close(self) -> None:
        return None


_WORKER_PROBLEM: list[CapacityProblem] = []
"""The problem a `ProcessRunner` worker received when it started (one per process)."""


def _install(problem: CapacityProblem) -> None:
    _WORKER_PROBLEM[:] = [problem]


def _evaluate_installed(purchase: Purchase) -> Outcome:
    return evaluate(_WORKER_PROBLEM[0], purchase)


class ProcessRunner:
    """Replays on `workers` local processes (the machine's cores)."""

    def __init__(self, problem: CapacityProblem, workers: int, on_done: Done | None = None) -> None:
        methods = multiprocessing.get_all_start_methods()
        # fork shares the compiled kernels and the problem with the workers for free
        context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self.workers, self.on_done = workers, on_done
        self.pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_install, initargs=(problem,)
        )
        # start every worker now, before the caller starts threads of its own (a progress bar):
        # a process forked while another thread holds a lock may never get it
        self.pool.submit(int).result()

    def __call__(self, purchases: Sequence[Purchase]) -> list[Outcome]:
        futures = {self.pool.submit(_evaluate_installed, x): x for x in purchases}
        return _collect(futures, purchases, self.on_done)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class DaskRunner:
    """Replays as tasks on a Dask distributed cluster (`address` like ``tcp://host:8786``, or a
    `distributed.Client` the caller owns)."""

    def __init__(
        self,
        problem: CapacityProblem,
        address: str | None = None,
        *,
        client: Any = None,
        on_done: Done | None = None,
        timeout: float = 20.0,
    ) -> None:
        from distributed import Client

        self.owned = client is None
        self.client = client if client is not None else Client(address, timeout=f"{timeout}s")  # type: ignore[no-untyped-call]
        self.on_done = on_done
        self.workers = max(1, sum(self.client.nthreads().values()))
        self.problem = self.client.scatter(problem, broadcast=True)

    def __call__(self, purchases: Sequence[Purchase]) -> list[Outcome]:
        from distributed import as_completed as dask_completed

        futures = {
            self.client.submit(
                evaluate, self.problem, x, pure=False, key=f"replay-{_key(x)}-{i}"
            ): x
            for i, x in enumerate(purchases)
        }
        done: dict[Purchase, Outcome] = {}
        for future in dask_completed(list(futures)):  # type: ignore[no-untyped-call]
            outcome = future.result()
            done[futures[future]] = outcome
            if self.on_done is not None:
                self.on_done(outcome)
        return [done[x] for x in purchases]

    def close(self) -> None:
        if self.owned:
            self.client.close()


class RayRunner:
    """Replays as tasks on a Ray cluster: `address` is ``ray://host:10001`` (Ray Client, from
    any machine), ``auto`` (the cluster this machine belongs to) or a GCS address
    ``host:6379`` (a driver on a cluster node). If this process is already connected to Ray,
    that connection is used (and left open by `close`)."""

    def __init__(
        self,
        problem: CapacityProblem,
        address: str,
        *,
        on_done: Done | None = None,
        timeout: float = 20.0,
    ) -> None:
        import ray

        self.owned = not ray.is_initialized()
        if self.owned:
            _wait_reachable(address, timeout)
            # the replays print nothing worth forwarding; Ray's own INFO lines would bury the
            # progress bar
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        try:
            self.on_done = on_done
            cpus = ray.cluster_resources().get("CPU", 0)  # type: ignore[no-untyped-call]
            self.workers = max(1, int(cpus))
            self.problem = ray.put(problem)
            self.replay = ray.remote(num_cpus=1)(evaluate)
        except BaseException:
            self.close()
            raise

    def __call__(self, purchases: Sequence[Purchase]) -> list[Outcome]:
        import ray

        refs = {self.replay.remote(self.problem, x): x for x in purchases}
        pending = list(refs)
        done: dict[Purchase, Outcome] = {}
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                outcome: Outcome = ray.get(ref)
                done[refs[ref]] = outcome
                if self.on_done is not None:
                    self.on_done(outcome)
        return [done[x] for x in purchases]

    def close(self) -> None:
        import ray

        if self.owned:
            ray.shutdown()


def _wait_reachable(address: str, timeout: float) -> None:
    """Fail within `timeout` seconds when nothing listens at a ``ray://host:port`` or
    ``host:port`` address (Ray Client alone retries for about a minute); ``auto`` is Ray's to
    resolve, and Ray fails fast when no cluster runs here."""
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        if address == "auto":
            return
        raise PlanError(f"{address!r} is not ray://host:port, host:port or auto")
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise ConnectionError(f"nothing answers at {host}:{port} ({exc})") from None
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def _key(purchase: Purchase) -> str:
    return "-".join(str(n) for n in purchase) + f"-{time.monotonic_ns()}"


def _collect(
    futures: dict[Future[Outcome], Purchase], purchases: Sequence[Purchase], on_done: Done | None
) -> list[Outcome]:
    done: dict[Purchase, Outcome] = {}
    for future in as_completed(futures):
        outcome = future.result()
        done[futures[future]] = outcome
        if on_done is not None:
            on_done(outcome)
    return [done[x] for x in purchases]
