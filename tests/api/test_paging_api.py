"""Paging the JSON lists: opaque keyset cursors both ways, stable while intents arrive, with
the filters, refused when not this list's; and the console's list is the same function."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from sqlalchemy.orm import Session, sessionmaker

from domain.principals import Principal, Role
from ledger import listing, principals
from tests.api.conftest import BEARER, random_mobile, submitted_attempt
from tests.conftest import unique

pytestmark = pytest.mark.ledger


def app_bearer(committed: sessionmaker[Session]) -> dict[str, str]:
    """A new app principal's header: it lists only the intents it recorded."""
    with committed.begin() as session:
        issued = principals.create(
            session, unique("app"), Role.APP, by=Principal("test", Role.ADMIN), at=datetime.now(UTC)
        )
    return {"Authorization": f"Bearer {issued.token}"}


async def record(http, headers: dict[str, str]) -> str:  # type: ignore[no-untyped-def]
    doc = {
        "business_key": unique("order-created:page"),
        "recipient_ref": "m-1842",
        "template_key": "order-created",
        "template_version": 1,
        "phone": random_mobile(),
        "variables": {"order_id": "o-77"},
    }
    answer = await http.post("/v1/intents", json=doc, headers=headers)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["intent_id"])


async def test_paging_forwards_then_back_yields_each_intent_once_while_new_ones_arrive(
    http, committed
):
    app = app_bearer(committed)
    recorded = [await record(http, app) for _ in range(7)]
    newest_first = recorded[::-1]

    seen: list[str] = []
    arrived: list[str] = []
    page = (await http.get("/v1/intents", params={"limit": 3}, headers=app)).json()
    assert page["previous"] is None
    pages = [page]
    while True:
        seen += [i["id"] for i in page["items"]]
        # An intent recorded between two pages is newer than every page still to come.
        arrived.append(await record(http, app))
        if page["next"] is None:
            break
        answer = await http.get(
            "/v1/intents", params={"limit": 3, "cursor": page["next"]}, headers=app
        )
        assert answer.status_code == 200, answer.text
        assert 'rel="next"' in answer.headers.get("link", "") or answer.json()["next"] is None
        page = answer.json()
        pages.append(page)
    assert seen == newest_first
    assert len(pages) == 3

    # Back from the last page: the pages forward showed, then the intents that arrived.
    back: list[str] = [i["id"] for i in page["items"]]
    cursor = page["previous"]
    while cursor is not None:
        answer = await http.get("/v1/intents", params={"limit": 3, "cursor": cursor}, headers=app)
        assert answer.status_code == 200, answer.text
        assert 'rel="prev"' in answer.headers.get("link", "") or answer.json()["previous"] is None
        back = [i["id"] for i in answer.json()["items"]] + back
        cursor = answer.json()["previous"]
    assert back == arrived[::-1] + newest_first


async def test_a_state_filter_combines_with_paging_and_reads_past_any_scan_bound(
    http, committed, cipher, monkeypatch
):
    since = datetime.now(UTC)
    sending = [submitted_attempt(committed, cipher).intent_id for _ in range(4)]
    pending = [await record(http, BEARER) for _ in range(3)]
    sending.append(submitted_attempt(committed, cipher).intent_id)
    # A page reads at most 2 rows: pages come back short but paging still reaches the end.
    monkeypatch.setattr(listing, "SCAN_PER_PAGE", 2)
    params = {"state": "sending", "since": since.isoformat(), "limit": 2}
    found: list[str] = []
    cursor = None
    for _ in range(20):
        answer = await http.get(
            "/v1/intents",
            params={**params, **({"cursor": cursor} if cursor else {})},
            headers=BEARER,
        )
        assert answer.status_code == 200, answer.text
        doc = answer.json()
        assert all(i["state"] == "sending" for i in doc["items"])
        found += [i["id"] for i in doc["items"]]
        cursor = doc["next"]
        if cursor is None:
            break
    assert found == sending[::-1]
    assert not set(found) & set(pending)


