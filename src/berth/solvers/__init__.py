"""Solver code (HiGHS via SciPy): the exact defragmentation optimum and the packing bounds."""
