"""Defragmentation beyond the pure core: the exact optimum for small fleets (docs/defrag.md)."""

from berth.defrag.exact import ExactResult, exact_optimum, heuristic_gap

__all__ = ["ExactResult", "exact_optimum", "heuristic_gap"]
