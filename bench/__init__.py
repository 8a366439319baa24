"""`herald bench`: the harness (`bench.harness`: the closed loop and the poll budget, and
the dispatch and rendering of every mode), the open loop (`bench.openloop`), what the modes
share (`bench.stack`), the bare-Temporal baseline workflow (`bench.baseline`) and the
carrier process it meters apart (`bench.carrier`)."""
