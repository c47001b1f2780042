"""A weigher that makes replicas of one database prefer different hosts (rendezvous hashing).

Each (replica, host) pair gets a fixed pseudo-random value in [0, 1). With a small weight it only
reorders hosts that score alike on the real weighers, so packing is kept almost whole while two
replicas rarely pick the same host at the same moment, and lose fewer generation races. It is an
ordinary core weigher plugin (`berth.service.spread:ReplicaSpreadWeigher`), enabled by
`berth serve --replica-spread W`.
"""

from __future__ import annotations

import hashlib
import weakref

import numpy as np
from pydantic import BaseModel, ConfigDict

from berth.core.filters.base import Context, Workload
from berth.core.table import HostTable
from berth.core.weighers.base import F64, I64, HostWeigher


class ReplicaSpreadParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: str = ""


class ReplicaSpreadWeigher(HostWeigher):
    """A fixed pseudo-random preference per (replica, host)."""

    name = "replica_spread"
    Params = ReplicaSpreadParams

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self._cache: weakref.WeakKeyDictionary[HostTable, F64] = weakref.WeakKeyDictionary()

    def _values(self, table: HostTable) -> F64:
        cached = self._cache.get(table)
        if cached is not None and cached.shape[0] == len(table):
            return cached
        assert isinstance(self.params, ReplicaSpreadParams)
        seed = self.params.seed.encode()
        values = np.array(
            [
                int.from_bytes(hashlib.blake2b(seed + b"/" + n.encode(), digest_size=8).digest())
                / 2.0**64
                for n in table.names
            ],
            dtype=np.float64,
        )
        self._cache[table] = values
        return values

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def raw(self, ctx: Context, rows: I64) -> F64:
        return self._values(ctx.table)[rows]
