"""The `herald` command: thin over starter, ledger, devstack, scenarios and bench.

`cli.main` builds the parser and runs a command; `cli.ledger`, `cli.ops`, `cli.bench`
and `cli.maint` each add their own subcommands.
"""
