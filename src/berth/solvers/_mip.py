"""A MIP in triplet form, built variable by variable and row by row (the defrag models)."""

from __future__ import annotations


class Model:
    """A MIP in triplet form: variables with bounds and objective, constraints by rows."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []

    def var(self, hi: float, cost: float = 0.0, lo: float = 0.0) -> int:
        self.cost.append(cost)
        self.lo.append(lo)
        self.hi.append(hi)
        return len(self.cost) - 1

    def row(self, terms: dict[int, float], lo: float, hi: float) -> None:
        r = len(self.row_lo)
        for col, val in terms.items():
            if val:
                self.rows.append(r)
                self.cols.append(col)
                self.vals.append(val)
        self.row_lo.append(lo)
        self.row_hi.append(hi)


Use = dict[tuple[int, int], dict[int, float]]
"""(cell, column) -> {variable: coefficient}; cell -1 means the host columns."""


def add(use: Use, cell: int, col: int, var: int, coef: float) -> None:
    if coef:
        terms = use.setdefault((cell, col), {})
        terms[var] = terms.get(var, 0.0) + coef
