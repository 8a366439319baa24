"""The operator console over HTTP (ASGI, real Postgres): sign-in, sessions, CSRF, the pages
and the actions, and that contact data stays out of URLs and HTML unless revealed."""

from __future__ import annotations

import csv
import html
import io
import re
from collections import Counter
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from api.app import Ingress, create_app
from domain.principals import BREAK_GLASS_NAME, Principal, Role
from ledger import evidence, listing, principals, review_items
from ledger.models import (
    Attempt,
    Consent,
    ConsoleSession,
    Intent,
    OperatorAction,
    ReviewItem,
    Suppression,
)
from ledger.read_models import intent_list
from ledger.read_models.overview import overview as read_overview
from starter.client import HeraldClient
from tests.api.conftest import (
    AUTH_TOKEN,
    OPERATOR_TOKEN,
    PUBLIC_BASE,
    UNSUBSCRIBE_SECRET,
    random_mobile,
    submitted_attempt,
)
from tests.conftest import unique
from tests.ledger.conftest import make_attempt

pytestmark = pytest.mark.ledger

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, html[:500]
    return found.group(1)


def principal(committed: sessionmaker[Session], role: Role, prefix: str = "ana") -> tuple[str, str]:
    """A new ledger principal: (name, token)."""
    name = unique(prefix)
    with committed.begin() as session:
        issued = principals.create(
            session, name, role, by=Principal("test", Role.ADMIN), at=datetime.now(UTC)
        )
    return name, issued.token


async def sign_in(http: httpx.AsyncClient, name: str, token: str) -> str:
    """Sign in through the form; the CSRF token of the new session."""
    form = await http.get("/console/sign-in")
    done = await http.post(
        "/console/sign-in", data={"name": name, "token": token, "csrf": csrf_of(form.text)}
    )
    assert done.status_code == 303, done.text
    landing = await http.get("/console")
    assert landing.status_code == 200, landing.text
    return csrf_of(landing.text)


async def test_nothing_but_sign_in_and_static_without_a_session(http):
    for path in (
        "/console",
        "/console/intents",
        "/console/reconciliation",
        "/console/templates",
        "/console/policies",
    ):
        answer = await http.get(path)
        assert answer.status_code == 303 and answer.headers["location"] == "/console/sign-in"
    assert (await http.post("/console/search", data={"q": "+447400000100"})).headers[
        "location"
    ] == "/console/sign-in"
    assert (await http.get("/console/sign-in")).status_code == 200
    css = await http.get("/console/static/console.css")
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]
    root = await http.get("/")
    assert root.status_code == 303 and root.headers["location"] == "/console"


async def test_a_wrong_token_is_refused_and_the_cookie_is_http_only_and_strict(http, committed):
    name, token = principal(committed, Role.OPERATOR)
    other, _ = principal(committed, Role.OPERATOR)
    for wrong_name, wrong_token in ((name, "nope"), (other, token), ("break-glass", token)):
        form = await http.get("/console/sign-in")
        wrong = await http.post(
            "/console/sign-in",
            data={"name": wrong_name, "token": wrong_token, "csrf": csrf_of(form.text)},
        )
        assert wrong.status_code == 401 and "do not match" in wrong.text
        assert token not in wrong.text
    form = await http.get("/console/sign-in")
    done = await http.post(
        "/console/sign-in", data={"name": name, "token": token, "csrf": csrf_of(form.text)}
    )
    cookie = [
        v for k, v in done.headers.multi_items() if k == "set-cookie" and "herald_console=" in v
    ]
    assert cookie and "HttpOnly" in cookie[0] and "SameSite=strict" in cookie[0]
    assert "Secure" not in cookie[0]  # served over http here; https sets it


async def test_an_app_credential_cannot_sign_in_and_break_glass_can(http, committed):
    name, token = principal(committed, Role.APP, "shop")
    form = await http.get("/console/sign-in")
    refused = await http.post(
        "/console/sign-in", data={"name": name, "token": token, "csrf": csrf_of(form.text)}
    )
    assert refused.status_code == 401
    await sign_in(http, BREAK_GLASS_NAME, OPERATOR_TOKEN)


