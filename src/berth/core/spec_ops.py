"""Nova's extra-spec operators (`nova/scheduler/filters/extra_specs_ops.py`), exactly.

A spec's text is split at whitespace; when its first word is an operator the next word is the
operand (all the rest for `<all-in>`, the alternatives for `<or>`), else the whole text must
equal the host's value as a string. `=` is numeric "at least", `==`, `!=`, `>=`, `<=` numeric,
`s==` ... `s<` string comparisons, `<in>` a substring, `<all-in>` every word a substring.

One difference: Nova raises (and fails the request) when a numeric operator meets a value that
is not a number; here the host simply does not match (docs/flavors.md).
"""

from __future__ import annotations

import operator
from collections.abc import Callable


def _num(op: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    def compare(actual: str, want: str) -> bool:
        try:
            return op(float(actual), float(want))
        except ValueError:
            return False

    return compare


OPERATORS: dict[str, Callable[[str, str], bool]] = {
    "=": _num(operator.ge),
    "<in>": lambda actual, want: want in actual,
    "==": _num(operator.eq),
    "!=": _num(operator.ne),
    ">=": _num(operator.ge),
    "<=": _num(operator.le),
    "s==": operator.eq,
    "s!=": operator.ne,
    "s<": operator.lt,
    "s<=": operator.le,
    "s>": operator.gt,
    "s>=": operator.ge,
    "<all-in>": lambda actual, want: all(w in actual for w in want.split()),
}


def match(actual: str, req: str) -> bool:
    """Whether one host value satisfies the spec text `req` (Nova's `match`)."""
    words = req.split()
    if not words or (words[0] != "<or>" and words[0] not in OPERATORS):
        return actual == req
    op, rest = words[0], words[1:]
    if op == "<or>":  # <or> v1 <or> v2 ...: the words at even positions are the alternatives
        return actual in rest[::2]
    if not rest:
        return False
    if op == "<all-in>":
        return OPERATORS[op](actual, " ".join(rest))
    return OPERATORS[op](actual, rest[0])
