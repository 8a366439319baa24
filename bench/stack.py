"""What every `herald bench` mode shares: its options, the throwaway stack with its worker
processes, the meters (CPU, RSS, Temporal history counts), the statistics, and one round
of intents through Herald or through the bare-Temporal baseline.

The modes build on it: the closed loop and the poll budget (bench/harness.py, which also
dispatches and renders) and the open loop (bench/openloop.py); none of them imports
another mode, so the bench has no import circle.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

import settings as settings_module
from bench.carrier import Carrier
from devstack import ChildProcess, EmbeddedPostgres, PortInUse, free_port
from devstack.stack import DevStack
from domain.channels import SMS
from domain.requests import NotificationRequest
from ledger.models import Consent
from simulators.twilio import FAULT_NUMBERS

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"


DEMAND_OVER_BUDGET = 1.25
"""Poll-budget mode: lookups asked for, over the budget, once every message is open."""


@dataclass
class BenchOptions:
    intents: int = 200
    concurrency: int = 16
    """How many intents (or baseline workflows) are being started at once."""
    sample: int = 20
    """Histories fetched to count events and actions per workflow."""
    warmup: int = 10
    rounds: int = 4
    """Baseline and Herald alternate in this many rounds (the machine may be shared)."""
    sms_rate: float = 1000.0
    """The SMS queue's budget in throughput mode: high, so the rate limit is not measured."""
    poll_budget: bool = False
    open: int = 5000
    budget: float = 20.0
    """The SMS queue's `max_task_queue_activities_per_second` in poll-budget mode."""
    poll_every: float | None = None
    """Poll interval of the bench policy in poll-budget mode (demand = open / poll_every).
    By default open / (DEMAND_OVER_BUDGET x budget): once every message is open the demand
    is a quarter above the budget, so the limit binds, while the opening itself is not
    drowned in polls (10 s x 5,000 messages would ask the worker for 500 lookups/s, and
    on two cores polls of the messages already open starve the submits still to come)."""
    open_rate: float = 200.0
    """SMS queue budget while the K messages are being opened (before the measurement)."""
    window: float = 30.0
    settle: float = 5.0
    rate: float | None = None
    """Open loop (bench/openloop.py): arrivals per second, independent of completions."""
    duration: float = 30.0
    """Open loop: seconds of arrivals (round(rate x duration) intents)."""
    rate_sweep: bool = False
    """Closed loop for the peak, then open loop at 25, 50 and 75 % of it."""
    drain: float = 60.0
    """Open loop: seconds to wait for the last workflows after the last arrival."""
    breakdown: int = 0
    """Open loop: histories of this many intents read to show where the time goes."""
    workers: int = 1
    """Herald worker processes on the same Temporal and Postgres (and as many baseline
    workers in throughput mode, so the ratio compares the same shape)."""
    out: Path = RESULTS_DIR
    timeout: float = 1800.0
    profile: Path | None = None
    """Throughput mode: after the measured rounds, one more Herald round under py-spy,
    writing worker.svg and driver+ingress.svg flame graphs into this folder."""

    def poll_interval(self) -> float:
        if self.poll_every is not None:
            return self.poll_every
        return max(10.0, round(self.open / (DEMAND_OVER_BUDGET * self.budget)))


WORKER_METRICS_KEYS = ("HERALD_WORKER_METRICS_ADDRESS", "HERALD_WORKER_HERALD_METRICS_ADDRESS")
"""The worker's two metrics servers (the SDK's series, Herald's): each binds a port."""


def worker_env(base: Mapping[str, str], port: Callable[[], int]) -> dict[str, str]:
    """The environment of one more worker process: the same settings, its own metrics ports
    (a second worker binding the first one's would not start). An address that is off
    ("") stays off."""
    env = dict(base)
    for key in WORKER_METRICS_KEYS:
        if address := env.get(key, ""):
            host = address.rpartition(":")[0] or "127.0.0.1"
            env[key] = f"{host}:{port()}"
    return env


SDK_ACTIVITY_LATENCY = {
    "temporal_activity_execution_latency",
    "temporal_activity_execution_latency_seconds",  # with durations_as_seconds
}


