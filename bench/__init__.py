"""`herald bench`: the harness (`bench.harness`), the bare-Temporal baseline workflow
(`bench.baseline`) and the carrier process it meters apart (`bench.carrier`)."""
