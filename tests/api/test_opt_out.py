"""Inbound STOP/START keywords and RFC 8058 one-click unsubscribe update suppression."""

from __future__ import annotations

import secrets

import pytest
from sqlalchemy import select

from domain.unsubscribe import unsubscribe_token
from ledger import repository as repo
from ledger.models import Suppression
from tests.api.conftest import (
    UNSUBSCRIBE_SECRET,
    post_signed,
    random_mobile,
    submitted_attempt,
)

pytestmark = pytest.mark.ledger


def inbound(sender: str, body: str, sid: str | None = None) -> dict[str, str]:
    return {
        "MessageSid": sid or "SM" + secrets.token_hex(16),
        "AccountSid": "AC00000000000000000000000000000000",
        "From": sender,
        "To": "+15005550006",
        "Body": body,
        "SmsStatus": "received",
    }


def suppressions(sessions, lookup: str, channel: str) -> list[Suppression]:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return list(
            session.execute(
                select(Suppression).where(
                    Suppression.destination_hmac == lookup, Suppression.channel == channel
                )
            ).scalars()
        )


@pytest.mark.parametrize("word", ["STOP", "stop", " Unsubscribe! ", "QUIT.", "stopall", "END"])
async def test_an_opt_out_keyword_suppresses_sms_to_the_sender(http, committed, cipher, word):
    phone = random_mobile()
    answer = await post_signed(http, "/v1/inbound/sms", inbound(phone, word))
    assert answer.status_code == 200 and answer.headers["content-type"].startswith(
        "application/xml"
    )
    with committed() as session:
        (row,) = repo.suppressions_for(session, cipher.lookup_hmac(phone), "sms")
    assert row.reason == "opted_out" and row.source.startswith("keyword:")


async def test_a_redelivered_stop_adds_no_second_suppression(http, committed, cipher):
    phone = random_mobile()
    stop = inbound(phone, "STOP")
    for _ in range(3):
        assert (await post_signed(http, "/v1/inbound/sms", stop)).status_code == 200
    assert len(suppressions(committed, cipher.lookup_hmac(phone), "sms")) == 1


async def test_a_stop_replayed_after_start_opts_nobody_out_again(http, committed, cipher):
    # Twilio's signature carries no time: the same signed STOP, posted again after the
    # START that lifted it, is the same message (its MessageSid), and changes nothing.
    phone = random_mobile()
    stop = inbound(phone, "STOP")
    for params in (stop, inbound(phone, "START"), stop, stop):
        assert (await post_signed(http, "/v1/inbound/sms", params)).status_code == 200
    lookup = cipher.lookup_hmac(phone)
    with committed() as session:
        assert repo.suppressions_for(session, lookup, "sms") == []
    assert len(suppressions(committed, lookup, "sms")) == 1  # the first, lifted


async def test_an_inbound_without_its_message_sid_is_400(http):
    params = inbound(random_mobile(), "STOP")
    del params["MessageSid"]
    answer = await post_signed(http, "/v1/inbound/sms", params)
    assert answer.status_code == 400 and "MessageSid" in answer.json()["detail"]


async def test_start_lifts_the_opt_out_and_keeps_it_as_history(http, committed, cipher):
    phone = random_mobile()
    await post_signed(http, "/v1/inbound/sms", inbound(phone, "STOP"))
    answer = await post_signed(http, "/v1/inbound/sms", inbound(phone, "START"))
    assert answer.status_code == 200
    lookup = cipher.lookup_hmac(phone)
    with committed() as session:
        assert repo.suppressions_for(session, lookup, "sms") == []
    (row,) = suppressions(committed, lookup, "sms")
    assert row.lifted_at is not None


async def test_a_conversation_is_not_a_keyword(http, committed, cipher):
    phone = random_mobile()
    answer = await post_signed(http, "/v1/inbound/sms", inbound(phone, "stop sending me deals"))
    assert answer.status_code == 200
    assert suppressions(committed, cipher.lookup_hmac(phone), "sms") == []


async def test_an_unsigned_stop_is_403_and_suppresses_nothing(http, committed, cipher):
    phone = random_mobile()
    answer = await http.post(
        "/v1/inbound/sms",
        data=inbound(phone, "STOP"),
        headers={"X-Twilio-Signature": "AAAA"},
    )
    assert answer.status_code == 403
    assert suppressions(committed, cipher.lookup_hmac(phone), "sms") == []


async def test_an_inbound_without_a_sender_is_400(http):
    params = inbound("", "STOP")
    answer = await post_signed(http, "/v1/inbound/sms", params)
    assert answer.status_code == 400 and "From" in answer.json()["detail"]


async def test_one_click_unsubscribe_suppresses_email_and_get_only_confirms(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher, phone=random_mobile())
    with committed() as session:
        lookup = repo.attempt_by_token(session, sent.token).destination_hmac
    link = f"/v1/unsubscribe/{unsubscribe_token(UNSUBSCRIBE_SECRET, sent.token)}"

    page = await http.get(link)
    assert page.status_code == 200 and "<form method='post'>" in page.text
    assert suppressions(committed, lookup, "email") == []  # a link scanner changes nothing

    for _ in range(2):
        answer = await http.post(
            link,
            content="List-Unsubscribe=One-Click",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert answer.status_code == 200 and answer.json() == {"status": "unsubscribed"}
    (row,) = suppressions(committed, lookup, "email")
    assert row.reason == "unsubscribed" and row.source == "one-click"


@pytest.mark.parametrize(
    "value",
    [
        "order-created:o-1:sms:1.0123456789abcdef0123456789abcdef",
        unsubscribe_token("another-secret", "order-created:o-1:email:1"),
        "no-dot-at-all",
        "caf\u00e9.abc",
    ],
)
async def test_a_forged_unsubscribe_link_is_404(http, value):
    assert (await http.get(f"/v1/unsubscribe/{value}")).status_code == 404
    assert (await http.post(f"/v1/unsubscribe/{value}")).status_code == 404


async def test_a_signed_link_for_an_attempt_that_no_longer_exists_is_404(http):
    value = unsubscribe_token(UNSUBSCRIBE_SECRET, "order-created:o-gone:email:1")
    assert (await http.post(f"/v1/unsubscribe/{value}")).status_code == 404
