"""Delivery receipts: verified with the twilio package's own signatures, deduplicated,
recorded through the one transition, signalled; never a state moved backward."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from sqlalchemy import func, select
from twilio.request_validator import RequestValidator

from ledger.models import Suppression
from tests.api.conftest import (
    AUTH_TOKEN,
    PUBLIC_BASE,
    attempt_state,
    observation_count,
    observations_of,
    post_signed,
    sent_through,
    sign,
    submitted_attempt,
    webhook_observations,
)

pytestmark = pytest.mark.ledger


def receipt(sid: str, status: str, **extra: str) -> dict[str, str]:
    return {
        "MessageSid": sid,
        "SmsSid": sid,
        "MessageStatus": status,
        "SmsStatus": status,
        "AccountSid": "AC00000000000000000000000000000000",
        "To": "+447400000100",
        "From": "+15005550006",
        "ApiVersion": "2010-04-01",
        **extra,
    }


def suppression_count(engine) -> int:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Suppression)).scalar_one()


def path_for(token: str) -> str:
    return "/v1/receipts/sms?" + urlencode({"token": token})


async def test_a_signed_receipt_is_recorded_applied_and_signalled(
    http, committed, cipher, temporal
):
    sent = submitted_attempt(committed, cipher)
    answer = await post_signed(http, path_for(sent.token), receipt(sent.remote_id, "delivered"))
    assert answer.status_code == 204
    assert attempt_state(committed, sent.attempt_id) == "delivered"
    webhook = [
        o for o in observations_of(committed, remote_id=sent.remote_id) if o.source == "webhook"
    ]
    assert [(o.raw_status, o.verdict, o.applied) for o in webhook] == [
        ("delivered", "applied", True)
    ]
    assert [(wid, name, arg.state) for wid, name, arg in temporal.signals] == [
        (sent.workflow_id, "receipt", "delivered")
    ]


async def test_a_receipt_naming_an_attempt_of_another_provider_is_kept_and_moves_nothing(
    http, committed, cipher, temporal
):
    sent = submitted_attempt(committed, cipher)
    sent_through(committed, sent.attempt_id, "telnyx")
    answer = await post_signed(http, path_for(sent.token), receipt(sent.remote_id, "delivered"))
    assert answer.status_code == 204
    assert attempt_state(committed, sent.attempt_id) == "submitted"
    (kept,) = webhook_observations(committed, sent.remote_id)
    assert (kept.attempt_id, kept.applied) == (None, False)
    assert kept.detail["not_applied"] == (
        "names an attempt sent through telnyx; Twilio status callbacks do not speak for it"
    )
    assert temporal.signals == []


async def test_the_signature_covers_the_public_url_not_the_internal_one(http, committed, cipher):
    # The request reached http://10.0.0.5:8080 (behind a proxy); the provider signed the
    # public https URL, and that is what is checked.
    sent = submitted_attempt(committed, cipher)
    path = path_for(sent.token)
    internal = await post_signed(
        http, path, receipt(sent.remote_id, "sent"), signed_url=f"http://10.0.0.5:8080{path}"
    )
    assert internal.status_code == 403
    public = await post_signed(http, path, receipt(sent.remote_id, "sent"))
    assert public.status_code == 204


@pytest.mark.parametrize(
    "forgery",
    [
        "tampered parameter",
        "other host",
        "other path",
        "other query",
        "missing header",
        "other key",
    ],
)
async def test_a_forged_receipt_is_403_and_changes_nothing(
    http, committed, cipher, engine, forgery
):
    sent = submitted_attempt(committed, cipher)
    path = path_for(sent.token)
    params = receipt(sent.remote_id, "delivered")
    url = f"{PUBLIC_BASE}{path}"
    signature = sign(url, params)
    if forgery == "tampered parameter":
        params = {**params, "MessageStatus": "undelivered", "ErrorCode": "30003"}
    elif forgery == "other host":
        signature = sign(f"https://evil.example.test{path}", params)
    elif forgery == "other path":
        signature = sign(f"{PUBLIC_BASE}/v1/inbound/sms?token={sent.token}", params)
    elif forgery == "other query":
        signature = sign(f"{PUBLIC_BASE}/v1/receipts/sms?token=someone-else", params)
    elif forgery == "other key":
        signature = sign(url, params, token="not-our-auth-token")
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if forgery != "missing header":
        headers["X-Twilio-Signature"] = signature
    before = observation_count(engine)
    answer = await http.post(path, content=urlencode(params), headers=headers)
    assert answer.status_code == 403, answer.text
    assert "signature" in answer.json()["detail"].lower()
    assert observation_count(engine) == before
    assert attempt_state(committed, sent.attempt_id) == "submitted"


@pytest.mark.parametrize("with_idempotency_token", [True, False])
async def test_the_same_receipt_ten_times_changes_the_state_once(
    http, committed, cipher, temporal, with_idempotency_token
):
    sent = submitted_attempt(committed, cipher)
    headers = (
        {"I-Twilio-Idempotency-Token": "idem-" + sent.remote_id} if with_idempotency_token else {}
    )
    for _ in range(10):
        answer = await post_signed(
            http, path_for(sent.token), receipt(sent.remote_id, "delivered"), headers=headers
        )
        assert answer.status_code == 204
    webhook = [
        o for o in observations_of(committed, remote_id=sent.remote_id) if o.source == "webhook"
    ]
    assert len(webhook) == 1 and webhook[0].applied
    assert attempt_state(committed, sent.attempt_id) == "delivered"
    assert len(temporal.signals) == 1


async def test_out_of_order_receipts_never_move_the_state_backward(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    for status in ("delivered", "sent", "queued"):
        answer = await post_signed(http, path_for(sent.token), receipt(sent.remote_id, status))
        assert answer.status_code == 204
        assert attempt_state(committed, sent.attempt_id) == "delivered"
    webhook = [
        o for o in observations_of(committed, remote_id=sent.remote_id) if o.source == "webhook"
    ]
    assert [(o.raw_status, o.applied, o.verdict) for o in webhook] == [
        ("delivered", True, "applied"),
        ("sent", False, "stale"),
        ("queued", False, "stale"),
    ]


async def test_a_receipt_without_the_token_finds_the_attempt_by_message_id(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    answer = await post_signed(http, "/v1/receipts/sms", receipt(sent.remote_id, "sent"))
    assert answer.status_code == 204
    assert attempt_state(committed, sent.attempt_id) == "sent"


async def test_a_receipt_for_an_unknown_message_is_kept_as_orphan_evidence(http, committed):
    sid = "SM" + "f" * 32
    answer = await post_signed(http, "/v1/receipts/sms", receipt(sid, "delivered"))
    assert answer.status_code == 204
    (orphan,) = observations_of(committed, remote_id=sid)
    assert orphan.attempt_id is None and orphan.raw_status == "delivered" and not orphan.applied


async def test_a_failed_signal_does_not_fail_the_receipt(http, committed, cipher, temporal):
    temporal.fail_signals = True
    sent = submitted_attempt(committed, cipher)
    answer = await post_signed(http, path_for(sent.token), receipt(sent.remote_id, "delivered"))
    assert answer.status_code == 204
    assert attempt_state(committed, sent.attempt_id) == "delivered"
    assert len(temporal.signals) == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\xff\xfe not a form", "form-urlencoded"),
        (b"a=1&&&=", "form-urlencoded"),
        (None, "MessageSid and MessageStatus are required"),
        ("status", "unknown MessageStatus"),
        ("sid", "MessageSid is not a message id"),
        ("code", "ErrorCode is not an error code"),
        ("repeated", "repeated"),
        ("nul", "NUL"),
    ],
)
async def test_a_malformed_receipt_is_400_with_the_reason(http, engine, body, reason):
    before = observation_count(engine)
    if isinstance(body, bytes):
        answer = await http.post(
            "/v1/receipts/sms",
            content=body,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "X-Twilio-Signature": "x",
            },
        )
    elif body == "repeated":
        url = f"{PUBLIC_BASE}/v1/receipts/sms"
        content = "MessageSid=SM1&MessageStatus=sent&MessageStatus=delivered"
        answer = await http.post(
            "/v1/receipts/sms",
            content=content,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "X-Twilio-Signature": sign(
                    url, {"MessageSid": "SM1", "MessageStatus": "delivered"}
                ),
            },
        )
    else:
        params = {
            None: {"To": "+447400000100"},
            "status": receipt("SM" + "a" * 32, "vanished"),
            "sid": receipt("SM/../../etc", "sent"),
            "code": receipt("SM" + "a" * 32, "failed", ErrorCode="3" * 40),
            "nul": receipt("SM" + "a" * 32, "sent", To="+44\x00"),
        }[body]
        answer = await post_signed(http, "/v1/receipts/sms", params)
    assert answer.status_code == 400, answer.text
    assert reason in answer.json()["detail"]
    assert observation_count(engine) == before


async def test_an_oversized_body_is_413_declared_or_streamed(http):
    big = b"Body=" + b"x" * (64 * 1024)
    declared = await http.post("/v1/receipts/sms", content=big)
    assert declared.status_code == 413

    async def chunks():
        for _ in range(20):
            yield b"x" * 4096

    streamed = await http.post("/v1/receipts/sms", content=chunks())
    assert streamed.status_code == 413
    assert "larger than" in streamed.json()["detail"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/json", None])
@pytest.mark.parametrize("route", ["/v1/receipts/sms", "/v1/inbound/sms"])
async def test_a_signed_form_under_another_content_type_is_400_and_writes_nothing(
    http, committed, cipher, engine, route, content_type
):
    # A correctly signed body: only its Content-Type is wrong.
    sent = submitted_attempt(committed, cipher)
    if route == "/v1/receipts/sms":
        path, params = path_for(sent.token), receipt(sent.remote_id, "delivered")
    else:
        path, params = route, {"From": "+447400000177", "Body": "STOP"}
    headers = {"X-Twilio-Signature": sign(f"{PUBLIC_BASE}{path}", params)}
    if content_type is not None:
        headers["Content-Type"] = content_type
    before = (observation_count(engine), suppression_count(engine))
    answer = await http.post(path, content=urlencode(params), headers=headers)
    assert answer.status_code == 400, answer.text
    assert "application/x-www-form-urlencoded" in answer.json()["detail"]
    assert (observation_count(engine), suppression_count(engine)) == before
    assert attempt_state(committed, sent.attempt_id) == "submitted"


async def test_a_form_with_a_charset_parameter_is_still_a_form(http, committed, cipher):
    sent = submitted_attempt(committed, cipher)
    answer = await post_signed(
        http,
        path_for(sent.token),
        receipt(sent.remote_id, "sent"),
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    assert answer.status_code == 204


async def test_one_signed_receipt_replayed_with_fresh_idempotency_headers_is_stored_once(
    http, committed, cipher
):
    # The signature covers the URL and the fields, not I-Twilio-Idempotency-Token: a
    # captured callback replayed with a new header each time is still one callback.
    sent = submitted_attempt(committed, cipher)
    path = path_for(sent.token)
    for status in ("delivered", "sent"):
        params = receipt(sent.remote_id, status)
        body = urlencode(params)
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Twilio-Signature": sign(f"{PUBLIC_BASE}{path}", params),
        }
        for n in range(1000 if status == "sent" else 1):
            answer = await http.post(
                path,
                content=body,
                headers={**headers, "I-Twilio-Idempotency-Token": f"replay-{status}-{n}"},
            )
            assert answer.status_code == 204
    webhook = [
        (o.raw_status, o.verdict)
        for o in observations_of(committed, remote_id=sent.remote_id)
        if o.source == "webhook"
    ]
    # The late `sent` is kept once as stale evidence, never a thousand times.
    assert webhook == [("delivered", "applied"), ("sent", "stale")]


def boundary_variants(
    params: dict[str, str], url: str, signature: str, count: int
) -> list[list[tuple[str, str]]]:
    """`count` forms of `params` that differ as parsed but that the twilio package's own
    validator accepts with `signature`: the boundary between a name and its value moved
    (`AccountSidA=C0...`, `To+=44...`; a cut that changes the names' sorted order changes
    the signed string, and is skipped), with or without an empty pair (`&=`) appended.
    The fields Herald reads (message id, status, error code) are left whole, so every
    variant is a receipt it records."""
    validator = RequestValidator(AUTH_TOKEN)
    read = {"MessageSid", "SmsSid", "MessageStatus", "SmsStatus", "ErrorCode"}
    variants: list[list[tuple[str, str]]] = []
    for tail in ([], [("", "")]):
        for name, value in params.items():
            if name in read:
                continue
            joined = name + value
            for cut in range(1, len(joined)):
                if cut == len(name):
                    continue
                pairs = [(n, v) for n, v in params.items() if n != name]
                pairs.append((joined[:cut], joined[cut:]))
                if validator.validate(url, dict(pairs + tail), signature):
                    variants.append(pairs + tail)
    return variants[:count]


async def test_a_hundred_re_cuts_of_one_signed_receipt_are_stored_once(http, committed, cipher):
    # The signature is an HMAC of URL + name1 + value1 + name2 + value2... with no
    # separator, so moving a boundary leaves it valid: the official validator accepts
    # every variant. Each must be the same callback, not a new stale observation.
    sent = submitted_attempt(committed, cipher)
    path = path_for(sent.token)
    url = f"{PUBLIC_BASE}{path}"
    params = receipt(sent.remote_id, "delivered")
    signature = sign(url, params)
    variants = boundary_variants(params, url, signature, 100)
    assert len(variants) == 100
    assert all(dict(pairs) != params for pairs in variants)
    first = await post_signed(http, path, params)
    assert first.status_code == 204
    for pairs in variants:
        answer = await http.post(
            path,
            content=urlencode(pairs),
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "X-Twilio-Signature": signature,
            },
        )
        # Accepted (never refused for a field's name), and recorded as what it is: the
        # same callback again.
        assert answer.status_code == 204
    webhook = [
        (o.raw_status, o.verdict)
        for o in observations_of(committed, remote_id=sent.remote_id)
        if o.source == "webhook"
    ]
    assert webhook == [("delivered", "applied")]


async def test_a_retry_by_the_provider_with_its_same_idempotency_token_is_stored_once(
    http, committed, cipher
):
    sent = submitted_attempt(committed, cipher)
    for _ in range(3):
        answer = await post_signed(
            http,
            path_for(sent.token),
            receipt(sent.remote_id, "undelivered", ErrorCode="30005"),
            headers={"I-Twilio-Idempotency-Token": "twilio-retry-1"},
        )
        assert answer.status_code == 204
    webhook = [
        o for o in observations_of(committed, remote_id=sent.remote_id) if o.source == "webhook"
    ]
    assert len(webhook) == 1


@pytest.mark.parametrize("signed_path", ["/v1/receipts/%73ms", "/v1/receipts/sms"])
async def test_a_percent_encoded_path_is_judged_like_the_official_validator(
    http, committed, cipher, signed_path
):
    # The provider called /v1/receipts/%73ms (the router decodes it to /sms). The twilio
    # package's RequestValidator, given the URL as called, is the oracle for both: a
    # signature over the encoded path is valid, one over the decoded path is not.
    sent = submitted_attempt(committed, cipher)
    query = "?" + urlencode({"token": sent.token})
    called = f"{PUBLIC_BASE}/v1/receipts/%73ms{query}"
    params = receipt(sent.remote_id, "delivered")
    signature = sign(f"{PUBLIC_BASE}{signed_path}{query}", params)
    official = RequestValidator(AUTH_TOKEN).validate(called, params, signature)
    assert official is (signed_path == "/v1/receipts/%73ms")
    answer = await http.post(
        f"/v1/receipts/%73ms{query}",
        content=urlencode(params),
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Twilio-Signature": signature,
        },
    )
    assert answer.status_code == (204 if official else 403), answer.text
    assert attempt_state(committed, sent.attempt_id) == ("delivered" if official else "submitted")
