"""The console's sign-in throttle, sessions and headers (ASGI, real Postgres): counts shared
by two API processes, a right token refused while blocked, one-use sign-in forms, audit
rows and the refusal metric, an app principal refused before anything is written, both
session boundaries, refreshes that are not use, and the headers of every answer."""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.console import reads, sessions
from api.console import sign_in_answer as console_sign_in
from api.console.headers import CONSOLE_HEADERS
from domain.principals import Principal, Role
from ledger.crypto import FieldCipher
from ledger.models import AuditEvent, ConsoleSession, PrincipalRecord, SignInCounter
from ledger.principals import token_hash
from tests.api.conftest import StubTemporal, build_app
from tests.api.test_console import csrf_of, principal, sign_in
from tests.conftest import unique

pytestmark = pytest.mark.ledger


async def post(ingress, name: str, token: str, address: str) -> console_sign_in.Answer:  # type: ignore[no-untyped-def]
    form = console_sign_in.form_token(sessions.now())
    return await console_sign_in.answer(
        ingress, name=name, token=token, address=address, cookie_csrf=form, form_csrf=form
    )


def refused_metric(ingress, reason: str) -> float:  # type: ignore[no-untyped-def]
    value = ingress.registry.get_sample_value(
        "herald_console_sign_ins_refused_total", {"reason": reason}
    )
    return float(value or 0.0)