@pytest.mark.parametrize(
    ("cursor", "said"),
    [
        ("not-a-cursor", "not a page cursor"),
        (base64.urlsafe_b64encode(b'["2026-12-01T00:00:00+00:00", "x"]').decode(), "not a page"),
        (
            base64.urlsafe_b64encode(
                json.dumps(
                    {"at": "2026-12-01T00:00:00", "id": "x", "to": "older", "f": "0"}
                ).encode()
            ).decode(),
            "not a page cursor",
        ),
        ("x" * 401, "at most 400 characters"),
    ],
)
async def test_a_cursor_this_list_did_not_make_is_422_naming_it(http, cursor, said):
    answer = await http.get("/v1/intents", params={"cursor": cursor}, headers=BEARER)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"][0]["loc"] == ["query", "cursor"]
    assert said in answer.json()["detail"][0]["msg"]


async def test_a_cursor_of_other_filters_or_of_another_app_is_422(http, committed, cipher):
    for _ in range(3):
        submitted_attempt(committed, cipher)
    first = (
        await http.get("/v1/intents", params={"state": "sending", "limit": 1}, headers=BEARER)
    ).json()
    assert first["next"]
    ok = await http.get(
        "/v1/intents",
        params={"state": "sending", "limit": 1, "cursor": first["next"]},
        headers=BEARER,
    )
    assert ok.status_code == 200
    other = await http.get(
        "/v1/intents", params={"state": "failed", "cursor": first["next"]}, headers=BEARER
    )
    assert other.status_code == 422
    assert "another filter" in other.json()["detail"][0]["msg"]
    # An app's cursor is bound to its own list: another principal cannot page with it.
    app = app_bearer(committed)
    for _ in range(2):
        await record(http, app)
    mine = (await http.get("/v1/intents", params={"limit": 1}, headers=app)).json()
    theirs = await http.get("/v1/intents", params={"cursor": mine["next"]}, headers=BEARER)
    assert theirs.status_code == 422


async def test_the_recipient_search_pages_with_a_cursor_in_the_body(http, committed, cipher):
    phone = random_mobile()
    ids = [submitted_attempt(committed, cipher, phone=phone).intent_id for _ in range(3)]
    first = await http.post(
        "/v1/recipients/intents", json={"destination": phone, "limit": 2}, headers=BEARER
    )
    assert first.status_code == 200, first.text
    second = await http.post(
        "/v1/recipients/intents",
        json={"destination": phone, "limit": 2, "cursor": first.json()["next"]},
        headers=BEARER,
    )
    assert [i["id"] for i in first.json()["items"] + second.json()["items"]] == ids[::-1]
    assert second.json()["next"] is None and second.json()["previous"]
    assert phone not in second.text and phone not in first.json()["next"]
    bad = await http.post(
        "/v1/recipients/intents",
        json={"destination": random_mobile(), "cursor": first.json()["next"]},
        headers=BEARER,
    )
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "cursor"]


async def test_the_console_list_and_the_api_are_one_function(http, committed, cipher, monkeypatch):
    """The console and GET /v1/intents both page through `ledger.listing.page`."""
    calls: list[listing.IntentFilter] = []
    real = listing.page

    def spy(session, flt, cursor=None, **kw):  # type: ignore[no-untyped-def]
        calls.append(flt)
        return real(session, flt, cursor, **kw)

    monkeypatch.setattr(listing, "page", spy)
    submitted_attempt(committed, cipher)
    api = (await http.get("/v1/intents", params={"limit": 5}, headers=BEARER)).json()
    from tests.api.test_console import principal, sign_in

    await sign_in(http, *principal(committed, Role.VIEWER))
    console = await http.get("/console/intents")
    assert console.status_code == 200
    assert len(calls) == 2
    assert all(i["id"] in console.text for i in api["items"])
