"""`python -m cli ...` runs the `herald` command (tests use it with this interpreter)."""

from cli.main import entry

entry()
