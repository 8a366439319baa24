"""Runtime wiring shared by worker.py, api/, cli/ and scenarios/: structured logs, the
Temporal Schedules that run ledger maintenance, and the text tables printed for people."""
