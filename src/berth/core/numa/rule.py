"""Berth's NUMA claim rule, stated once: what one more instance takes of a host, and its invariant.

Every implementation in this package computes the same two things for a flavor's demand
(`demand.Demand`) on a host's free columns:

* count: how many more instances fit (NUMA cells, host columns and host-level PCI together:
  ``count = min(cells, H)`` with H the host columns' ``min_r free_r // need_r``);
* place: what one more instance takes (its cells, its split, its PCI devices), by the rule below.

THE RULE (one clause per mode, `flavors.NumaMode`; docs/numa.md has the proofs):

* NONE (floating): no cell; count = H.
* SINGLE: the guest goes to the fitting cell with FEWER whole guest slots for this flavor (best
  fit inside the host, so the roomier cell stays whole for larger guests); on a tie, cell 0.
* EVEN: both cells take half.
* FIXED (uneven, stated sizes a and b): (a -> cell 0, b -> cell 1) unless (b, a) fits and leaves
  STRICTLY more room for the same flavor.
* FLEX (uneven, Berth chooses; total T and per-cell minimum m per resource): cell 0 takes
  ``clamp((F0 - F1 + T) // 2, max(m, T - F1), min(T - m, F0))`` (the low bound wins when the
  range is empty), the split that leaves the two cells' free amounts as equal as the minimums
  allow ("balanced leftover").
* PCI (host-level devices): from the guest's own cell first (SINGLE), otherwise from the cell
  with MORE free devices of that type (cell 0 on a tie); the rest from the other cell.

ON HOSTS OF MORE THAN TWO CELLS, OR GUESTS OF MORE THAN TWO (`wide`, `search`; every guest
cell on a different host cell):

* SINGLE: the fitting cell with the fewest slots; on a tie, the lowest cell.
* EVEN over k cells: among the sets of k cells that keep the count at count - 1 (every cell
  with a slot, at most ``slack`` roomy cells left out: docs/numa.md), the one with the
  smallest sum of NUMA distances (index distance without a matrix), then the most slots,
  then the first in lexicographic order.
* FIXED (and EVEN or FIXED with `required` devices on more cells than the guest takes): the
  closest placement (same distance order) among those that keep count - 1, found by the exact
  search; a FIXED state too large to sweep is refused (count 0, `search.too_large`).
* FLEX (`flex_wide`): two cells of the host for every resource; on a state a greedy fill
  certifies, that fill's first guest; otherwise, of a largest set of guests the search finds,
  the one on the closest pair, each resource split as evenly as the others allow; a state
  beyond the search's bound is refused (count 0). A FLEX guest whose `required` devices must
  sit in its cells: only on hosts of at most two cells (the filter refuses the others).
* PCI (host-level devices): the guest's own cells first, then the others, each group the cell
  with more free devices first (lowest on a tie); for two cells this is the clause above.

THE INVARIANT: placing one instance by the rule lowers count by exactly one, so "capacity says
k" means k sequential placements succeed and the (k+1)-th fails (`tests/core/test_properties.py`).

Arithmetic shared by every copy: integer floor division; a division by a zero minimum gives 0 (as
numpy's integer division does); counts are clamped at 0 below and `BIG` ("no limit") above.

The copies (each cites this module; `tests/core/test_numa_rows.py` holds them equal, bit for bit,
with Hypothesis on every mode, PCI devices, huge pages and negative free amounts):

* `vector`: numpy over every host at once (capacity matrices, cold caches, the claim itself);
* `scalar`: one host in plain Python integers (a claim's footprint, the defrag planner's moves);
* `compiled`: numba over some hosts (the caches' refresh of the hosts changed since last read);
* `dispatch` chooses between `compiled` and `vector` by the number of hosts.
"""

from __future__ import annotations

BIG = 1 << 40
""""No limit": the count of a resource the flavor does not ask for."""