async def test_sign_in_without_the_form_csrf_is_refused(http, committed):
    name, token = principal(committed, Role.OPERATOR)
    await http.get("/console/sign-in")
    refused = await http.post("/console/sign-in", data={"name": name, "token": token})
    assert refused.status_code == 403
    assert "herald_console=" not in refused.headers.get("set-cookie", "")


async def test_an_idle_session_ends_and_sign_out_ends_it_at_once(http, committed):
    name, token = principal(committed, Role.VIEWER)
    await sign_in(http, name, token)
    with committed.begin() as session:
        row = session.execute(
            select(ConsoleSession).order_by(ConsoleSession.created_at.desc()).limit(1)
        ).scalar_one()
        row.last_seen_at = datetime(2000, 1, 1, tzinfo=UTC)
    assert (await http.get("/console")).status_code == 303
    csrf = await sign_in(http, name, token)
    out = await http.post("/console/sign-out", data={"csrf": csrf})
    assert out.status_code == 303
    assert (await http.get("/console/intents")).status_code == 303


async def test_search_by_phone_finds_the_intent_and_no_page_or_url_carries_the_number(
    http, committed, cipher
):
    phone = random_mobile()
    sent = submitted_attempt(committed, cipher, phone=phone)
    csrf = await sign_in(http, *principal(committed, Role.VIEWER))
    found = await http.post("/console/search", data={"q": phone, "csrf": csrf})
    assert found.status_code == 200
    assert sent.intent_id in found.text
    assert phone not in found.text and phone[1:] not in found.text
    page = await http.get(f"/console/intents/{sent.intent_id}")
    assert page.status_code == 200 and phone not in page.text
    assert "Content-Security-Policy" in page.headers


async def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    await sign_in(http, *principal(committed, Role.OPERATOR))
    refused = await http.post(f"/console/intents/{sent.intent_id}/cancel", data={"reason": "x"})
    assert refused.status_code == 403
    with committed() as session:
        assert not _actions(session, sent.intent_id)


async def test_a_reveal_needs_a_reason_and_is_recorded(http, committed, cipher):
    phone = random_mobile()
    sent = submitted_attempt(committed, cipher, phone=phone)
    name, token = principal(committed, Role.OPERATOR)
    csrf = await sign_in(http, name, token)
    no_reason = await http.post(
        f"/console/intents/{sent.intent_id}/reveal", data={"reason": "", "csrf": csrf}
    )
    assert no_reason.status_code == 422 and phone not in no_reason.text
    shown = await http.post(
        f"/console/intents/{sent.intent_id}/reveal",
        data={"reason": "caller verified, ticket 881", "csrf": csrf},
    )
    assert shown.status_code == 200 and phone in shown.text
    with committed() as session:
        (action,) = _actions(session, sent.intent_id)
    assert (action.action, action.operator, action.operator_role, action.reason) == (
        "reveal",
        name,
        "operator",
        "caller verified, ticket 881",
    )


