"""Compiling kernels with numba, once per process, and warming them all up before timed work.

The kernel modules (`kernels`, `numa.compiled`) import this one; it imports none of them. Each
registers a warm-up with `warm_up`; `prepare` runs those of every kernel module imported so far.
numba is imported on the first compilation, not at import time, so commands that never decide
never pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_compiled: dict[tuple[str, str], Callable[..., Any]] = {}
_warm_ups: list[Callable[[], None]] = []


def compile_kernel(
    source: Callable[..., Any],
    namespace: dict[str, Any],
    *,
    bind: str | None = None,
    helpers: tuple[str, ...] = (),
) -> Callable[..., Any]:
    """`source` compiled with numba (once per process; the machine code is cached on disk).

    `namespace`: the globals of `source`'s module. `helpers`: names of functions there that
    compiled code calls; each is replaced by its compiled form first (numba resolves them by
    name). `bind`: the public name of a wrapper that passes its arguments through as they are;
    it is replaced by the compiled function, so later calls skip the wrapper.
    """
    key = (namespace["__name__"], source.__name__)
    found = _compiled.get(key)
    if found is None:
        for name in helpers:
            if not hasattr(namespace[name], "py_func"):  # not yet compiled
                namespace[name] = _njit(namespace[name])
        found = _compiled[key] = _njit(source)
        if bind is not None:
            namespace[bind] = found
    return found


def _njit(source: Callable[..., Any]) -> Callable[..., Any]:
    from numba import njit  # imported here: 0.3 s that only deciding needs

    try:
        return njit(cache=True, nogil=True)(source)
    except RuntimeError:  # no writable cache location (numba's message): memory only
        return njit(nogil=True)(source)


def warm_up(compile_all: Callable[[], None]) -> Callable[[], None]:
    """Register a kernel module's warm-up (a decorator): it compiles, or loads from the disk
    cache, each of the module's kernels for the argument types decisions pass."""
    _warm_ups.append(compile_all)
    return compile_all


def prepare() -> None:
    """Compile every registered kernel, so that no decision pays for it: the simulator calls
    this before it times a replay, the service before it serves. Safe to call again (then it
    costs nothing)."""
    for compile_all in _warm_ups:
        compile_all()
