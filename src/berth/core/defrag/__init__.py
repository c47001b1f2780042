"""Defragmentation: plan live migrations that restore large-flavor capacity (docs/defrag.md)."""

from berth.core.defrag.model import Budget, Figures, Move, Objective, Plan, Target

__all__ = ["Budget", "Figures", "Move", "Objective", "Plan", "Target"]
