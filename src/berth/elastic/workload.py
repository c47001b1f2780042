"""A generated day of batch jobs for three groups, shaped on IHEP's published figures.

The figures (IHEP's VPManager talk, 2017): virtual computing served BESIII, JUNO and LHAASO;
2.23 M jobs and 2.37 M CPU-hours from April 2016 to mid-2017 (about 450 days): about 5,000 jobs
a day and 1.06 CPU-hours per job on average; 1,500 cores for virtual computing over ~90 servers
in three OpenStack platforms (2,000 cores in all); a VM boots in under 10 s from shared storage,
syncs and updates in about a minute and joins HTCondor in under 10 s, the VM's agent script runs
once a minute. What the talk does not give is assumed and said so here: the split between groups
(BESIII 50 %, JUNO 30 %, LHAASO 20 %), a working-day shape (submissions follow a sine peaking at
15:00 local time, 4x the 03:00 rate), jobs submitted in batches (one user's campaign: geometric
size with mean 40), and lognormal run times (sigma 1.0) with the 1.06 h mean.

Pure and seeded: the same seed gives the same jobs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

DAY = 86_400.0
JOBS_PER_DAY = 5_000
MEAN_HOURS = 1.06
SPLIT: Mapping[str, float] = {"besiii": 0.5, "juno": 0.3, "lhaaso": 0.2}


@dataclass(frozen=True)
class Jobs:
    """Jobs as columns, sorted by submit time; one slot each."""

    submit: np.ndarray  # seconds
    group: np.ndarray  # index into `groups`
    runtime: np.ndarray  # seconds
    groups: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.submit)


def daily_rate(t: np.ndarray, peak_hour: float = 15.0, ratio: float = 4.0) -> np.ndarray:
    """Relative submission rate over the day (mean 1): a sine, peak/trough = ratio."""
    a = (ratio - 1.0) / (ratio + 1.0)
    phase = 2 * math.pi * ((t % DAY) / 3600.0 - peak_hour) / 24.0
    return 1.0 + a * np.cos(phase)


def seed_day_jobs(
    days: int = 1,
    *,
    seed: int = 0,
    jobs_per_day: int = JOBS_PER_DAY,
    mean_hours: float = MEAN_HOURS,
    split: Mapping[str, float] = SPLIT,
    batch_mean: float = 40.0,
    sigma: float = 1.0,
) -> Jobs:
    rng = np.random.default_rng(seed)
    names = tuple(split)
    horizon = days * DAY
    submits: list[np.ndarray] = []
    groups: list[np.ndarray] = []
    for g, name in enumerate(names):
        target = jobs_per_day * days * split[name]
        n_batches = rng.poisson(target / batch_mean)
        # batch times by thinning a uniform over the horizon with the daily shape
        times: list[float] = []
        while len(times) < n_batches:
            t = rng.uniform(0.0, horizon, size=4 * n_batches + 8)
            keep = rng.uniform(0.0, daily_rate(np.array([15 * 3600.0]))[0], size=len(t))
            times.extend(t[keep < daily_rate(t)].tolist())
        times = sorted(times[:n_batches])
        sizes = rng.geometric(1.0 / batch_mean, size=n_batches)
        for t0, size in zip(times, sizes, strict=True):
            spread = rng.uniform(0.0, 120.0, size=size)  # a campaign lands within 2 minutes
            submits.append(np.minimum(t0 + spread, horizon - 1.0))
            groups.append(np.full(size, g))
    submit = np.concatenate(submits) if submits else np.zeros(0)
    group = np.concatenate(groups).astype(np.int64) if groups else np.zeros(0, dtype=np.int64)
    mu = math.log(mean_hours * 3600.0) - sigma**2 / 2
    runtime = np.clip(rng.lognormal(mu, sigma, size=len(submit)), 60.0, 48 * 3600.0)
    order = np.argsort(submit, kind="stable")
    return Jobs(submit[order], group[order], runtime[order], names)
