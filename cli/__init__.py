"""The `herald` command: thin over starter, ledger, devstack, scenarios and bench.

`cli.main` builds the parser from the command groups and runs a command; each group
(`cli.dev`, `cli.intents`, `cli.consent`, `cli.services`, `cli.ledger`, `cli.ops`,
`cli.bench`, `cli.maint`, ...) adds its own subcommands. `cli.output` is what they print
through, `cli.errors` the one line for an error the user can fix.
"""
