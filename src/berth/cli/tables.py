"""Printing Rich tables without cutting ids or host names, at any width and when piped.

Rich fits a table to the terminal (80 columns when output is piped) and, as a last resort,
ends cells with an ellipsis: `i-894d30519…` cannot be passed back to another command. Columns
whose header names an identifier never wrap and are at least as wide as their longest cell;
other columns wrap at spaces. When even that does not fit, the table is printed wider than the
terminal rather than cut.
"""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

ID_HEADERS = frozenset(
    {"instance", "host", "source", "target", "from", "to", "plan", "placement", "set"}
    | {"vm", "group", "queue"}
)
"""Column headers whose cells are ids or host names a user copies into the next command."""


def print_table(console: Console, table: Table) -> None:
    """Print `table` on `console` with every id column whole."""
    for column in table.columns:
        if str(column.header) in ID_HEADERS:
            cells = [console.render_str(str(c)).cell_len for c in column.cells]
            column.no_wrap = True
            column.min_width = max([*cells, len(str(column.header))])
    unlimited = console.options.update_width(1_000_000)
    needed = Measurement.get(console, unlimited, table).minimum
    if needed > console.width:
        console = Console(width=needed, stderr=console.stderr)
    console.print(table)