async def test_two_api_processes_count_one_names_refusals_together(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    # Two apps on one ledger, as two `herald api` processes behind a balancer.
    _, one = build_app(committed, cipher, StubTemporal())
    _, two = build_app(committed, cipher, StubTemporal())
    name, token = principal(committed, Role.OPERATOR)
    answers = []
    for n in range(5):
        answers.append(await post(one if n % 2 else two, name, "wrong", unique("10.0.0")))
    assert [a.status for a in answers] == [401, 401, 401, 401, 429]
    assert answers[-1].retry_after == 60 and "1 minute" in answers[-1].message
    # Blocked in both processes, the right token included (it is not even looked at).
    for ingress in (one, two):
        blocked = await post(ingress, name, token, unique("10.0.1"))
        assert blocked.status == 429 and blocked.principal is None
        assert 55 <= (blocked.retry_after or 0) <= 60
    assert refused_metric(one, "throttled") == 1 and refused_metric(two, "throttled") == 1
    assert refused_metric(one, "credentials") + refused_metric(two, "credentials") == 5
    with committed() as session:
        rows = session.execute(
            select(AuditEvent)
            .where(AuditEvent.subject == f"principal:{name}")
            .order_by(AuditEvent.id)
        ).scalars()
        reasons = [(r.action, (r.detail or {}).get("reason")) for r in rows]
    assert (
        reasons
        == [("console.sign_in.refused", "credentials")] * 5
        + [("console.sign_in.refused", "throttled")] * 2
    )


async def test_twenty_refusals_from_one_address_block_it_whatever_the_name(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    _, ingress = build_app(committed, cipher, StubTemporal())
    address = unique("192.0.2")
    statuses = [(await post(ingress, unique("who"), "x", address)).status for _ in range(20)]
    assert statuses == [401] * 19 + [429]
    name, token = principal(committed, Role.VIEWER)
    assert (await post(ingress, name, token, address)).status == 429
    signed = await post(ingress, name, token, unique("192.0.3"))
    assert signed.status == 303 and signed.principal == Principal(name, Role.VIEWER)
    with committed() as session:
        (row,) = session.execute(
            select(AuditEvent).where(
                AuditEvent.subject == f"principal:{name}",
                AuditEvent.action == "console.sign_in",
            )
        ).scalars()
    assert (row.actor, row.actor_role) == (name, "viewer")


async def test_a_sign_in_form_is_good_for_one_post(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    _, ingress = build_app(committed, cipher, StubTemporal())
    name, token = principal(committed, Role.VIEWER)
    form = console_sign_in.form_token(sessions.now())
    first = await console_sign_in.answer(
        ingress, name=name, token=token, address="127.0.0.1", cookie_csrf=form, form_csrf=form
    )
    again = await console_sign_in.answer(
        ingress, name=name, token=token, address="127.0.0.1", cookie_csrf=form, form_csrf=form
    )
    assert (first.status, again.status) == (303, 403)
    stale = console_sign_in.form_token(sessions.now() - timedelta(hours=2))
    old = await console_sign_in.answer(
        ingress, name=name, token=token, address="127.0.0.1", cookie_csrf=stale, form_csrf=stale
    )
    assert old.status == 403 and refused_metric(ingress, "form") == 2


async def test_an_app_principals_right_token_is_refused_before_its_last_use_is_written(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    name, token = principal(committed, Role.APP, "shop")
    form = await http.get("/console/sign-in")
    refused = await http.post(
        "/console/sign-in", data={"name": name, "token": token, "csrf": csrf_of(form.text)}
    )
    assert refused.status_code == 401
    with committed() as session:
        row = session.execute(
            select(PrincipalRecord).where(PrincipalRecord.name == name)
        ).scalar_one()
    assert row.last_used_at is None


def _session_row(committed: sessionmaker[Session], *, created: datetime, seen: datetime) -> str:
    value = unique("cookie")
    with committed.begin() as session:
        name, _ = principal(committed, Role.VIEWER)
        row = session.execute(
            select(PrincipalRecord).where(PrincipalRecord.name == name)
        ).scalar_one()
        session.add(
            ConsoleSession(
                id_sha256=token_hash(value),
                principal=name,
                role="viewer",
                csrf_token="c",
                credential_sha256=row.token_sha256,
                created_at=created,
                last_seen_at=seen,
            )
        )
    return value


def _resume(
    committed: sessionmaker[Session], value: str, now: datetime, *, used: bool = True
) -> sessions.SignedIn | None:
    with committed.begin() as session:
        return sessions.resume(session, value, now, break_glass=lambda _: False, used=used)


def test_a_session_lives_to_its_idle_limit_and_not_a_second_more(
    committed: sessionmaker[Session],
) -> None:
    now = datetime.now(UTC)
    at_limit = _session_row(committed, created=now, seen=now - sessions.IDLE_LIMIT)
    past = _session_row(
        committed, created=now, seen=now - sessions.IDLE_LIMIT - timedelta(seconds=1)
    )
    assert _resume(committed, at_limit, now) is not None
    assert _resume(committed, past, now) is None


def test_a_busy_session_ends_at_its_absolute_lifetime(committed: sessionmaker[Session]) -> None:
    now = datetime.now(UTC)
    assert sessions.LIFETIME == timedelta(hours=12)
    at_limit = _session_row(committed, created=now - sessions.LIFETIME, seen=now)
    past = _session_row(committed, created=now - sessions.LIFETIME - timedelta(seconds=1), seen=now)
    assert _resume(committed, at_limit, now) is not None
    assert _resume(committed, past, now) is None
    with committed() as session:
        row = session.get(ConsoleSession, token_hash(past))
        assert row is not None and row.ended_at == now  # ended, not merely refused


def test_a_pages_own_refresh_is_not_use(committed: sessionmaker[Session]) -> None:
    now = datetime.now(UTC)
    seen = now - sessions.IDLE_LIMIT + timedelta(minutes=1)
    value = _session_row(committed, created=now - timedelta(hours=1), seen=seen)
    assert _resume(committed, value, now, used=False) is not None
    with committed() as session:
        row = session.get(ConsoleSession, token_hash(value))
        assert row is not None and row.last_seen_at == seen
    # Refreshes alone: the session ends at the idle limit after the person's last request.
    later = now + timedelta(minutes=2)
    assert _resume(committed, value, later, used=False) is None
    assert _resume(committed, value, later) is None  # and a person's request cannot revive it


def test_a_person_request_restarts_the_idle_clock(committed: sessionmaker[Session]) -> None:
    now = datetime.now(UTC)
    value = _session_row(committed, created=now, seen=now - timedelta(minutes=10))
    assert _resume(committed, value, now) is not None
    with committed() as session:
        row = session.get(ConsoleSession, token_hash(value))
        assert row is not None and row.last_seen_at == now


async def test_every_console_answer_carries_the_security_headers(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    def secured(answer: httpx.Response) -> None:
        for header, value in CONSOLE_HEADERS.items():
            assert answer.headers.get(header) == value, (answer.request.url, header)

    secured(await http.get("/console"))  # the redirect to the sign-in page
    secured(await http.get("/console/sign-in"))
    secured(await http.get("/console/static/console.css"))
    secured(await http.get("/console/no-such-page"))
    secured(await http.post("/console/sign-in", data={"name": "x", "token": "y"}))
    await sign_in(http, *principal(committed, Role.VIEWER))
    secured(await http.get("/console/intents", params={"created_from": "yesterday"}))
    secured(await http.get("/console/intents/no-such-intent"))
    secured(await http.get("/console/intents.csv", params={"key_prefix": unique("none")}))
    secured(await http.put("/console/intents"))


async def test_docs_and_redoc_allow_only_their_own_inline_start_up(http: httpx.AsyncClient) -> None:
    docs = await http.get("/docs")
    policy = docs.headers["content-security-policy"]
    (script,) = re.findall(r"<script>(.*?)</script>", docs.text, re.S)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'self' 'sha256-{digest}';" in policy
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    assert "frame-ancestors 'none'" in policy
    redoc = await http.get("/redoc")
    assert "script-src 'self';" in redoc.headers["content-security-policy"]
    assert redoc.headers["x-content-type-options"] == "nosniff"
    # The API's JSON answers are not the console's: no page policy forced on them.
    assert "content-security-policy" not in (await http.get("/healthz")).headers


def test_a_csv_cell_that_would_start_a_formula_is_kept_as_text() -> None:
    assert [reads.csv_cell(v) for v in ("=1+1", "+44", "-2", "@SUM(A1)", "ok", None, 3)] == [
        "'=1+1",
        "'+44",
        "'-2",
        "'@SUM(A1)",
        "ok",
        "",
        "3",
    ]


async def test_the_sign_in_page_answers_429_with_retry_after_after_five_wrong_tokens(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    name, token = principal(committed, Role.OPERATOR)
    statuses = []
    for attempt in range(6):
        form = await http.get("/console/sign-in")
        answer = await http.post(
            "/console/sign-in",
            data={
                "name": name,
                "token": token if attempt == 5 else "wrong",
                "csrf": csrf_of(form.text),
            },
        )
        statuses.append(answer.status_code)
    assert statuses == [401, 401, 401, 401, 429, 429]
    assert 55 <= int(answer.headers["retry-after"]) <= 60
    assert "Too many refused sign-ins" in answer.text and "1 minute" in answer.text
    assert "herald_console=" not in answer.headers.get("set-cookie", "")
    metrics = (await http.get("/metrics")).text
    assert re.search(
        r'^herald_console_sign_ins_refused_total\{reason="throttled"\} [1-9]', metrics, re.M
    )


async def test_a_posted_sign_in_form_cannot_be_posted_again(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    name, token = principal(committed, Role.VIEWER)
    form = await http.get("/console/sign-in")
    data = {"name": name, "token": token, "csrf": csrf_of(form.text)}
    cookie = http.cookies.get("herald_console_login")
    assert (await http.post("/console/sign-in", data=data)).status_code == 303
    http.cookies.set("herald_console_login", cookie or "", path="/console")
    again = await http.post("/console/sign-in", data=data)
    assert again.status_code == 403 and "already used" in again.text


async def test_a_pages_own_refresh_over_http_leaves_the_idle_clock(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    name, token = principal(committed, Role.VIEWER)
    await sign_in(http, name, token)
    earlier = datetime.now(UTC) - timedelta(minutes=20)
    with committed.begin() as session:
        row = session.execute(
            select(ConsoleSession).where(ConsoleSession.principal == name)
        ).scalar_one()
        row.last_seen_at = earlier
        key = row.id_sha256
    refreshed = await http.get("/console", headers={sessions.REFRESH_HEADER: "1"})
    assert refreshed.status_code == 200
    with committed() as session:
        assert session.get(ConsoleSession, key).last_seen_at == earlier  # type: ignore[union-attr]
    assert (await http.get("/console")).status_code == 200  # a person's request is use
    with committed() as session:
        assert session.get(ConsoleSession, key).last_seen_at > earlier  # type: ignore[union-attr]


async def test_the_session_lifetime_is_a_setting(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    app, ingress = build_app(committed, cipher, StubTemporal())
    ingress.console_session_lifetime = timedelta(minutes=5)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=(unique("10.9"), 1)),
        base_url="http://10.0.0.5:8080",
    ) as http:
        name, token = principal(committed, Role.VIEWER)
        await sign_in(http, name, token)
        with committed.begin() as session:
            row = session.execute(
                select(ConsoleSession).where(ConsoleSession.principal == name)
            ).scalar_one()
            row.created_at = datetime.now(UTC) - timedelta(minutes=5, seconds=1)
        assert (await http.get("/console")).status_code == 303


async def test_a_token_typed_as_a_name_is_kept_only_as_a_keyed_hash(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    # A token has the shape of a name: only a principal's name is kept as typed.
    _, ingress = build_app(committed, cipher, StubTemporal())
    name, token = principal(committed, Role.VIEWER)
    assert (await post(ingress, token, "x", unique("10.8"))).status == 401
    assert (await post(ingress, name, "wrong", unique("10.8"))).status == 401
    with committed() as session:
        subjects = set(session.execute(select(AuditEvent.subject)).scalars())
        counters = {k for (_, k) in session.execute(select(SignInCounter.kind, SignInCounter.key))}
    assert f"principal:{name}" in subjects and name in counters  # a principal's name: as is
    assert not any(token in s for s in subjects) and token not in counters
    hashed = "not-a-name:" + cipher.lookup_hmac(token)[:16]
    assert f"principal:{hashed}" in subjects and hashed in counters


async def test_contact_data_typed_as_a_name_is_kept_nowhere_readable(
    committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    _, ingress = build_app(committed, cipher, StubTemporal())
    typed = f"{unique('ann')}@example.com"
    assert (await post(ingress, typed, "x", unique("10.7"))).status == 401
    claimed = await ingress.tx(console_sign_in.claimed_name(ingress, typed))
    assert claimed.startswith("not-a-name:") and "@" not in claimed
    with committed() as session:
        rows = list(
            session.execute(
                select(AuditEvent).where(AuditEvent.subject == f"principal:{claimed}")
            ).scalars()
        )
        assert len(rows) == 1
        assert session.get(SignInCounter, ("name", claimed)) is not None
        assert session.get(SignInCounter, ("name", typed)) is None
