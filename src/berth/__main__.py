"""`python -m berth`: the `berth` command."""

from berth.cli.main import app

app(prog_name="berth")
