"""Strings per host as small integer codes: vocabularies and keyed values (metadata, capabilities).

Zones, traits, aggregate metadata and capabilities are interned so that filters compare integers
or bitmasks instead of strings (`table.HostTable` holds them as columns).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from berth.core.flavors import SpecMatch

Mask = npt.NDArray[np.bool_]


class Vocabulary:
    """Strings interned to dense integer codes."""

    def __init__(self, words: Iterable[str] = ()) -> None:
        self.words: list[str] = []
        self.codes: dict[str, int] = {}
        for word in words:
            self.code(word)

    def code(self, word: str) -> int:
        found = self.codes.get(word)
        if found is None:
            found = self.codes[word] = len(self.words)
            self.words.append(word)
        return found

    def get(self, word: str) -> int:
        """The word's code, or -1 when no host has it."""
        return self.codes.get(word, -1)

    def __len__(self) -> int:
        return len(self.words)


@dataclass
class KeyedValues:
    """A string attribute per host for one key (aggregate metadata or a capability).

    ``codes[row]`` indexes ``values.words``; -1 where the host lacks the key. A requirement is
    evaluated once per distinct value, then gathered to hosts: cost O(values + hosts).
    """

    codes: npt.NDArray[np.int32]
    values: Vocabulary = field(default_factory=Vocabulary)

    def copy(self) -> KeyedValues:
        return KeyedValues(self.codes.copy(), Vocabulary(self.values.words))

    def mask(self, spec: SpecMatch) -> Mask:
        ok = np.array([spec.matches(v) for v in self.values.words] + [False], dtype=bool)
        return ok[self.codes]  # code -1 picks the trailing False


def extend_keyed(store: dict[str, KeyedValues], rows: list[dict[str, str]], n0: int) -> None:
    """Append `rows` (one key -> value mapping per new host, after the first `n0`) to `store`."""
    n = len(rows)
    for values in store.values():
        values.codes = np.concatenate([values.codes, np.full(n, -1, dtype=np.int32)])
    for r, mapping in enumerate(rows, start=n0):
        for key, value in mapping.items():
            kv = store.get(key)
            if kv is None:
                kv = store[key] = KeyedValues(np.full(n0 + n, -1, dtype=np.int32))
            kv.codes[r] = kv.values.code(value)
