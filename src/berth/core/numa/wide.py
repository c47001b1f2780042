"""The claim rule on hosts of up to eight cells and guests of up to eight cells, vectorised.

`vector` keeps the two-cell formulas for a table whose cell axis is two wide and guests of at
most two cells (today's fleets, unchanged); everything else comes here. The table's cell axis
is as wide as its widest host, padded with cells of zero capacity (which hold no guest cell:
every guest cell needs a CPU), so one array still holds every host.

Closed forms (docs/numa.md has the proofs), on every host at once:

* SINGLE: the sum of the cells' slots; the claim rule takes the fitting cell with the fewest.
* EVEN over k cells: ``min over j < k of floor(S_j / (k - j))`` with S_j the sum of the slots
  of all cells but the j roomiest; the claim rule takes a set of k cells that keeps the count
  at count - 1 (the proof says which), the closest (NUMA distance) first, then the roomiest.
* FIXED and FLEX over two cells on hosts whose cells beyond the first two are empty (every
  two-cell host): `vector`'s two-cell formulas on the first two cells.

Otherwise (`needs_search`), the exact per-host search of `search`, row by row, memoised by
each host's free state; FLEX on the other hosts, the exact search of `flex_wide` likewise
(a FLEX guest whose `required` PCI devices must sit in its two cells fits there nowhere: the
`numa_topology` filter refuses such hosts for it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.demand import Demand
from berth.core.flavors import NumaMode, PciPolicy
from berth.core.numa.flex_wide import FlexSearch
from berth.core.numa.rule import BIG as NO_LIMIT
from berth.core.numa.search import Searcher
from berth.core.resources import CELL_BASE

I64 = npt.NDArray[np.int64]
BIG = np.int64(NO_LIMIT)
RAW_STATES = 200_000
"""At most this many raw host states kept per search (`_state_counts`)."""


def guest_cells(d: Demand) -> int:
    """How many host cells one guest takes."""
    return d.guest_cells


def units(cell_free: I64, vec: I64) -> I64:
    """Per host and cell: how many copies of `vec` fit (shape (n, cells))."""
    out = np.full_like(cell_free[:, :, 0], BIG)  # same memory order as the columns
    for col in np.flatnonzero(vec):
        np.minimum(out, cell_free[:, :, col] // vec[col], out=out)
    return np.maximum(out, 0, out=out)


def even_count(u: I64, k: int) -> I64:
    """``max t with sum_c min(u_c, t) >= k t``, as ``min_{j<k} floor(S_j / (k - j))``.

    Only the k - 1 roomiest cells are dropped one by one, so only they are sorted (a partial
    sort: a two-cell guest needs only each host's roomiest cell)."""
    n = u.shape[1]
    rest = u.sum(axis=1)
    if k <= 1:
        return np.maximum(np.minimum(rest, BIG), 0)
    if k - 1 < n:
        top = np.partition(u, n - (k - 1), axis=1)[:, n - (k - 1) :]
        s = -np.sort(-top, axis=1)  # the k - 1 roomiest, roomiest first
    else:
        s = -np.sort(-u, axis=1)
    out = np.full(u.shape[0], BIG, dtype=np.int64)
    for j in range(k):
        if j:
            rest = rest - (s[:, j - 1] if j - 1 < n else 0)
        np.minimum(out, rest // (k - j), out=out)
    return np.maximum(out, 0)


def narrow(cell_free: I64) -> npt.NDArray[np.bool_]:
    """Hosts whose cells beyond the first two are empty (every host of one or two cells)."""
    if cell_free.shape[1] <= 2:
        return np.ones(cell_free.shape[0], dtype=bool)
    rest: npt.NDArray[np.bool_] = (cell_free[:, 2:, :] == 0).all(axis=(1, 2))
    return rest


def local_pci(d: Demand) -> bool:
    """A multi-cell guest whose PCI devices must sit in its own cells."""
    return bool(d.pci.any()) and d.spec.pci_policy == PciPolicy.REQUIRED and guest_cells(d) >= 2


def needs_search(d: Demand, cell_free: I64) -> npt.NDArray[np.bool_]:
    """Hosts where no closed form applies (see the module docstring)."""
    n = cell_free.shape[0]
    k = guest_cells(d)
    if d.mode == NumaMode.FIXED:
        return ~narrow(cell_free) if k == 2 else np.ones(n, dtype=bool)
    if d.mode == NumaMode.EVEN and local_pci(d):
        searcher = searcher_of(d)
        usable = np.ones(cell_free.shape[:2], dtype=bool)
        for i, col in enumerate(searcher.cols):
            if searcher.smallest[i] > 0:
                usable &= cell_free[:, :, col] >= searcher.smallest[i]
        # closed form only when the guest takes every cell that could hold it and no other
        # cell holds a device it asks for (its devices then are the host's sum)
        out: npt.NDArray[np.bool_] = usable.sum(axis=1) > k
        for p in np.flatnonzero(d.pci):
            out |= ((cell_free[:, :, CELL_BASE + p] != 0) & ~usable).any(axis=1)
        return out
    return np.zeros(n, dtype=bool)


def searcher_of(d: Demand) -> Searcher:
    """The flavor's exact search (kept on the demand: its memo outlives one call)."""
    found: Searcher | None = d.__dict__.get("_searcher")
    if found is None:
        cells = d.cells
        cols = [int(c) for c in np.flatnonzero(cells.any(axis=0) | _pci_row(d))]
        shapes = [[int(row[c]) for c in cols] for row in cells]
        pci = [int(_pci_row(d)[c]) for c in cols]
        found = Searcher(shapes, pci, cols)
        object.__setattr__(d, "_searcher", found)
    return found


def _pci_row(d: Demand) -> I64:
    row = np.zeros(d.cells.shape[1], dtype=np.int64)
    if local_pci(d):
        row[CELL_BASE:] = d.pci
    return row


def _search_counts(d: Demand, cell_free: I64, rows: I64, limit: int | None) -> I64:
    """The search's count on `rows`: hosts grouped by their canonical state in numpy first (the
    count does not depend on which cell is which, `Searcher.canonical`), then one memoised
    search per distinct state; a fleet's hosts fall into few states for one flavor."""
    searcher = searcher_of(d)
    part = cell_free[:, :, searcher.cols][rows]
    group, first = _canonical_groups(part, searcher.smallest)
    counts = _state_counts(part, first, searcher.__dict__, searcher.canonical, searcher.count)
    out = counts[group]
    return np.minimum(out, 1) if limit is not None and limit <= 1 else out


def flex_search_of(d: Demand) -> FlexSearch:
    """The FLEX flavor's exact search on hosts of more than two cells (kept on the demand)."""
    found: FlexSearch | None = d.__dict__.get("_flex_search")
    if found is None:
        flex = d.rows.flex
        found = FlexSearch([c for c, _, _ in flex], [t for _, t, _ in flex], [m for *_, m in flex])
        object.__setattr__(d, "_flex_search", found)
    return found


def _flex_counts(d: Demand, cell_free: I64, rows: I64, limit: int | None) -> I64:
    """FLEX on `rows` (hosts with a cell in use beyond the first two): `flex_wide`'s count per
    distinct canonical state; 0 for a guest whose devices must sit in its cells."""
    out = np.zeros(rows.size, dtype=np.int64)
    if local_pci(d):
        return out
    search = flex_search_of(d)
    columns = [cell_free[:, :, c].T[:, rows] for c in search.cols]  # (cells, hosts) each
    some = np.flatnonzero(_flex_upper(columns, search) > 0)  # `upper` 0: nothing fits
    if not some.size:
        return out
    part = np.stack([c[:, some].T for c in columns], axis=2)  # (hosts, cells, columns)
    group, first = _canonical_groups(part, search.smallest)
    counts = _state_counts(part, first, search.__dict__, search.canonical, search.count)
    out[some] = counts[group]
    return np.minimum(out, 1) if limit is not None and limit <= 1 else out


def _flex_upper(columns: list[I64], search: FlexSearch) -> I64:
    """`FlexSearch.upper` of every host at once (`columns`: the flavor's columns, each
    (cells, hosts), so every reduction runs over whole rows of hosts)."""
    usable = np.ones(columns[0].shape, dtype=bool)
    for col, least in zip(columns, search.smallest, strict=True):
        usable &= col >= least
    if not (usable.sum(axis=0) >= 2).any():  # no host has a pair of cells: nothing fits
        return np.zeros(columns[0].shape[1], dtype=np.int64)
    ends = np.full(columns[0].shape, BIG, dtype=np.int64)
    out = np.full(columns[0].shape[1], BIG, dtype=np.int64)
    for col, least, total in zip(columns, search.smallest, search.total.tolist(), strict=True):
        free = np.where(usable, col, 0)
        np.minimum(ends, free // least, out=ends)
        np.minimum(out, free.sum(axis=0) // total, out=out)  # the free sum
        np.minimum(out, (free // ((total + 1) // 2)).sum(axis=0), out=out)  # the majors
    ends = np.where(usable, ends, 0)
    s = ends.sum(axis=0)
    by_ends = np.minimum(s // 2, s - ends.max(axis=0, initial=0))
    result: I64 = np.minimum(out, by_ends)
    return result


def _state_counts(
    part: I64,
    first: I64,
    owner: dict[str, Any],
    canonical: Callable[[Any], Any],
    count: Callable[[Any], int],
) -> I64:
    """`count(canonical(host))` of each host `first` names (one per distinct state), read
    first from a memo keyed by the host's raw columns (kept in the search's `owner` dict, so
    it lives as long as the search's own memo): a state seen before costs a dict look-up, not
    its canonical form in Python."""
    raw: dict[tuple[int, bytes], int] | None = owner.get("_raw_counts")
    if raw is None or len(raw) >= RAW_STATES:  # forgetting costs time, never exactness
        raw = owner["_raw_counts"] = {}
    out = np.empty(first.size, dtype=np.int64)
    cells = part.shape[1]
    for i, r in enumerate(first.tolist()):
        host = part[r]
        key = (cells, host.tobytes())
        found = raw.get(key)
        if found is None:
            found = raw[key] = count(canonical(host.tolist()))
        out[i] = found
    return out


def _canonical_groups(part: I64, smallest: Sequence[int]) -> tuple[I64, I64]:
    """(group of each host, one host of each group): hosts with equal canonical states (cells
    that can hold a guest cell, as a multiset) share a group. Each cell becomes one integer
    (its columns' ranks), unusable cells -1, sorted within the host."""
    n, cells, width = part.shape
    key = np.zeros((n, cells), dtype=np.int64)
    low = part.min(axis=(0, 1)) if n else np.zeros(width, dtype=np.int64)
    span = (part.max(axis=(0, 1)) - low + 1) if n else np.ones(width, dtype=np.int64)
    if sum(int(x).bit_length() for x in span) > 62:  # too wide to pack: raw states only
        return _same_rows(part.reshape(n, -1))
    for i in range(width):  # each cell's columns packed into one integer
        key = key * int(span[i]) + (part[:, :, i] - low[i])
    usable = np.ones((n, cells), dtype=bool)
    for i, least in enumerate(smallest):
        if least > 0:
            usable &= part[:, :, i] >= least
    return _same_rows(np.sort(np.where(usable, key, -1), axis=1))


def _same_rows(key: I64) -> tuple[I64, I64]:
    """(group of each row, first row of each group) of equal rows (a lexsort: numpy's
    ``unique(axis=0)`` sorts rows as opaque bytes, many times slower)."""
    order = np.lexsort(key.T[::-1])
    ordered = key[order]
    new = np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)]
    group = np.empty(key.shape[0], dtype=np.int64)
    group[order] = np.cumsum(new) - 1
    return group, order[new]


def cell_count(d: Demand, cell_free: I64, limit: int | None, two_cell: Any) -> I64:
    """Instances allowed by the NUMA cells alone; `two_cell(d, cell_free, limit)` is `vector`'s
    two-cell count (for FIXED and FLEX on narrow hosts)."""
    mode, n = d.mode, cell_free.shape[0]
    if mode == NumaMode.NONE:
        return np.full(n, BIG, dtype=np.int64)
    if mode == NumaMode.SINGLE:
        return np.asarray(units(cell_free, d.cells[0]).sum(axis=1), dtype=np.int64)
    out = np.zeros(n, dtype=np.int64)
    if mode == NumaMode.EVEN:
        out = even_count(units(cell_free, d.cells[0]), len(d.cells))
    elif guest_cells(d) == 2:  # FIXED or FLEX over two cells: the narrow hosts
        two = narrow(cell_free)
        if two.all():
            out = two_cell(d, cell_free[:, :2], limit)
        elif two.any():
            out[two] = two_cell(d, cell_free[two, :2], limit)  # copies two cells, not all
        if mode == NumaMode.FLEX:
            rows = np.flatnonzero(~two)
            if rows.size:
                out[rows] = _flex_counts(d, cell_free, rows, limit)
            return out
    search = needs_search(d, cell_free)
    if search.any():
        rows = np.flatnonzero(search)
        out[rows] = _search_counts(d, cell_free, rows, limit)
    return out


def host_pci(cell_free: I64, p: int) -> I64:
    """Free devices of PCI type `p` over every cell of each host."""
    out: I64 = cell_free[:, :, CELL_BASE + p].sum(axis=1)
    return out


def _subsets(cells: int, k: int) -> npt.NDArray[np.bool_]:
    """Every set of k of `cells` cells, as rows of a mask, in lexicographic order."""
    sets = list(combinations(range(cells), k))
    out = np.zeros((len(sets), cells), dtype=bool)
    for i, s in enumerate(sets):
        out[i, list(s)] = True
    return out


def _spread(sets: npt.NDArray[np.bool_], distance: I64 | None, n: int) -> I64:
    """(n, sets): the sum of pairwise NUMA distances inside each set (index distance when the
    host reports none)."""
    cells = sets.shape[1]
    pair = (sets[:, :, None] & sets[:, None, :]).astype(np.int64)  # (S, C, C)
    if distance is None:  # the same for every host: computed once
        idx = np.arange(cells)
        one = np.einsum("scd,cd->s", pair, np.abs(idx[:, None] - idx[None, :])) // 2
        return np.broadcast_to(one, (n, sets.shape[0]))
    out: I64 = np.einsum("scd,ncd->ns", pair, distance) // 2
    return out


def distances_on(matrices: Sequence[Sequence[Sequence[int]] | None], cells: int) -> I64 | None:
    """(hosts, cells, cells): each host's NUMA distances on a cell axis `cells` wide, the one
    reading of `numa_distances` every caller of the claim rule shares (`HostTable.plan_for`
    through `scalar.place`, the previews of `core.preview`). A host's matrix fills its own
    cells; index distance ``|i - j|`` stands where a host reports none and on the padding
    cells of hosts narrower than the axis (which hold nothing, so they are never chosen).
    None when no host reports a matrix: the rule then uses index distance everywhere."""
    if all(m is None for m in matrices):
        return None
    idx = np.arange(cells)
    out = np.broadcast_to(np.abs(idx[:, None] - idx[None, :]), (len(matrices), cells, cells))
    out = out.copy()
    for i, m in enumerate(matrices):
        if m is not None:
            k = len(m)
            out[i, :k, :k] = np.asarray(m, dtype=np.int64)
    return out


def even_cells(d: Demand, cell_free: I64, distance: I64 | None) -> npt.NDArray[np.bool_]:
    """(n, cells) mask: the k cells an EVEN guest takes by the claim rule.

    With t the count and slack = sum_c min(u_c, t) - k t, a set S keeps the count at t - 1 iff
    every cell of S has a slot and at most `slack` cells with u_c >= t stay outside S
    (docs/numa.md). Among those: the smallest sum of distances, then the most slots, then the
    first set in lexicographic order."""
    k = len(d.cells)
    u = units(cell_free, d.cells[0])
    n, cells = u.shape
    t = even_count(u, k)
    slack = np.minimum(u, t[:, None]).sum(axis=1) - k * t
    sets = _subsets(cells, k)
    if sets.shape[0] == 0:
        return np.zeros((n, cells), dtype=bool)
    has_slot = ~((~(u[:, None, :] >= 1)) & sets[None]).any(axis=2)  # (n, S)
    high = u >= t[:, None]
    outside = (high[:, None, :] & ~sets[None]).sum(axis=2)
    valid = has_slot & (outside <= slack[:, None])
    room = (u[:, None, :] * sets[None]).sum(axis=2)
    cost = _spread(sets, distance, n) * (1 << 40) - np.minimum(room, (1 << 39) - 1)
    cost = np.where(valid, cost, np.iinfo(np.int64).max)
    pick: npt.NDArray[np.bool_] = sets[cost.argmin(axis=1)]
    return pick


def place(
    d: Demand, cell_free: I64, host_free: I64, two_cell: Any, distance: I64 | None = None
) -> tuple[I64, I64]:
    """`vector.place` on any cell axis; `two_cell` is `vector`'s two-cell place."""
    n, cells, width = cell_free.shape
    cell_use = np.zeros((n, cells, width), dtype=np.int64)
    host_use = np.broadcast_to(d.host, host_free.shape).copy()
    mode, rows = d.mode, np.arange(n)
    if mode == NumaMode.SINGLE:  # rule: the fitting cell with the fewest slots, lowest first
        u = units(cell_free, d.cells[0])
        first = np.where(u >= 1, u, BIG).argmin(axis=1)
        cell_use[rows, first] = d.cells[0]
    elif mode == NumaMode.EVEN:
        taken = even_cells(d, cell_free, distance)
        cell_use += taken[:, :, None] * d.cells[0][None, None, :]
    elif guest_cells(d) == 2:  # FIXED / FLEX on narrow hosts: the two-cell rule
        two = narrow(cell_free)
        if two.any():
            sub = np.flatnonzero(two)
            use2, _ = two_cell(d, cell_free[sub][:, :2], host_free[sub])
            cell_use[sub, :2] = use2
            if d.pci.any():  # `two_cell` placed the devices already
                cell_use[sub, :2, CELL_BASE:] = use2[:, :, CELL_BASE:]
    search = needs_search(d, cell_free)
    if search.any():
        _search_place(d, cell_free, distance, np.flatnonzero(search), cell_use)
    if mode == NumaMode.FLEX:
        _flex_place(d, cell_free, distance, np.flatnonzero(~narrow(cell_free)), cell_use)
    if not d.pci.any():
        return cell_use, host_use
    pci_rows = ~search if local_pci(d) else np.ones(n, dtype=bool)  # the search placed them
    if mode in (NumaMode.FIXED, NumaMode.FLEX) and guest_cells(d) == 2:
        pci_rows &= ~narrow(cell_free)  # narrow FIXED / FLEX: done by `two_cell` above
    if pci_rows.any():
        own = (cell_use[:, :, :CELL_BASE] != 0).any(axis=2)  # the guest's cells
        _host_pci(d, cell_free, own, np.flatnonzero(pci_rows), cell_use)
    return cell_use, host_use


def _host_pci(
    d: Demand, cell_free: I64, own: npt.NDArray[np.bool_], rows: I64, cell_use: I64
) -> None:
    """Host-level devices: the guest's own cells first (most free first), then the other cells
    (most free first), lowest cell on a tie."""
    cells = cell_free.shape[1]
    for p in np.flatnonzero(d.pci):
        col = CELL_BASE + p
        free = np.maximum(cell_free[rows, :, col], 0)
        mine = own[rows]
        key = -(mine * (1 << 41) + free * cells) + np.arange(cells)[None, :]
        order = np.argsort(key, axis=1, kind="stable")
        want = np.full(rows.size, d.pci[p], dtype=np.int64)
        for j in range(cells):
            c = order[:, j]
            f = free[np.arange(rows.size), c]
            last = j == cells - 1
            took = want if last else np.minimum(want, f)
            cell_use[rows, c, col] += took
            want = want - took


def _search_place(d: Demand, cell_free: I64, distance: I64 | None, rows: I64, out: I64) -> None:
    searcher = searcher_of(d)
    out[rows] = 0  # the closed form's choice, where it does not apply
    shape_rows = {tuple(int(row[c]) for c in searcher.cols): row for row in d.cells}
    for r in rows.tolist():
        host = cell_free[r].tolist()
        dist = distance[r].tolist() if distance is not None else None
        got = searcher.place(host, dist)
        if got is None:
            continue
        hosts, takes = got
        for shape, h in zip(searcher.shapes, hosts, strict=True):
            out[r, h] += shape_rows[shape]
        for h, i, x in takes:
            out[r, h, searcher.cols[i]] += x


def _flex_place(d: Demand, cell_free: I64, distance: I64 | None, rows: I64, out: I64) -> None:
    """FLEX on hosts with a cell in use beyond the first two: `FlexSearch.place` row by row."""
    if local_pci(d) or not rows.size:
        return
    search = flex_search_of(d)
    for r in rows.tolist():
        dist = distance[r].tolist() if distance is not None else None
        got = search.place(cell_free[r].tolist(), dist)
        if got is None:
            continue
        a, b, shares = got
        for col, total, share in zip(search.cols, search.total.tolist(), shares, strict=True):
            out[r, a, col] = share
            out[r, b, col] = total - share
