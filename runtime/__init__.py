"""Runtime wiring shared by worker.py, api/ and cli/: structured logs and the Temporal
Schedules that run ledger maintenance."""