async def test_a_cancel_records_the_signed_in_name_and_the_page_says_so_plainly(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    name, token = principal(committed, Role.OPERATOR)
    csrf = await sign_in(http, name, token)
    done = await http.post(
        f"/console/intents/{sent.intent_id}/cancel", data={"reason": "seller asked", "csrf": csrf}
    )
    assert done.status_code == 303
    page = await http.get(done.headers["location"])
    assert "Cancel accepted" in page.text
    with committed() as session:
        (action,) = _actions(session, sent.intent_id)
    assert (action.action, action.operator, action.reason) == ("cancel", name, "seller asked")


async def test_an_approve_resend_refusal_is_shown_in_words(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    csrf = await sign_in(http, *principal(committed, Role.OPERATOR))
    done = await http.post(
        f"/console/intents/{sent.intent_id}/approve-resend",
        data={"reason": "try again", "channel": "sms", "csrf": csrf},
    )
    page = await http.get(done.headers["location"])
    assert "Refused: the intent&#39;s workflow has finished" in page.text


async def test_resolving_a_review_item_records_who_and_the_note(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    now = datetime.now(UTC)
    with committed.begin() as session:
        review_items.record_review_items(
            session,
            [
                review_items.ReviewRow(
                    kind=review_items.UNKNOWN_OUTCOME,
                    subject=f"attempt:{sent.attempt_id}",
                    since=now,
                    age=now - now,
                    intent_id=sent.intent_id,
                )
            ],
            now,
        )
        item = session.execute(
            select(ReviewItem).where(ReviewItem.subject == f"attempt:{sent.attempt_id}")
        ).scalar_one()
    name, token = principal(committed, Role.OPERATOR)
    csrf = await sign_in(http, name, token)
    before = await open_items_metric(http)
    page = await http.get("/console/reconciliation")
    found = _item_article(page.text, item.id)
    assert "; found " in found and "opened by" not in found  # the sweep's, nobody's by hand
    # The sweep recorded the item's event type and category: the set's exposure.
    assert (item.detail or {}).get("event_type") == "order-created"
    assert f"order-created · {item.detail['category']}: " in page.text  # type: ignore[index]
    done = await http.post(
        f"/console/review-items/{item.id}/resolve",
        data={"note": "carrier confirmed delivery by phone", "csrf": csrf},
    )
    assert done.status_code == 303
    assert await open_items_metric(http) == before - 1
    with committed() as session:
        row = session.get(ReviewItem, item.id)
        assert row is not None and row.resolved_at is not None
        assert (row.resolved_by, row.resolution_note) == (
            name,
            "carrier confirmed delivery by phone",
        )


async def test_an_intent_whose_workflow_was_terminated_is_its_own_set(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    now = datetime.now(UTC)
    # The page lists a set's oldest members first, 50 of them: other tests sharing this
    # ledger leave items of the same kind, so this one is made the oldest to be listed.
    since = now - timedelta(days=3650)
    row = review_items.ReviewRow(
        kind=review_items.WORKFLOW_CLOSED_INTENT_OPEN,
        subject=f"intent:{sent.intent_id}",
        since=since,
        age=now - since,
        intent_id=sent.intent_id,
    )
    with committed.begin() as session:
        review_items.record_review_items(session, [row], now)
        item = session.execute(
            select(ReviewItem).where(ReviewItem.subject == f"intent:{sent.intent_id}")
        ).scalar_one()
    name, token = principal(committed, Role.VIEWER)
    await sign_in(http, name, token)
    page = await http.get("/console/reconciliation")
    assert "Open intents whose workflow was closed (terminated)" in page.text
    assert f"/console/intents/{sent.intent_id}" in page.text and str(item.id) in page.text


async def test_the_csv_has_states_and_versions_and_no_destination(http, committed, cipher):
    phone = random_mobile()
    sent = submitted_attempt(committed, cipher, phone=phone)
    await sign_in(http, *principal(committed, Role.VIEWER))
    with committed() as session:
        key = session.get(Intent, sent.intent_id).business_key  # type: ignore[union-attr]
    answer = await http.get("/console/intents.csv", params={"key_prefix": key})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.text)))
    assert [r["intent_id"] for r in rows] == [sent.intent_id]
    assert rows[0]["sms_state"] == "submitted" and rows[0]["policy_versions"]
    assert phone not in answer.text


async def test_the_list_pages_by_keyset_with_no_gap_and_counts_by_state(http, committed, cipher):
    sent = [submitted_attempt(committed, cipher) for _ in range(3)]
    with committed() as session:
        keys = [session.get(Intent, s.intent_id).business_key for s in sent]  # type: ignore[union-attr]
        # One shared prefix for just these three: re-key them under a fresh one.
        prefix = unique("order-created:page")
        for n, s in enumerate(sent):
            session.get(Intent, s.intent_id).business_key = f"{prefix}:{n}"  # type: ignore[union-attr]
        session.commit()
        for state in (None, "sending"):
            flt = listing.IntentFilter(key_prefix=prefix, state=state)
            first = listing.list_page(session, flt, size=2)
            assert [i.intent.business_key for i in first.items] == [f"{prefix}:2", f"{prefix}:1"]
            assert first.next_cursor
            second = listing.list_page(
                session, flt, after=listing.read_cursor(first.next_cursor, flt).position, size=2
            )
            assert [i.intent.business_key for i in second.items] == [f"{prefix}:0"]
            assert second.next_cursor is None
        assert (
            listing.page(session, listing.IntentFilter(key_prefix=prefix, state="delivered")).items
            == []
        )
        counted = intent_list.counts_by_state(session, listing.IntentFilter(key_prefix=prefix))
        assert counted.counts == {"sending": 3} and not counted.capped
        capped = intent_list.counts_by_state(
            session, listing.IntentFilter(key_prefix=prefix), cap=2
        )
        assert capped.counts == {"sending": 2} and capped.capped
    assert keys
    await sign_in(http, *principal(committed, Role.VIEWER))
    page = await http.get("/console/intents", params={"key_prefix": prefix, "state": "sending"})
    assert page.status_code == 200 and f"{prefix}:0" in page.text
    bad = await http.get("/console/intents", params={"created_from": "yesterday"})
    assert bad.status_code == 400 and "created from" in bad.text


async def test_the_overviews_attempt_counts_rates_and_latencies_lead_to_their_intents(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    fell_back = submitted_attempt(committed, cipher)
    with committed.begin() as session:
        key = session.get(Intent, sent.intent_id).business_key  # type: ignore[union-attr]
        other = session.get(Intent, fell_back.intent_id).business_key  # type: ignore[union-attr]
        make_attempt(
            session, cipher, fell_back.intent_id, other, channel="email", destination="a@b.example"
        )
    await sign_in(http, *principal(committed, Role.VIEWER))
    overview = (await http.get("/console")).text
    links = [
        html.unescape(href)
        for href in re.findall(r'href="(/console/intents\?(?:attempt_state|both)[^"]+)"', overview)
    ]
    # The last hour's "submitted" attempt count (the first window) leads to the intents with
    # such an attempt prepared in that hour; p50 and p95 to the day's delivered intents.
    submitted = [u for u in links if u.startswith("/console/intents?attempt_state=submitted&")]
    assert len(submitted) == 2 and "&attempt_from=" in submitted[0]
    listed = await http.get(submitted[0])
    assert listed.status_code == 200 and sent.intent_id in listed.text
    assert len([u for u in links if "attempt_state=delivered&created_from=" in u]) == 2
    # The fallback rate leads to the day's intents attempted by both SMS and email.
    (fallback,) = [u for u in links if u.startswith("/console/intents?both_channels=1&")]
    both = (await http.get(fallback)).text
    assert fell_back.intent_id in both and sent.intent_id not in both
    # Each bar of the chart leads to its hour's intents (in its state; "other" is several).
    hours = [
        html.unescape(href)
        for href in re.findall(r'href="(/console/intents\?created_from=[^"]+)"', overview)
    ]
    assert hours and all("&created_to=" in u for u in hours)
    assert any([sent.intent_id in (await http.get(u)).text for u in hours[-2:]])
    # The filters themselves: the intent's only attempt is submitted, prepared just now.
    for params, shown in (
        ({"attempt_state": "submitted"}, True),
        ({"attempt_state": "delivered"}, False),
        ({"attempt_from": "2999-01-01T00:00"}, False),
        ({"attempt_state": "submitted", "attempt_from": "2000-01-01T00:00"}, True),
        ({"both_channels": "1"}, False),
    ):
        page = await http.get("/console/intents", params={"key_prefix": key, **params})
        assert page.status_code == 200 and (sent.intent_id in page.text) == shown, params
    bad = await http.get("/console/intents", params={"attempt_state": "lost"})
    assert bad.status_code == 400 and "attempt state" in bad.text


def test_the_overviews_chart_counts_each_new_intent_by_its_derived_state(committed, cipher):
    # One window for both reads: a minute ahead, so the new intent falls inside it.
    now = datetime.now(UTC) + timedelta(minutes=1)

    def charted() -> Counter[str]:
        with committed() as session:
            hours = read_overview(session, now).hours
        return sum((Counter(h["counts"]) for h in hours), Counter())

    before = charted()
    submitted_attempt(committed, cipher)  # derived state: sending, drawn as "other"
    after = charted()
    assert after - before == Counter({"other": 1})


async def test_a_viewer_sees_no_action_and_the_server_refuses_one_anyway(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    csrf = await sign_in(http, *principal(committed, Role.VIEWER, "vic"))
    page = await http.get(f"/console/intents/{sent.intent_id}")
    assert page.status_code == 200
    assert "Cancel intent" not in page.text and "/cancel" not in page.text
    assert "Reveal" not in page.text
    for action, data in (
        ("cancel", {"reason": "x"}),
        ("approve-resend", {"reason": "x", "channel": "sms"}),
        ("reveal", {"reason": "x"}),
        ("settle", {"reason": "x", "rule": "carrier-ticket-not-delivered", "reference": "T"}),
        ("lookup", {"channel": "sms"}),
    ):
        refused = await http.post(
            f"/console/intents/{sent.intent_id}/{action}", data={**data, "csrf": csrf}
        )
        assert refused.status_code == 403 and "operator role" in refused.text
    with committed() as session:
        assert not _actions(session, sent.intent_id)


async def test_a_revoked_principal_is_signed_out_on_its_next_request(http, committed):
    name, token = principal(committed, Role.OPERATOR)
    await sign_in(http, name, token)
    with committed.begin() as session:
        principals.revoke(session, name, by=Principal("test", Role.ADMIN), at=datetime.now(UTC))
    assert (await http.get("/console")).status_code == 303


async def test_a_rotated_token_ends_the_sessions_opened_with_the_old_one(http, committed):
    name, token = principal(committed, Role.OPERATOR)
    await sign_in(http, name, token)
    with committed.begin() as session:
        issued = principals.rotate(
            session, name, by=Principal("test", Role.ADMIN), at=datetime.now(UTC)
        )
    assert (await http.get("/console")).status_code == 303
    await sign_in(http, name, issued.token)  # the new token opens a new one
    assert (await http.get("/console")).status_code == 200


async def test_a_break_glass_session_ends_when_the_break_glass_token_is_changed(
    http, committed, cipher, temporal
):
    await sign_in(http, BREAK_GLASS_NAME, OPERATOR_TOKEN)
    assert (await http.get("/console")).status_code == 200
    # The same ledger served by an API restarted with another HERALD_OPERATOR_TOKEN.
    changed = Ingress(
        HeraldClient(temporal, committed, cipher),
        auth_token=AUTH_TOKEN,
        public_base_url=PUBLIC_BASE,
        operator_token="a-new-break-glass-token",
        unsubscribe_secret=UNSUBSCRIBE_SECRET,
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(changed)),
        base_url=str(http.base_url),
        cookies=http.cookies,
    ) as restarted:
        assert (await restarted.get("/console")).status_code == 303


async def open_items_metric(http: httpx.AsyncClient) -> float:
    """herald_review_items_open{kind="unknown_outcome"} as /metrics reports it."""
    text = (await http.get("/metrics")).text
    found = re.search(r'^herald_review_items_open\{kind="unknown_outcome"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def _actions(session: Session, intent_id: str) -> list[OperatorAction]:
    return list(
        session.execute(
            select(OperatorAction).where(OperatorAction.intent_id == intent_id)
        ).scalars()
    )


async def test_an_operator_revokes_consent_and_lifts_a_suppression_from_the_recipients_page(
    http, committed, cipher
):
    phone = random_mobile()
    sent = submitted_attempt(committed, cipher, phone=phone)
    with committed.begin() as session:
        ref = session.get(Intent, sent.intent_id).recipient_ref  # type: ignore[union-attr]
        grant = evidence.record_consent(
            session,
            recipient_ref=ref,
            channel="sms",
            purpose="service",
            source="booking app",
            at=datetime.now(UTC),
        )
        stop, _ = evidence.suppress(
            session,
            destination_hmac=cipher.lookup_hmac(phone),
            channel="sms",
            reason="opted_out",
            source="keyword:STOP",
            at=datetime.now(UTC),
        )
    name, token = principal(committed, Role.OPERATOR)
    csrf = await sign_in(http, name, token)
    page = await http.post("/console/recipient", data={"recipient_ref": ref, "csrf": csrf})
    assert page.status_code == 200
    assert "booking app" in page.text and "keyword:STOP" in page.text
    assert phone not in page.text
    revoked = await http.post(
        "/console/recipient/consent",
        data={
            "recipient_ref": ref,
            "action": "revoke",
            "channel": "sms",
            "purpose": "service",
            "reason": "asked by phone",
            "csrf": csrf,
        },
    )
    assert revoked.status_code == 200 and "grant(s) ended" in revoked.text
    lifted = await http.post(
        "/console/recipient/lift",
        data={
            "recipient_ref": ref,
            "suppression_id": str(stop.id),
            "reason": "texted START",
            "csrf": csrf,
        },
    )
    assert lifted.status_code == 200 and "Suppression lifted." in lifted.text
    with committed() as session:
        consent = session.get(Consent, grant.id)
        suppression = session.get(Suppression, stop.id)
        assert consent is not None and consent.revoked_at is not None
        assert consent.revoked_source == f"console:{name}: asked by phone"
        assert suppression is not None and suppression.lifted_at is not None
        assert suppression.lifted_source.startswith(f"operator:{name}")  # type: ignore[union-attr]


async def test_the_policy_page_shows_the_active_version_and_its_hash(http, committed):
    with committed() as session:
        from ledger import repository as repo

        active = repo.active_policy(session)
    await sign_in(http, *principal(committed, Role.VIEWER))
    page = await http.get("/console/policies")
    assert page.status_code == 200
    assert f"Policy {active.version} (active)" in page.text and active.sha256 in page.text


async def test_the_overview_shows_each_sms_providers_circuit(http, committed):
    from domain.circuit import BreakerSettings, Outcome
    from ledger import circuits

    provider = unique("primary")
    breaker = BreakerSettings(failure_threshold=2, cool_down=timedelta(minutes=5))
    now = datetime.now(UTC)
    with committed.begin() as session:
        for _ in range(2):
            circuits.note_outcome(session, provider, Outcome.FAILURE, now, breaker)
    await sign_in(http, *principal(committed, Role.VIEWER))
    overview = (await http.get("/console")).text
    section = overview[overview.index('id="providers-h"') :]
    row = re.search(rf"<tr><td>{re.escape(provider)}</td>(.*?)</tr>", section)
    assert row is not None and "open" in row.group(1) and "<td>2</td>" in row.group(1)


async def test_a_console_settlement_goes_through_the_shared_path_and_shows_why_refused(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    name, token = principal(committed, Role.OPERATOR)
    csrf = await sign_in(http, name, token)
    done = await http.post(
        f"/console/intents/{sent.intent_id}/settle",
        data={
            "rule": "carrier-ticket-not-delivered",
            "reason": "carrier ticket",
            "reference": "T-1",
            "csrf": csrf,
        },
    )
    assert done.status_code == 303
    page = await http.get(done.headers["location"])
    # No workflow runs here: the real reason, not a fixed sentence.
    assert "Refused: the intent&#39;s workflow has finished; its settlement window is closed" in (
        page.text
    )
    assert "(see Reconciliation)" not in page.text  # the old fixed sentence is gone
    with committed() as session:
        (action,) = _actions(session, sent.intent_id)
    assert (action.action, action.outcome, action.operator) == ("settle", "refused", name)


async def test_resolving_a_review_item_that_does_not_exist_is_404(http, committed):
    csrf = await sign_in(http, *principal(committed, Role.OPERATOR))
    missing = await http.post(
        "/console/review-items/999999999/resolve", data={"note": "no action", "csrf": csrf}
    )
    assert missing.status_code == 404


def _waits_for_a_settlement(session, sent, now):  # type: ignore[no-untyped-def]
    """The submitted attempt `sent` became unknown and its workflow waits for a settlement
    for an hour."""
    from ledger import settlements

    session.execute(update(Attempt).where(Attempt.id == sent.attempt_id).values(state="unknown"))
    settlements.record_waiting(
        session,
        intent_id=sent.intent_id,
        awaiting="settlement",
        until=now + timedelta(hours=1),
        tokens=[sent.token],
        expired_unsettled=[],
        at=now,
    )


async def test_the_overview_opens_with_what_needs_a_person(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    now = datetime.now(UTC)
    with committed.begin() as session:
        _waits_for_a_settlement(session, sent, now)
    await sign_in(http, *principal(committed, Role.OPERATOR))
    page = await http.get("/console")
    assert "Needs attention" in page.text
    assert "waiting for a settlement of an unknown attempt" in page.text
    assert f"/console/intents/{sent.intent_id}" in page.text
    intent = await http.get(f"/console/intents/{sent.intent_id}")
    assert 'id="awaiting"' in intent.text and "a settlement of the unknown attempt" in intent.text
    assert 'id="settle-sms"' in intent.text and "Approve resend" not in intent.text
    recon = await http.get("/console/reconciliation")
    assert f'action="/console/intents/{sent.intent_id}/settle"' in recon.text
    assert 'id="settle-all"' in recon.text
    # A bulk settle whose count no longer matches settles nothing and says so.
    csrf = await sign_in(http, *principal(committed, Role.OPERATOR))
    bulk = await http.post(
        "/console/reconciliation/unknown_outcome/settle",
        data={
            "rule": "carrier-ticket-not-delivered",
            "reason": "carrier outage",
            "reference": "INC-1",
            "confirm": "0",
            "csrf": csrf,
        },
    )
    assert bulk.status_code == 303
    shown = await http.get(bulk.headers["location"])
    assert "member(s) now, not 0" in shown.text


async def test_the_awaiting_filter_lists_who_waits_for_an_operator_until_when(
    http, committed, cipher
):
    settling, resending, working = (submitted_attempt(committed, cipher) for _ in range(3))
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=3)
    with committed.begin() as session:
        for sent, awaiting in ((settling, "settlement"), (resending, "resend")):
            session.execute(
                update(Intent)
                .where(Intent.id == sent.intent_id)
                .values(awaiting=awaiting, awaiting_until=until)
            )
    await sign_in(http, *principal(committed, Role.VIEWER))
    overview = (await http.get("/console")).text
    # The Needs attention counts lead to the list of the intents they count.
    assert 'href="/console/intents?awaiting=resend"' in overview
    assert 'href="/console/intents?awaiting=settlement"' in overview
    assert 'href="/console/intents?awaiting=any"' in overview

    def listed(page: str) -> set[str]:
        return set(re.findall(r'href="/console/intents/([0-9a-f-]{36})"', page))

    pages = {
        a: (await http.get("/console/intents", params={"awaiting": a})).text
        for a in ("settlement", "resend", "any")
    }
    assert settling.intent_id in listed(pages["settlement"])
    assert resending.intent_id not in listed(pages["settlement"])
    assert resending.intent_id in listed(pages["resend"])
    assert settling.intent_id not in listed(pages["resend"])
    assert {settling.intent_id, resending.intent_id} <= listed(pages["any"])
    assert working.intent_id not in set().union(*(listed(p) for p in pages.values()))
    # The list says until when each window stays open, and keeps the filter in its
    # choice box, its CSV link and its pages.
    row = pages["resend"][pages["resend"].index(f"/console/intents/{resending.intent_id}") :]
    row = row[: row.index("</tr>")]
    assert "an approve-resend until" in row and f'datetime="{until.isoformat()}"' in row
    assert '<option value="resend" selected>' in pages["resend"]
    assert "/console/intents.csv?awaiting=resend" in pages["resend"]
    # The CSV of the filtered list says it too (columns appended, so older readers hold).
    exported = await http.get("/console/intents.csv", params={"awaiting": "resend"})
    rows = {r["intent_id"]: r for r in csv.DictReader(io.StringIO(exported.text))}
    assert settling.intent_id not in rows
    assert rows[resending.intent_id]["awaiting"] == "resend"
    assert rows[resending.intent_id]["awaiting_until"] == until.isoformat()
    unfiltered = (await http.get("/console/intents")).text
    assert "Waits for an operator until" not in unfiltered
    assert "Waits for an operator until" in pages["any"]
    wrong = await http.get("/console/intents", params={"awaiting": "approval"})
    assert wrong.status_code == 400 and "waits for: one of any, settlement, resend" in wrong.text


async def test_an_operator_opens_a_review_item_from_the_intent_page_and_not_twice(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    name, token = principal(committed, Role.OPERATOR)
    csrf = await sign_in(http, name, token)
    page = (await http.get(f"/console/intents/{sent.intent_id}")).text
    assert (
        f'action="/console/intents/{sent.intent_id}/review"' in page and 'id="review-sms"' in page
    )
    path = f"/console/intents/{sent.intent_id}/review"
    form = {"channel": "sms", "reason": "the recipient says nothing came"}
    assert (await http.post(path, data=form)).status_code == 403  # no CSRF token
    done = await http.post(path, data={**form, "csrf": csrf})
    assert done.status_code == 303 and done.headers["location"].endswith("?done=open-review")
    page = (await http.get(done.headers["location"])).text
    with committed() as session:
        [item] = session.execute(
            select(ReviewItem).where(ReviewItem.subject == f"attempt:{sent.attempt_id}")
        ).scalars()
    assert item.kind == review_items.SUBMITTED_PAST_CHECK and item.resolved_at is None
    assert f"Opened review item #{item.id} (submitted_past_check)" in page
    assert f"submitted_past_check opened by {name}" in page
    # Open now: the page says so and offers no second one; the server refuses one anyway.
    assert 'id="review-sms"' not in page and 'id="review-open-sms"' in page
    again = await http.post(path, data={**form, "csrf": csrf})
    assert again.status_code == 409 and "text/html" in again.headers["content-type"]
    assert "<h1>Refused</h1>" in again.text and "Traceback" not in again.text
    assert f"review item #{item.id} (submitted_past_check) is already open" in again.text
    with committed() as session:
        actions = [(a.action, a.outcome, a.operator) for a in _actions(session, sent.intent_id)]
        assert session.execute(
            select(ReviewItem.id).where(ReviewItem.subject == f"attempt:{sent.attempt_id}")
        ).scalars().all() == [item.id]
    assert actions == [("open-review", "accepted", name), ("open-review", "refused", name)]
    recon = (await http.get("/console/reconciliation")).text
    # In its set at once, saying who opened it and why (the sweep's items say "found").
    mine = _item_article(recon, item.id)
    assert f"opened by <strong>{name}</strong>" in mine
    assert "the recipient says nothing came" in mine and "; found " not in mine


async def test_a_viewer_cannot_open_a_review_item(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    csrf = await sign_in(http, *principal(committed, Role.VIEWER, "vic"))
    page = (await http.get(f"/console/intents/{sent.intent_id}")).text
    assert "/review" not in page and "Open a review item" not in page
    refused = await http.post(
        f"/console/intents/{sent.intent_id}/review",
        data={"channel": "sms", "reason": "viewer tries", "csrf": csrf},
    )
    assert refused.status_code == 403 and "operator role" in refused.text
    with committed() as session:
        assert _actions(session, sent.intent_id) == []
        assert (
            session.execute(
                select(ReviewItem).where(ReviewItem.subject == f"attempt:{sent.attempt_id}")
            ).first()
            is None
        )


async def test_the_sweep_runs_on_demand_and_closes_what_a_later_observation_settled(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    now = datetime.now(UTC)
    with committed.begin() as session:
        _waits_for_a_settlement(session, sent, now)
        # A late receipt settles the attempt (here written directly).
        session.execute(
            update(Attempt).where(Attempt.id == sent.attempt_id).values(state="delivered")
        )
    csrf = await sign_in(http, *principal(committed, Role.OPERATOR))
    done = await http.post("/console/reconciliation/sweep", data={"csrf": csrf})
    assert done.status_code == 303
    page = await http.get(done.headers["location"])
    assert "the sweep found" in page.text and "closed" in page.text
    with committed() as session:
        item = session.execute(
            select(ReviewItem).where(ReviewItem.subject == f"attempt:{sent.attempt_id}")
        ).scalar_one()
    assert item.resolved_at is not None and item.resolved_by == "reconciler"


def _item_article(page: str, item_id: int) -> str:
    """The Reconciliation page's entry for one review item (the page lists every open one)."""
    for article in page.split('<article class="item">')[1:]:
        if f"/console/review-items/{item_id}/resolve" in article:
            return article.split("</article>")[0]
    raise AssertionError(f"review item #{item_id} is not on the page")
