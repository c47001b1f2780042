"""The control-command log's vocabulary: what Berth asks of a VM's agent, and each command's
life (docs/elastic.md, "state machine").

Pure data: the store enforces these moves (`berth.store.elastic_commands`), the agent carries
the commands out (`berth.elastic.agent`).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class CommandKind(StrEnum):
    JOIN = "join"  # serve the VM's group's queue (args: {"group": ...})
    LEAVE = "leave"  # move to the drain group G_none: finish running jobs, take no new ones
    RECONFIGURE = "reconfigure"  # apply new worker settings (args: whatever the worker takes)
    SHUTDOWN = "shutdown"  # stop the batch daemon and the agent


class CommandState(StrEnum):
    ISSUED = "issued"  # written by Berth; the agent has not fetched it
    DELIVERED = "delivered"  # the agent fetched it and is carrying it out
    DONE = "done"  # the agent reported success (terminal)
    FAILED = "failed"  # the agent reported failure, or it was cancelled (terminal)


COMMAND_FINAL = frozenset({CommandState.DONE, CommandState.FAILED})
COMMAND_OPEN = frozenset({CommandState.ISSUED, CommandState.DELIVERED})

COMMAND_MOVES: Mapping[CommandState, frozenset[CommandState]] = {
    CommandState.ISSUED: frozenset({CommandState.DELIVERED, CommandState.FAILED}),
    # a delivered command may be fetched again (the agent restarted before reporting)
    CommandState.DELIVERED: frozenset(
        {CommandState.DELIVERED, CommandState.DONE, CommandState.FAILED}
    ),
    CommandState.DONE: frozenset(),
    CommandState.FAILED: frozenset(),
}


def can_advance(old: CommandState, new: CommandState) -> bool:
    return new in COMMAND_MOVES[old]
