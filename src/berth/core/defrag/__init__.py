"""Defragmentation: plan live migrations that restore large-flavor capacity (docs/defrag.md)."""

from berth.core.defrag.execute import apply_moves, check_plan
from berth.core.defrag.model import Budget, Figures, Move, Objective, Plan, Target
from berth.core.defrag.objective import measure
from berth.core.defrag.planner import plan_defrag
from berth.core.defrag.replan import replan_move
from berth.core.defrag.rules import PlanError

__all__ = [
    "Budget",
    "Figures",
    "Move",
    "Objective",
    "Plan",
    "PlanError",
    "Target",
    "apply_moves",
    "check_plan",
    "measure",
    "plan_defrag",
    "replan_move",
]
