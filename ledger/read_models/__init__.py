"""What people read of the ledger, as plain dataclasses.

The list's counts, the overview, the reconciliation queue, one recipient, one intent's
review items and destinations, the policy and template versions. Each read model is a
function over a `Session` returning plain dataclasses (or the ledger's rows): facts, ids
and times, never wording. The console (`api/console/reads.py`) turns them into sentences
and pages; the API and the CLI read the same models where they show the same things (the
list itself is `ledger.listing`, behind GET /v1/intents, `herald list` and the console's
list).
"""
