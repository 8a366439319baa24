"""The console's pages over HTTP (ASGI, real Postgres): the search box finds what a caller
gives without the number reaching the page, the intent page masks destinations as the API
does, and the list's choices, presets, paging back and selected state."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from domain.destinations import masked
from domain.principals import Role
from ledger import listing
from ledger.crypto import FieldCipher
from ledger.models import Attempt, Intent
from tests.api.conftest import random_mobile, submitted_attempt
from tests.api.test_console import principal, sign_in

pytestmark = pytest.mark.ledger


async def test_the_search_finds_a_national_number_and_a_provider_sid_and_shows_neither_number(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    phone = random_mobile()
    sent = submitted_attempt(committed, cipher, phone=phone)
    csrf = await sign_in(http, *principal(committed, Role.VIEWER))
    national = f"0{phone[3:7]} {phone[7:]}"
    found = await http.post("/console/search", data={"q": national, "country": "GB", "csrf": csrf})
    assert found.status_code == 200 and sent.intent_id in found.text
    assert phone not in found.text and national not in found.text and phone[4:] not in found.text
    assert f"the phone number {masked(phone)}" in html.unescape(found.text)
    by_sid = await http.post("/console/search", data={"q": sent.remote_id, "csrf": csrf})
    assert sent.intent_id in by_sid.text
    elsewhere = await http.post(
        "/console/search", data={"q": national, "country": "FR", "csrf": csrf}
    )
    assert sent.intent_id not in elsewhere.text


async def test_the_intent_page_masks_a_destination_as_the_api_does(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    phone = random_mobile()
    sent = submitted_attempt(committed, cipher, phone=phone)
    await sign_in(http, *principal(committed, Role.VIEWER))
    page = (await http.get(f"/console/intents/{sent.intent_id}")).text
    assert phone not in page
    assert masked(phone) in page  # the number ending in its last two digits, in the facts
    assert f"to {masked(phone)}" in html.unescape(page)  # and in the timeline


async def test_the_list_offers_choices_from_the_data_presets_paging_back_and_the_selected_state(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    sent = [submitted_attempt(committed, cipher) for _ in range(2)]
    with committed() as session:
        newest = session.get(Intent, sent[1].intent_id)
        assert newest is not None
        key = newest.business_key.rsplit("-", 1)[0]
        cursor = listing.encode_cursor_of(
            (newest.created_at, newest.id),
            listing.Toward.OLDER,
            listing.IntentFilter(key_prefix=key),
        )
    await sign_in(http, *principal(committed, Role.VIEWER))
    page = (await http.get("/console/intents", params={"state": "sending"})).text
    assert re.search(r'<option value="order-created"[^>]*>order-created</option>', page)
    assert 'aria-current="true"><span class="state s-sending">sending</span>' in page
    assert ">Last hour</a>" in page and ">Last 7 days</a>" in page
    older = (await http.get("/console/intents", params={"key_prefix": key, "after": cursor})).text
    assert 'rel="prev"' in older and "Newer intents" in older
    prev = html.unescape(re.search(r'rel="prev" href="([^"]+)"', older).group(1))  # type: ignore[union-attr]
    newer = (await http.get(prev)).text
    assert sent[1].intent_id in newer and 'rel="prev"' not in newer


async def test_an_intent_waiting_for_an_operator_refreshes_itself_and_a_settled_one_does_not(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    # A settle or a resend from the CLI may land while the page is open on a waiting intent.
    sent = submitted_attempt(committed, cipher)
    with committed.begin() as session:
        session.execute(
            update(Attempt).where(Attempt.id == sent.attempt_id).values(state="unknown")
        )
        session.execute(
            update(Intent)
            .where(Intent.id == sent.intent_id)
            .values(awaiting="settlement", awaiting_until=datetime.now(UTC) + timedelta(hours=1))
        )
    await sign_in(http, *principal(committed, Role.OPERATOR))
    waiting = await http.get(f"/console/intents/{sent.intent_id}")
    assert waiting.status_code == 200
    assert 'data-refresh="' in waiting.text and 'id="actions" data-live' in waiting.text
    with committed.begin() as session:
        session.execute(update(Intent).where(Intent.id == sent.intent_id).values(awaiting=None))
    settled = await http.get(f"/console/intents/{sent.intent_id}")
    assert 'data-refresh="' not in settled.text and 'id="rendered"' in settled.text


async def test_a_row_settled_on_the_reconciliation_page_is_answered_there_when_refused(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    # No workflow runs here: the settlement is refused, and the page says so, as a refusal.
    sent = submitted_attempt(committed, cipher)
    csrf = await sign_in(http, *principal(committed, Role.OPERATOR))
    answer = await http.post(
        f"/console/intents/{sent.intent_id}/settle",
        data={
            "rule": "carrier-ticket-not-delivered",
            "reason": "carrier ticket",
            "back": "reconciliation",
            "csrf": csrf,
        },
        follow_redirects=True,
    )
    assert answer.status_code == 200 and answer.url.path == "/console/reconciliation"
    notice = re.search(
        r'<p class="notice (\w+)" role="status" id="row-notice">([^<]*)</p>', answer.text
    )
    assert notice is not None, answer.text[:2000]
    assert notice.group(1) == "refused"
    assert html.unescape(notice.group(2)) == (
        f"Refused: intent {sent.intent_id}: the intent's workflow has finished; its "
        "settlement window is closed."
    )


async def test_what_a_restore_leaves_is_a_set_on_the_reconciliation_page(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    from ledger import review_items
    from ledger.models import ReviewItem
    from tests.conftest import key_id

    workflow_id = f"notification:restore:{key_id()}"
    with committed.begin() as session:
        session.add(
            ReviewItem(
                kind=review_items.WORKFLOW_WITHOUT_INTENT,
                subject=f"workflow:{workflow_id}",
                detail={"workflow_id": workflow_id, "since": datetime.now(UTC).isoformat()},
                found_at=datetime.now(UTC),
            )
        )
    await sign_in(http, *principal(committed, Role.VIEWER))
    page = await http.get("/console/reconciliation")
    assert page.status_code == 200
    assert "Running workflows whose intent the ledger does not have" in page.text
    assert f"workflow:{workflow_id}" in page.text
    assert "Open intents whose workflow Temporal does not have" in page.text
