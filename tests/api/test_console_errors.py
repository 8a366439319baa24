"""Every console error is a page that says what happened and what to do (ASGI, real
Postgres): a stale form, an expired CSRF token, a role changed mid-session, a missing
reason, an unknown intent or page, a wrong method; the JSON API keeps its JSON."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from api.console.headers import CONSOLE_HEADERS
from domain.principals import Role
from ledger.crypto import FieldCipher
from ledger.models import OperatorAction, PrincipalRecord
from tests.api.conftest import BEARER, build_app, submitted_attempt
from tests.api.test_console import principal, sign_in

pytestmark = pytest.mark.ledger


def a_page(answer: httpx.Response, status: int, *words: str) -> None:
    assert answer.status_code == status, answer.text[:300]
    assert answer.headers["content-type"].startswith("text/html")
    assert '{"detail"' not in answer.text
    for word in words:
        assert word in answer.text, (word, answer.text[:2000])


async def test_an_expired_csrf_token_answers_a_page_saying_to_reload(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    sent = submitted_attempt(committed, cipher)
    await sign_in(http, *principal(committed, Role.OPERATOR))
    stale = await http.post(
        f"/console/intents/{sent.intent_id}/cancel", data={"reason": "x", "csrf": "old"}
    )
    a_page(stale, 403, "This form has expired", "reload the page", "Nothing was changed")


async def test_a_role_changed_mid_session_answers_a_page_naming_the_role_needed(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    sent = submitted_attempt(committed, cipher)
    name, token = principal(committed, Role.OPERATOR)
    csrf = await sign_in(http, name, token)
    assert "Cancel intent" in (await http.get(f"/console/intents/{sent.intent_id}")).text
    with committed.begin() as session:
        session.execute(
            update(PrincipalRecord).where(PrincipalRecord.name == name).values(role="viewer")
        )
    refused = await http.post(
        f"/console/intents/{sent.intent_id}/cancel", data={"reason": "x", "csrf": csrf}
    )
    a_page(refused, 403, "Your role does not allow this", "needs the operator role", "viewer")


async def test_a_form_without_its_reason_answers_a_page_naming_the_field(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    sent = submitted_attempt(committed, cipher)
    csrf = await sign_in(http, *principal(committed, Role.OPERATOR))
    missing = await http.post(
        f"/console/intents/{sent.intent_id}/cancel", data={"reason": "", "csrf": csrf}
    )
    a_page(missing, 422, "Something in the form is missing", "a reason")


async def test_a_reason_of_invisible_characters_answers_a_page_and_records_nothing(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    sent = submitted_attempt(committed, cipher)
    csrf = await sign_in(http, *principal(committed, Role.OPERATOR))
    refused = await http.post(
        f"/console/intents/{sent.intent_id}/cancel", data={"reason": "\u200b ", "csrf": csrf}
    )
    a_page(refused, 422, "a reason in words (the one given has no visible character)")
    with committed() as session:
        recorded = session.query(OperatorAction).filter_by(intent_id=sent.intent_id).count()
    assert recorded == 0


async def test_a_reason_holding_contact_data_answers_a_page_and_records_nothing(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher: FieldCipher
) -> None:
    sent = submitted_attempt(committed, cipher)
    csrf = await sign_in(http, *principal(committed, Role.OPERATOR))
    for action, extra in (
        ("cancel", {}),
        ("approve-resend", {"channel": "sms"}),
        ("settle", {"rule": "carrier-confirmed-delivered"}),
    ):
        refused = await http.post(
            f"/console/intents/{sent.intent_id}/{action}",
            data={"reason": "she asked on +44 7400 000777", "csrf": csrf, **extra},
        )
        a_page(
            refused,
            422,
            "The form holds contact data",
            "rule reason.no_contact_data",
            "nothing was recorded",
            "recipient ref",
        )
        assert "000777" not in refused.text
    with committed() as session:
        recorded = session.query(OperatorAction).filter_by(intent_id=sent.intent_id).count()
    assert recorded == 0


async def test_unknown_intents_pages_and_methods_answer_pages(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    await sign_in(http, *principal(committed, Role.VIEWER))
    a_page(await http.get("/console/intents/no-such-intent"), 404, "no such intent")
    a_page(await http.get("/console/no-such-page"), 404, "no such page")
    a_page(await http.put("/console/intents"), 405, "Not a page")
    a_page(
        await http.get("/console/intents", params={"created_from": "yesterday"}),
        400,
        "created from",
    )


async def test_the_json_api_keeps_its_json_errors(http: httpx.AsyncClient) -> None:
    missing = await http.get("/v1/intents/no-such-intent", headers=BEARER)
    assert missing.status_code == 404 and missing.json()["detail"]
    wrong = await http.put("/healthz")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET"
    assert wrong.json() == {"detail": "Method Not Allowed"}
    invalid = await http.get("/v1/intents", params={"limit": "many"}, headers=BEARER)
    assert invalid.status_code == 422 and isinstance(invalid.json()["detail"], list)


@pytest.mark.parametrize(
    "query",
    ["key_prefix=%00", "event_type=a%00b", "region=%0A", "after=x%1B"],
)
async def test_a_control_character_in_a_filter_is_a_400_page_with_the_security_headers(
    http: httpx.AsyncClient, committed: sessionmaker[Session], query: str
) -> None:
    await sign_in(http, *principal(committed, Role.VIEWER))
    answer = await http.get(f"/console/intents?{query}")
    name = query.partition("=")[0]
    a_page(answer, 400, f"{name}: holds a control character")
    assert answer.headers["Content-Security-Policy"] == CONSOLE_HEADERS["Content-Security-Policy"]


async def test_a_crash_is_a_500_page_with_the_security_headers(
    committed: sessionmaker[Session], cipher: FieldCipher, temporal, monkeypatch
) -> None:
    from ledger import listing

    def broken(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("a bug")

    app, _ = build_app(committed, cipher, temporal)
    monkeypatch.setattr(listing, "page", broken)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, client=("9.9.9.9", 1))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        await sign_in(http, *principal(committed, Role.VIEWER))
        answer = await http.get("/console/intents")
    a_page(answer, 500)
    for name, value in CONSOLE_HEADERS.items():
        assert answer.headers[name] == value, name