def activity_count(metrics_text: str, activity_type: str) -> float:
    """How many `activity_type` activities this worker ran, from the SDK's Prometheus text
    (the activity execution latency histogram's count)."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(metrics_text):
        # Not temporal_local_activity_execution_latency: local activities are counted there.
        if family.name not in SDK_ACTIVITY_LATENCY:
            continue
        for sample in family.samples:
            if sample.name.endswith("_count") and sample.labels.get("activity_type") == (
                activity_type
            ):
                total += sample.value
    return total


@dataclass
class Bench:
    stack: DevStack
    carrier: Carrier
    data_dir: Path
    postgres_port: int
    numbers: list[str] = field(default_factory=list)
    extra_workers: list[ChildProcess] = field(default_factory=list)
    """Worker processes 2..N, beside the stack's own."""

    @property
    def client(self):  # type: ignore[no-untyped-def]
        assert self.stack.client is not None
        return self.stack.client

    @property
    def workers(self) -> list[ChildProcess]:
        assert self.stack.worker is not None
        return [self.stack.worker, *self.extra_workers]

    def worker_pid(self) -> int:
        assert self.stack.worker is not None and self.stack.worker.pid is not None
        return self.stack.worker.pid

    def worker_pids(self) -> list[int]:
        pids = [w.pid for w in self.workers]
        assert all(pid is not None for pid in pids)
        return pids  # type: ignore[return-value]

    def start_extra_workers(self, count: int) -> None:
        """`count` more worker processes, started like the stack's own (same settings, each
        with its own log file and metrics ports)."""
        stack = self.stack
        for n in range(len(self.extra_workers) + 2, len(self.extra_workers) + 2 + count):
            worker = ChildProcess(
                f"worker-{n}",
                [sys.executable, "-m", "worker"],
                log_path=stack.cfg.data_path / f"worker-{n}.log",
                env=worker_env({**os.environ, **stack.env()}, free_port),
                cwd=REPO_ROOT,
            )
            self.extra_workers.append(worker)  # before start: close() stops it whatever happens
            worker.start()

    async def wait_for_workers(self, timeout: float = 90.0) -> None:
        """Until every worker serves its Herald metrics (it connected to Temporal and is
        about to poll); a worker that exits instead ends the run with its log's last line."""
        import httpx

        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2.0) as http:
            for worker in self.workers:
                address = (worker.env or {}).get("HERALD_WORKER_HERALD_METRICS_ADDRESS", "")
                while address:
                    if not worker.is_alive():
                        tail = worker.log_tail().strip().splitlines()
                        raise RuntimeError(
                            f"{worker.name} exited: {tail[-1] if tail else 'no log'}"
                        )
                    try:
                        (await http.get(f"http://{address}/metrics")).raise_for_status()
                        break
                    except httpx.HTTPError:
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"{worker.name} did not start in time") from None
                        await asyncio.sleep(0.3)

    async def activities_by_worker(self, activity_type: str) -> list[float | None]:
        """Per worker, how many `activity_type` activities it ran (its SDK metrics)."""
        import httpx

        counts: list[float | None] = []
        async with httpx.AsyncClient(timeout=5.0) as http:
            for worker in self.workers:
                address = (worker.env or {}).get("HERALD_WORKER_METRICS_ADDRESS", "")
                try:
                    response = await http.get(f"http://{address}/metrics")
                    response.raise_for_status()
                    counts.append(activity_count(response.text, activity_type))
                except httpx.HTTPError:
                    counts.append(None)
        return counts

    async def restart_workers(self, sms_rate: float) -> None:
        """Every worker process again, with another SMS budget (the budget is worker config)."""
        workers = self.workers
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in workers))
        for worker in workers:
            worker.env = {**(worker.env or {}), "HERALD_SMS_MAX_PER_SECOND": str(sms_rate)}
            worker.start()

    async def stop_extra_workers(self) -> None:
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in self.extra_workers))

    async def close(self) -> None:
        try:
            try:
                await self.stop_extra_workers()
            finally:
                await self.stack.stop()
        finally:
            await self.carrier.stop()
            await asyncio.to_thread(
                EmbeddedPostgres(self.data_dir, port=self.postgres_port).destroy
            )
            shutil.rmtree(self.data_dir, ignore_errors=True)


def distinct_numbers(count: int) -> list[str]:
    """Valid UK mobile numbers, one per intent (the recipient cooldown is per destination)."""
    numbers: list[str] = []
    start = 200_000
    for n in range(start, start + count + len(FAULT_NUMBERS) + 1):
        number = f"+447400{n:06d}"
        if number not in FAULT_NUMBERS:
            numbers.append(number)
        if len(numbers) == count:
            return numbers
    raise ValueError("too many numbers asked for")


