"""The console's pages over a large ledger: `python -m bench.console`.

Seeds `--intents` intents (default 100,000) with their policy decisions, attempts and
observations into a fresh embedded Postgres (or `--database-url`), by COPY, spread over
the last 30 days, then times through the real app (ASGI, the console's own routes and
templates; the pages never call Temporal) the overview, the list, a filtered list, a
recipient search, an intent page, the reconciliation page and the list of intents waiting
for an operator (`?awaiting=any`), and prints p50/p95 per page.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import random
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.orm import sessionmaker

from api.app import Ingress, create_app
from bench.stack import percentile
from devstack import EmbeddedPostgres, free_port
from domain import keys
from domain.channels import EMAIL, SMS
from domain.principals import Principal, Role
from ledger import migrate, principals, reconcile, review_items
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.templates import seed_packaged
from starter.client import HeraldClient

EVENT_TYPES = [
    ("class-opening", "transactional"),
    ("order-created", "transactional"),
    ("itinerary-change", "transactional"),
    ("session-report", "promotional"),
]
REGIONS = ["uk", "us", "eu", "za"]
# (intent outcome, share): the attempt and observation states each one leaves.
OUTCOMES = [
    ("delivered", 0.80),
    ("sent", 0.05),
    ("unknown", 0.03),
    ("failed", 0.04),
    ("undelivered", 0.02),
    ("cancelled", 0.03),
    ("denied", 0.03),
]
RECIPIENTS_PER_INTENT = 0.5
"""About two intents per recipient (and per phone number)."""


@dataclass
class Seeded:
    phones: list[str]
    intent_ids: list[str]


WAITS = {"unknown": ("settlement", timedelta(days=3)), "failed": ("resend", timedelta(days=1))}
"""The recent unknown and failed intents still wait for an operator (settle, approve a
resend) until their horizon, as the workflow records it (the `awaiting` filter's rows)."""


def _waiting(outcome: str, created: datetime, now: datetime) -> tuple[str | None, datetime | None]:
    wait = WAITS.get(outcome)
    if wait is None or created + wait[1] <= now:
        return None, None
    return wait[0], created + wait[1]


def _copy(cursor: Any, table: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def seed(url: str, cipher: FieldCipher, count: int, rng: random.Random) -> Seeded:
    """Bulk-insert `count` intents with their evidence (COPY; ids taken up front)."""
    engine = create_engine(url)
    sessions = sessionmaker(engine)
    with sessions.begin() as session:
        policy = repo.active_policy(session).version
        first_decision = session.execute(
            text("SELECT nextval('policy_decision_id_seq')")
        ).scalar_one()
        first_attempt = session.execute(text("SELECT nextval('attempt_id_seq')")).scalar_one()
    now = datetime.now(UTC)
    recipients = max(1, int(count * RECIPIENTS_PER_INTENT))
    phones = [f"+4474{n:08d}" for n in rng.sample(range(10**8), recipients)]
    hmacs = [cipher.lookup_hmac(p) for p in phones]
    intents, decisions, attempts, observations = [], [], [], []
    decision_id, attempt_id = first_decision, first_attempt
    intent_ids = []
    weights = [share for _, share in OUTCOMES]
    for n in range(count):
        intent_id = str(uuid.UUID(int=rng.getrandbits(128)))
        intent_ids.append(intent_id)
        who = rng.randrange(recipients)
        event_type, category = rng.choice(EVENT_TYPES)
        created = now - timedelta(seconds=rng.uniform(0, 30 * 86_400))
        outcome = rng.choices([o for o, _ in OUTCOMES], weights)[0]
        key = f"{event_type}:x-{n}:m-{who}"
        # Recorded as the in-process client records: in its namespace (domain.keys).
        identity = keys.identity(keys.DEFAULT_NAMESPACE, key)
        fallback = category == "transactional" and rng.random() < 0.3
        channels = [SMS.name, EMAIL.name] if fallback else [SMS.name]
        intents.append(
            (
                intent_id,
                key,
                event_type,
                category,
                rng.choice(REGIONS),
                "GB",
                "Europe/London",
                f"m-{who}",
                json.dumps({"mode": "fallback", "channels": channels}),
                event_type,
                1,
                "en",
                hashlib.sha256(key.encode()).hexdigest(),
                hmacs[who],
                keys.workflow_id(identity),
                keys.DEFAULT_NAMESPACE,
                False,
                created + timedelta(minutes=1) if outcome == "cancelled" else None,
                created,
                *_waiting(outcome, created, now),
            )
        )
        decisions.append(
            (
                decision_id,
                intent_id,
                SMS.name,
                policy,
                "deny" if outcome == "denied" else "allow",
                "consent.missing" if outcome == "denied" else "allow",
                "seeded",
                "{}",
                created,
            )
        )
        if outcome == "denied":
            decision_id += 1
            continue
        state = {"cancelled": "delivered"}.get(outcome, outcome)
        token = keys.attempt_token(identity, SMS.name, 1)
        submitted = created + timedelta(seconds=rng.uniform(0.2, 2))
        terminal = submitted + timedelta(seconds=rng.uniform(0.5, 20))
        attempts.append(
            (
                attempt_id,
                intent_id,
                SMS.name,
                1,
                token,
                state,
                f"SM{uuid.UUID(int=rng.getrandbits(128)).hex}",
                decision_id,
                hmacs[who],
                hashlib.sha256(token.encode()).hexdigest(),
                event_type,
                1,
                "Herald",
                created,
                submitted,
                terminal if state in ("delivered", "failed", "undelivered", "unknown") else None,
            )
        )
        observations.append(
            (
                attempt_id,
                "send",
                "queued",
                "submitted",
                f"send:{token}",
                "applied",
                True,
                False,
                submitted,
            )
        )
        if state != "unknown":
            final = {"sent": "sent"}.get(state, state)
            observations.append(
                (
                    attempt_id,
                    "webhook",
                    final,
                    final,
                    f"webhook:{token}",
                    "applied",
                    True,
                    False,
                    terminal,
                )
            )
        decision_id += 1
        attempt_id += 1
    with engine.begin() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        with raw.cursor() as cursor:  # type: ignore[attr-defined]
            _copy(
                cursor,
                "intent",
                [
                    "id",
                    "business_key",
                    "event_type",
                    "category",
                    "region",
                    "country",
                    "timezone",
                    "recipient_ref",
                    "channel_plan",
                    "template_key",
                    "template_version",
                    "locale",
                    "payload_sha256",
                    "sms_destination_hmac",
                    "workflow_id",
                    "namespace",
                    "legal_hold",
                    "cancelled_at",
                    "created_at",
                    "awaiting",
                    "awaiting_until",
                ],
                intents,
            )
            _copy(
                cursor,
                "policy_decision",
                [
                    "id",
                    "intent_id",
                    "channel",
                    "policy_version",
                    "outcome",
                    "rule",
                    "reason",
                    "inputs",
                    "decided_at",
                ],
                decisions,
            )
            _copy(
                cursor,
                "attempt",
                [
                    "id",
                    "intent_id",
                    "channel",
                    "number",
                    "token",
                    "state",
                    "remote_id",
                    "decision_id",
                    "destination_hmac",
                    "content_sha256",
                    "template_key",
                    "template_version",
                    "sender",
                    "prepared_at",
                    "submitted_at",
                    "terminal_at",
                ],
                attempts,
            )
            _copy(
                cursor,
                "observation",
                [
                    "attempt_id",
                    "source",
                    "raw_status",
                    "normalized_status",
                    "dedupe_key",
                    "verdict",
                    "applied",
                    "conflict",
                    "observed_at",
                ],
                observations,
            )
        conn.execute(text(f"SELECT setval('policy_decision_id_seq', {decision_id})"))
        conn.execute(text(f"SELECT setval('attempt_id_seq', {attempt_id})"))
        conn.execute(text("ANALYZE"))
    engine.dispose()
    return Seeded(phones, intent_ids)


def sweep(url: str) -> int:
    """One run of the reconcile sweep (what the schedule does every 5 minutes), so the
    reconciliation page has its review items; every kind's limit lifted."""
    engine = create_engine(url)
    now = datetime.now(UTC)
    with sessionmaker(engine).begin() as session:
        rows = reconcile.find(session, now=now, limit=1_000_000)
        recorded = review_items.record_review_items(session, rows, now)
    engine.dispose()
    return recorded


CSRF = re.compile(r'name="csrf" value="([^"]+)"')


async def measure(
    url: str, cipher: FieldCipher, seeded: Seeded, repeat: int, rng: random.Random
) -> dict[str, dict[str, float]]:
    engine = create_engine(url, pool_size=5)
    sessions = sessionmaker(engine, expire_on_commit=False)
    with sessions.begin() as session:
        issued = principals.create(
            session, "bench", Role.OPERATOR, by=Principal("bench", Role.ADMIN), at=datetime.now(UTC)
        )
    # The pages read the ledger only; no Temporal call is made, so none is connected.
    client = HeraldClient(None, sessions, cipher)  # type: ignore[arg-type]
    app = create_app(
        Ingress(
            client,
            auth_token="bench",
            public_base_url="http://bench",
            operator_token=None,
            unsubscribe_secret="bench",
        )
    )
    timings: dict[str, list[float]] = {}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://bench"
    ) as http:
        form = await http.get("/console/sign-in")
        csrf_login = CSRF.search(form.text).group(1)  # type: ignore[union-attr]
        done = await http.post(
            "/console/sign-in", data={"name": "bench", "token": issued.token, "csrf": csrf_login}
        )
        assert done.status_code == 303, done.text
        csrf = CSRF.search((await http.get("/console/intents")).text).group(1)  # type: ignore[union-attr]
        pages = {
            "overview": lambda: http.get("/console"),
            "list": lambda: http.get("/console/intents"),
            "filtered list": lambda: http.get(
                "/console/intents",
                params={
                    "state": "unknown",
                    "event_type": rng.choice(EVENT_TYPES)[0],
                    "region": rng.choice(REGIONS),
                },
            ),
            "recipient search": lambda: http.post(
                "/console/search", data={"q": rng.choice(seeded.phones), "csrf": csrf}
            ),
            "intent page": lambda: http.get(f"/console/intents/{rng.choice(seeded.intent_ids)}"),
            "reconciliation": lambda: http.get("/console/reconciliation"),
            "awaiting list": lambda: http.get("/console/intents", params={"awaiting": "any"}),
        }
        for name, call in pages.items():
            await call()  # warm: templates compiled, pool filled
            timings[name] = []
            for _ in range(repeat):
                started = time.perf_counter()
                answer = await call()
                timings[name].append((time.perf_counter() - started) * 1000)
                assert answer.status_code == 200, (name, answer.status_code, answer.text[:300])
    engine.dispose()
    return {
        name: {
            "p50_ms": round(statistics.median(values), 1),
            "p95_ms": round(percentile(values, 95) or 0.0, 1),
            "max_ms": round(max(values), 1),
        }
        for name, values in timings.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__)
    parser.add_argument("--intents", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=40, help="requests per page")
    parser.add_argument("--database-url", help="an empty Postgres database (default: embedded)")
    parser.add_argument("--seed", type=int, default=29)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    cipher = FieldCipher("b1:" + base64.b64encode(secrets.token_bytes(32)).decode())
    folder = Path(tempfile.mkdtemp(prefix="herald-bench-console-"))
    postgres = None
    try:
        url = args.database_url
        if url is None:
            postgres = EmbeddedPostgres(folder, port=free_port(), fast=True)
            url = postgres.start()
        migrate.upgrade(url)
        engine = create_engine(url)
        with sessionmaker(engine).begin() as session:
            seed_packaged(session, "default")
        engine.dispose()
        started = time.perf_counter()
        seeded = seed(url, cipher, args.intents, rng)
        seeding = time.perf_counter() - started
        started = time.perf_counter()
        review_items = sweep(url)
        sweeping = time.perf_counter() - started
        results = asyncio.run(measure(url, cipher, seeded, args.repeat, rng))
    finally:
        if postgres is not None:
            postgres.destroy()
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"seeded {args.intents} intents in {seeding:.1f} s; the reconcile sweep recorded "
        f"{review_items} review items in {sweeping:.1f} s; {args.repeat} requests per page"
    )
    width = max(len(name) for name in results)
    for name, figures in results.items():
        print(
            f"  {name:<{width}}  p50 {figures['p50_ms']:7.1f} ms   "
            f"p95 {figures['p95_ms']:7.1f} ms   max {figures['max_ms']:7.1f} ms"
        )
    print(
        json.dumps(
            {
                "intents": args.intents,
                "seed_seconds": round(seeding, 1),
                "review_items": review_items,
                "pages": results,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
