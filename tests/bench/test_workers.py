"""`herald bench --workers N`: the pure parts (each worker's environment, counting one
worker's activities from its SDK metrics, CPU of the fleet against each worker)."""

from __future__ import annotations

import itertools

from bench.stack import CpuMeter, activity_count, worker_cpu_parts, worker_env

BASE = {
    "HERALD_TASK_QUEUE": "herald",
    "HERALD_DATABASE_URL": "postgresql+psycopg://herald@127.0.0.1:5999/herald",
    "HERALD_SMS_MAX_PER_SECOND": "10.0",
    "HERALD_WORKER_METRICS_ADDRESS": "127.0.0.1:7001",
    "HERALD_WORKER_HERALD_METRICS_ADDRESS": "127.0.0.1:7002",
}


def test_each_extra_worker_gets_its_own_metrics_ports_and_the_same_settings() -> None:
    ports = itertools.count(8001)
    second = worker_env(BASE, lambda: next(ports))
    third = worker_env(BASE, lambda: next(ports))
    addresses = {
        env[key]
        for env in (BASE, second, third)
        for key in ("HERALD_WORKER_METRICS_ADDRESS", "HERALD_WORKER_HERALD_METRICS_ADDRESS")
    }
    assert len(addresses) == 6  # nobody binds another worker's port
    assert second["HERALD_WORKER_METRICS_ADDRESS"] == "127.0.0.1:8001"
    for env in (second, third):
        assert {k: v for k, v in env.items() if "METRICS" not in k} == {
            k: v for k, v in BASE.items() if "METRICS" not in k
        }
    assert BASE["HERALD_WORKER_METRICS_ADDRESS"] == "127.0.0.1:7001"  # not changed in place


def test_a_metrics_address_that_is_off_stays_off() -> None:
    env = worker_env({**BASE, "HERALD_WORKER_METRICS_ADDRESS": ""}, lambda: 9000)
    assert env["HERALD_WORKER_METRICS_ADDRESS"] == ""
    assert env["HERALD_WORKER_HERALD_METRICS_ADDRESS"] == "127.0.0.1:9000"


# The SDK's series as a worker serves them (labels trimmed: no namespace, service or task queue).
SDK_METRICS = """\
# HELP temporal_activity_execution_latency Activity execution latencies
# TYPE temporal_activity_execution_latency histogram
temporal_activity_execution_latency_bucket{activity_type="poll_sms",workflow_type="N",le="100"} 40
temporal_activity_execution_latency_bucket{activity_type="poll_sms",workflow_type="N",le="+Inf"} 41
temporal_activity_execution_latency_sum{activity_type="poll_sms",workflow_type="N"} 900
temporal_activity_execution_latency_count{activity_type="poll_sms",workflow_type="N"} 41
temporal_activity_execution_latency_count{activity_type="poll_sms",workflow_type="M"} 2
temporal_activity_execution_latency_count{activity_type="submit_sms",workflow_type="N"} 213
# HELP temporal_local_activity_execution_latency Local ones
# TYPE temporal_local_activity_execution_latency histogram
temporal_local_activity_execution_latency_count{activity_type="poll_sms",workflow_type="N"} 500
# HELP temporal_activity_schedule_to_start_latency Queue times
# TYPE temporal_activity_schedule_to_start_latency histogram
temporal_activity_schedule_to_start_latency_count{activity_type="poll_sms"} 700
"""


def test_a_workers_polls_are_counted_from_its_activity_latency_histogram_only() -> None:
    assert activity_count(SDK_METRICS, "poll_sms") == 43
    assert activity_count(SDK_METRICS, "submit_sms") == 213
    assert activity_count(SDK_METRICS, "authorize") == 0
    assert activity_count("", "poll_sms") == 0


def test_one_worker_has_no_per_worker_detail() -> None:
    part, detail = worker_cpu_parts([101])
    assert part == ((101,), True) and detail == {}


def test_the_worker_part_sums_the_fleet_and_each_worker_stays_out_of_the_total() -> None:
    part, detail = worker_cpu_parts([101, 102])
    assert part == ((101, 102), True)
    assert detail == {"worker-1": (101, True), "worker-2": (102, True)}
    cpu = CpuMeter({"worker": part, "temporal": (103, True)}, detail=detail)
    before = {"worker": 1.0, "temporal": 2.0, "worker-1": 0.4, "worker-2": 0.6}
    after = {"worker": 3.0, "temporal": 3.0, "worker-1": 1.4, "worker-2": 1.6}
    cpu.add("herald", before, after)
    assert cpu.per_unit("herald", 10) == {"worker": 200.0, "temporal": 100.0, "total": 300.0}
    assert cpu.per_unit_detail("herald", 10) == {"worker-1": 100.0, "worker-2": 100.0}


def test_a_part_of_several_processes_is_exactly_the_sum_of_its_detail_in_one_snapshot() -> None:
    import os

    # Read once per snapshot: the fleet and its workers cannot drift apart (a CI run saw
    # workers summing to 40.5 ms per intent against the fleet's 40.0 when read twice).
    me, parent = os.getpid(), os.getppid()
    meter = CpuMeter(
        {"worker": ((me, parent), False)},
        detail={"worker-1": (me, False), "worker-2": (parent, False)},
    )
    for _ in range(20):
        seen = meter.snapshot()
        assert seen["worker"] == seen["worker-1"] + seen["worker-2"] and seen["worker-1"] > 0