START_ATTEMPTS = 3
"""Stacks tried when a port chosen for one was taken before it could bind it."""


async def start_bench(
    *,
    sms_rate: float,
    never_resolves: Sequence[str] = (),
    log: Callable[[str], None],
    workers: int = 1,
) -> Bench:
    """A throwaway stack on free ports. The API's port has to be known before anything
    starts (the carrier calls it back), so it is picked early; a connection this process
    opens meanwhile may be given the same port by the kernel. Then the stack is stopped
    and started again on other ports (`free_port`'s race, START_ATTEMPTS times at most)."""
    attempt = 1
    while True:
        try:
            return await _start_bench_once(
                sms_rate=sms_rate, never_resolves=never_resolves, log=log, workers=workers
            )
        except PortInUse as err:
            if attempt == START_ATTEMPTS:
                raise
            attempt += 1
            log(f"{err.strerror}; starting again on other ports")


async def _start_bench_once(
    *,
    sms_rate: float,
    never_resolves: Sequence[str],
    log: Callable[[str], None],
    workers: int,
) -> Bench:
    data_dir = Path(tempfile.mkdtemp(prefix="herald-bench-"))
    api_port, postgres_port = free_port(), free_port()
    carrier = Carrier(
        port=free_port(),
        inbound_url=f"http://127.0.0.1:{api_port}/v1/inbound/sms",
        never_resolves=never_resolves,
        folder=data_dir,
    )
    try:
        await carrier.start()
    except BaseException:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise
    cfg = settings_module.Settings(
        env="dev",
        data_dir=data_dir,
        database_url=None,
        temporal_address=None,
        postgres_port=postgres_port,
        temporal_port=free_port(),
        temporal_ui_port=free_port(),
        api_port=api_port,
        smtp_port=0,  # any free port, bound at once (the sink reports which)
        email_simulator_port=0,  # the SendGrid simulator too
        telnyx_simulator_port=0,  # and the Telnyx one (58082 may be another stack's)
        sms_base_url=carrier.url,
        policy_name="demo",
        data_key=None,
        # The worker gets its settings from DevStack.env(), which carries this budget.
        sms_max_per_second=sms_rate,
    )
    bench = Bench(DevStack(cfg, temporal_ui=False), carrier, data_dir, postgres_port)
    try:
        log(f"starting the embedded stack in {data_dir} ({workers} worker processes) ...")
        await bench.stack.start()
        bench.start_extra_workers(workers - 1)
        await bench.wait_for_workers()
    except BaseException:
        await bench.close()  # whatever did start, and the folder
        raise
    return bench


# --- helpers ------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": _round(percentile(values, 50)),
        "p95": _round(percentile(values, 95)),
        "p99": _round(percentile(values, 99)),
        "max": _round(max(values) if values else None),
        "n": len(values),
    }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


async def bounded(concurrency: int, jobs: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[Any]]) -> Any:
        async with gate:
            return await job()

    return await asyncio.gather(*(one(j) for j in jobs))


def seed_consents(bench: Bench, recipients: list[str]) -> None:
    now = datetime.now(UTC)
    with bench.client.sessions.begin() as session:
        session.add_all(
            Consent(
                recipient_ref=r,
                channel=SMS.name,
                purpose="service",
                source="bench",
                granted_at=now,
            )
            for r in recipients
        )


