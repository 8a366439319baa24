"""Hypothesis against the provider webhooks: random forms, headers and bytes, signed
correctly or not, never yield a 500 (the ASGI transport re-raises any app exception)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from domain.keywords import OPT_IN_KEYWORDS, OPT_OUT_KEYWORDS
from tests.api.conftest import PUBLIC_BASE, sign, submitted_attempt

pytestmark = pytest.mark.ledger

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

any_text = st.text(max_size=60)
receipt_names = st.sampled_from(
    ["MessageSid", "SmsSid", "MessageStatus", "SmsStatus", "ErrorCode", "To", "From",
     "RawDlrDoneDate", "AccountSid"]
)  # fmt: skip
statuses = st.sampled_from(
    ["queued", "sent", "delivered", "undelivered", "failed", "received", "read", "canceled",
     " Delivered ", "bogus", ""]
)  # fmt: skip
header_bytes = st.binary(max_size=300).filter(lambda b: b"\r" not in b and b"\n" not in b)


def form(names: st.SearchStrategy[str], values: st.SearchStrategy[str]):  # type: ignore[no-untyped-def]
    return st.dictionaries(st.one_of(names, any_text), values, max_size=4)


@st.composite
def webhook_requests(draw, path: str, names, values, base=st.just({})):  # type: ignore[no-untyped-def]
    # A well-formed core (often) with random fields over it, so signed requests get past
    # the signature and the field checks into the ledger, not only into the 400s.
    params = {**draw(base), **draw(form(names, values))}
    query = draw(st.one_of(st.none(), any_text))
    full = path + ("?" + urlencode({"token": query}) if query is not None else "")
    mode = draw(st.sampled_from(["signed", "unsigned", "garbage-signature", "raw-bytes"]))
    headers: dict[str, bytes] = {}
    if draw(st.booleans()):
        headers["I-Twilio-Idempotency-Token"] = draw(header_bytes)
    if draw(st.booleans()):
        headers["Content-Type"] = draw(
            st.sampled_from([b"application/x-www-form-urlencoded", b"text/plain", b"x/y;;;"])
        )
    if mode == "raw-bytes":
        content = draw(st.binary(max_size=500))
        headers["X-Twilio-Signature"] = draw(header_bytes)
    else:
        content = urlencode(params).encode()
        if mode == "signed":
            headers["X-Twilio-Signature"] = sign(f"{PUBLIC_BASE}{full}", params).encode()
        elif mode == "garbage-signature":
            headers["X-Twilio-Signature"] = draw(header_bytes)
    return full, content, headers


@pytest.fixture
def sent(committed, cipher):  # type: ignore[no-untyped-def]
    return submitted_attempt(committed, cipher)


@FUZZ
@given(data=st.data())
async def test_random_receipts_never_yield_a_server_error(http, sent, data):  # type: ignore[no-untyped-def]
    values = st.one_of(any_text, statuses, st.just(sent.remote_id), st.just(sent.token))
    sids = st.one_of(st.just(sent.remote_id), st.from_regex(r"SM[0-9a-f]{32}", fullmatch=True))
    base = st.fixed_dictionaries({"MessageSid": sids, "MessageStatus": statuses})
    path, content, headers = data.draw(
        webhook_requests("/v1/receipts/sms", receipt_names, values, base)
    )
    answer = await http.post(path, content=content, headers=headers)
    event(f"status {answer.status_code}")
    if answer.status_code == 422:
        # Only a token holding a control character is refused as a parameter.
        assert [(i["loc"], i["type"]) for i in answer.json()["detail"]] == [
            (["query", "token"], "control_character")
        ], answer.text
        return
    assert answer.status_code in (204, 400, 403, 413), answer.text
    if answer.status_code == 400:
        assert answer.json()["detail"]


INBOUND_VALUES = st.one_of(
    any_text,
    st.sampled_from(sorted(OPT_OUT_KEYWORDS | OPT_IN_KEYWORDS)),
    st.from_regex(r"\+4474002[0-9]{5}", fullmatch=True),
    st.from_regex(r"\+1[0-9]{10}", fullmatch=True),
)


@FUZZ
@given(
    webhook=webhook_requests(
        "/v1/inbound/sms",
        st.sampled_from(["From", "Body", "To", "MessageSid"]),
        INBOUND_VALUES,
        st.fixed_dictionaries({"From": INBOUND_VALUES, "Body": INBOUND_VALUES}),
    )
)
async def test_random_inbound_messages_never_yield_a_server_error(http, webhook):  # type: ignore[no-untyped-def]
    path, content, headers = webhook
    answer = await http.post(path, content=content, headers=headers)
    event(f"status {answer.status_code}")
    if answer.status_code == 422:
        # The inbound route declares no query parameter: a `token` is refused, not ignored.
        assert "?token=" in path
        assert [(i["loc"], i["type"]) for i in answer.json()["detail"]] == [
            (["query", "token"], "unknown_parameter")
        ]
        return
    assert answer.status_code in (200, 400, 403, 413), answer.text