class RssSampler:
    """Resident memory of each worker process, sampled every 0.5 s."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.processes = [psutil.Process(pid) for pid in pids]
        self.samples: list[list[int]] = [[] for _ in pids]
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        for process, samples in zip(self.processes, self.samples, strict=True):
            try:
                samples.append(process.memory_info().rss)
            except psutil.Error:
                pass

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(0.5)

    def __enter__(self) -> RssSampler:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        self.sample()

    def report(self) -> dict[str, Any]:
        """The largest worker's peak and end (one process's footprint, not the sum)."""
        mib = 1024 * 1024
        peaks = [round(max(s) / mib, 1) for s in self.samples if s]
        ends = [round(s[-1] / mib, 1) for s in self.samples if s]
        out: dict[str, Any] = {
            "peak_mib": max(peaks) if peaks else None,
            "end_mib": max(ends) if ends else None,
        }
        if len(self.samples) > 1:
            out["peak_mib_by_worker"] = peaks
        return out


Part = tuple[int | Sequence[int], bool]
"""A part of the stack for CpuMeter: its process (or processes) and whether their
children count too."""


def worker_cpu_parts(pids: Sequence[int]) -> tuple[Part, dict[str, Part]]:
    """The 'worker' part (every worker process, summed) and, with more than one worker,
    each worker on its own (reported beside the parts, not added to the total)."""
    detail: dict[str, Part] = (
        {f"worker-{n}": (pid, True) for n, pid in enumerate(pids, 1)} if len(pids) > 1 else {}
    )
    return (tuple(pids), True), detail


def cpu_seconds(procs: Iterable[psutil.Process]) -> float:
    """User + system CPU seconds of these processes (one that has gone counts nothing)."""
    seconds = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        seconds += t.user + t.system
    return seconds


class CpuMeter:
    """CPU seconds (user + system) used by each part of the stack, per measured phase.

    Each part is a process (or several: the worker fleet) and its children (Postgres
    backends, the Temporal server's helpers); the bench driver's own process also serves
    the ingress. The carrier simulator runs in a process of its own (bench/carrier.py).
    `detail` parts are measured the same way but kept out of the total (one worker of
    several, already inside 'worker').
    """

    def __init__(self, parts: dict[str, Part], *, detail: dict[str, Part] | None = None) -> None:
        self.parts = parts
        """name -> (pid or pids, with their children)"""
        self.detail = detail or {}
        self.totals: dict[str, defaultdict[str, float]] = {}

    @staticmethod
    def _tree_seconds(pid: int, children: bool) -> float:
        try:
            root = psutil.Process(pid)
            procs = [root, *(root.children(recursive=True) if children else [])]
        except psutil.Error:
            return 0.0
        return cpu_seconds(procs)

    def snapshot(self) -> dict[str, float]:
        """Each part's CPU seconds now. Each process tree is read once, so a part of several
        (the worker fleet) is exactly the sum of its detail parts at the same instant:
        read twice, moments apart, the two drifted (a two-worker run's workers summed to
        40.5 ms per intent against the fleet's 40.0)."""
        read: dict[tuple[int, bool], float] = {}

        def seconds(pids: int | Sequence[int], kids: bool) -> float:
            total = 0.0
            for pid in [pids] if isinstance(pids, int) else pids:
                if (pid, kids) not in read:
                    read[(pid, kids)] = self._tree_seconds(pid, kids)
                total += read[(pid, kids)]
            return total

        every = {**self.parts, **self.detail}
        return {name: seconds(pids, kids) for name, (pids, kids) in every.items()}

    def add(self, phase: str, before: dict[str, float], after: dict[str, float]) -> None:
        bucket = self.totals.setdefault(phase, defaultdict(float))
        for name in [*self.parts, *self.detail]:
            bucket[name] += max(0.0, after.get(name, 0.0) - before.get(name, 0.0))

    def _ms(self, phase: str, units: int, names: Sequence[str]) -> dict[str, float]:
        bucket = self.totals.get(phase, defaultdict(float))
        return {name: round(1000 * bucket[name] / max(units, 1), 1) for name in names}

    def per_unit(self, phase: str, units: int) -> dict[str, float]:
        """Milliseconds of CPU per intent (or per baseline workflow), by part."""
        ms = self._ms(phase, units, list(self.parts))
        return {**ms, "total": round(sum(ms.values()), 1)}

    def per_unit_detail(self, phase: str, units: int) -> dict[str, float]:
        """The same for the detail parts (each worker of several); empty without any."""
        return self._ms(phase, units, list(self.detail))


def in_bare_worker_units(
    herald_ms: Mapping[str, float], baseline_ms: Mapping[str, float]
) -> dict[str, float]:
    """Herald's CPU per intent by part, in units of the bare baseline worker's CPU per
    workflow measured in the same run (empty without one).

    This machine's speed drifts by 10-20 % within an hour (a noisy neighbour, the host's
    clock): the same commit measured a worker of 25.5 and of 38.6 ms per intent on one
    morning, with the bare worker at 15.4 and 21.6 ms. Divided by the bare worker, which
    ran on the same machine minutes apart in alternating rounds, the figures compare
    across runs."""
    bare = baseline_ms.get("baseline_worker") or 0.0
    if bare <= 0:
        return {}
    return {name: round(ms / bare, 2) for name, ms in herald_ms.items() if ms}


def event_counts(events: Any) -> Counter[str]:
    """Events and billable actions of one workflow history."""
    from temporalio.api.enums.v1 import EventType as E

    c: Counter[str] = Counter(events=len(events))
    for event in events:
        t = event.event_type
        if t == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            c["activities"] += 1
        elif t == E.EVENT_TYPE_MARKER_RECORDED:
            # A local activity counts as an activity for the baseline (which runs that many
            # ordinary no-op activities, a stricter comparison); a patch marker does not.
            name = event.marker_recorded_event_attributes.marker_name
            c["local_activities" if name == "core_local_activity" else "markers"] += 1
        elif t == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            c["activity_retries"] += event.activity_task_started_event_attributes.attempt - 1
        elif t == E.EVENT_TYPE_TIMER_STARTED:
            c["timers"] += 1
        elif t == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            c["signals"] += 1
        elif t == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            c["updates"] += 1
        elif t == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            c["search_attribute_upserts"] += 1
    c["actions"] = (
        1 + c["activities"] + c["local_activities"] + c["timers"] + c["signals"] + c["updates"]
    )
    return c


async def history_counts(client: Any, workflow_ids: list[str]) -> dict[str, Any]:
    """Events and billable actions per workflow, from a sample of histories."""
    per: list[Counter[str]] = []
    for workflow_id in workflow_ids:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        per.append(event_counts(history.events))
    keys = sorted({k for c in per for k in c})
    n = max(len(per), 1)
    return {"sampled": len(per), **{k: round(sum(c[k] for c in per) / n, 2) for k in keys}}


# --- throughput mode -------------------------------------------------------------------


def round_recipients(run_id: str, offset: int, count: int) -> list[str]:
    return [f"b-{run_id}-{offset + i}" for i in range(count)]


async def seed_round(bench: Bench, run_id: str, offset: int, count: int) -> list[str]:
    """The consents of a round's recipients (returned): the app's data, not Herald's work,
    so they are written before a CPU window opens."""
    recipients = round_recipients(run_id, offset, count)
    await asyncio.to_thread(seed_consents, bench, recipients)
    return recipients


async def run_herald(
    bench: Bench, run_id: str, offset: int, count: int, concurrency: int
) -> tuple[float, list[str]]:
    """Record and start `count` intents (their consents seeded by `seed_round`); return the
    seconds until every workflow finished."""
    numbers = bench.numbers[offset : offset + count]
    recipients = round_recipients(run_id, offset, count)
    client = bench.client
    started = time.monotonic()

    async def one(i: int) -> str:
        key = f"bench:{run_id}:i-{offset + i}"
        ref = await client.notify(
            NotificationRequest(
                business_key=key,
                recipient_ref=recipients[i],
                template_key="demo",
                phone=numbers[i],
                variables={"n": offset + i, "intent_id": key},
            )
        )
        return ref.workflow_id

    workflow_ids = await bounded(concurrency, [functools.partial(one, i) for i in range(count)])
    results = await asyncio.gather(
        *(client.temporal.get_workflow_handle(w).result() for w in workflow_ids)
    )
    elapsed = time.monotonic() - started
    outcomes = Counter(getattr(r, "outcome", None) or r.get("outcome") for r in results)
    if set(outcomes) != {"delivered"}:
        print(f"herald bench: not every intent was delivered: {dict(outcomes)}", file=sys.stderr)
    return elapsed, workflow_ids


async def run_baseline(
    bench: Bench, task_queue: str, count: int, activities: int, concurrency: int
) -> tuple[float, list[str]]:
    from bench.baseline import BaselineInput, BaselineWorkflow

    client = bench.client.temporal
    prefix = f"baseline-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()

    async def one(i: int) -> Any:
        return await client.start_workflow(
            BaselineWorkflow.run,
            BaselineInput(activities),
            id=f"{prefix}-{i}",
            task_queue=task_queue,
        )

    handles = await bounded(concurrency, [functools.partial(one, i) for i in range(count)])
    await asyncio.gather(*(h.result() for h in handles))
    return time.monotonic() - started, [h.id for h in handles]
