"""The SendGrid adapter against the simulator, and the Event Webhook signature against the
official `sendgrid` package's verifier (it only verifies: we sign with `cryptography`)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from sendgrid.helpers.eventwebhook import EventWebhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from api.ingress.sendgrid import load_event_public_key, verify_event_batch
from domain.email_events import SIGNATURE_HEADER, TIMESTAMP_HEADER, TOKEN_ARG
from simulators.sendgrid import SendGridSimulatorServer, SimEmailDelays
from simulators.server import LoopbackServer
from transports.email import EmailAttachment, EmailMessageSpec, message_id_for
from transports.errors import EmailAmbiguousError, EmailPermanentError, EmailTransientError
from transports.sendgrid import SendGridEmail, generate_event_key_pair, sign_event_batch

API_KEY = "SG.test-key"
FAST = SimEmailDelays(step=0.02, batch=0.02, retry=0.05, max_retries=2, hang=30.0)
BODY = b'[{"email":"a@example.com","event":"delivered","sg_event_id":"e1","timestamp":1}]'


def spec(to: str, token: str = "order:o-1:email:1", **extra: Any) -> EmailMessageSpec:
    return EmailMessageSpec(
        token=token,
        to=to,
        sender="Herald <notifications@herald.example>",
        subject="Your order",
        text="It shipped.",
        **extra,
    )


class EventReceiver:
    """Stands in for Herald's event route: records each POST; `refuse` answers 503."""

    def __init__(self) -> None:
        self.posts: list[tuple[bytes, dict[str, str]]] = []
        self.refuse = 0

        async def record(request: Request) -> Response:
            self.posts.append((await request.body(), dict(request.headers)))
            if self.refuse:
                self.refuse -= 1
                return Response(status_code=503)
            return Response(status_code=204)

        self.server = LoopbackServer(Starlette(routes=[Route("/events", record, methods=["POST"])]))


@pytest.fixture
async def receiver() -> AsyncIterator[EventReceiver]:
    rec = EventReceiver()
    await rec.server.start()
    yield rec
    await rec.server.stop()


@pytest.fixture
async def provider(receiver: EventReceiver) -> AsyncIterator[SendGridSimulatorServer]:
    server = SendGridSimulatorServer(
        api_key=API_KEY, event_url=f"{receiver.server.url}/events", delays=FAST
    )
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def email(provider: SendGridSimulatorServer) -> AsyncIterator[SendGridEmail]:
    async with SendGridEmail(
        api_key=API_KEY, base_url=provider.url, connect_timeout=1.0, read_timeout=0.5
    ) as transport:
        yield transport


# --- Mail Send -----------------------------------------------------------------------------


async def test_the_request_carries_the_token_categories_headers_and_attachments():
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, headers={"X-Message-Id": "abc123"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    transport = SendGridEmail(api_key=API_KEY, base_url="https://sg.test", client=client)
    pdf = EmailAttachment("report.pdf", "application/pdf", b"%PDF-1.7 bytes")
    sent = await transport.send(
        spec(
            "Ada <ada@example.com>",
            attachments=[pdf],
            unsubscribe_url="https://herald.test/v1/unsubscribe/t",
            categories=["operational"],
        )
    )
    await client.aclose()
    assert sent.remote_id == "abc123"
    assert sent.message_id == message_id_for("order:o-1:email:1")
    request = seen[0]
    assert request.url.path == "/v3/mail/send"
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    body = json.loads(request.content)
    personalization = body["personalizations"][0]
    assert personalization["to"] == [{"email": "ada@example.com", "name": "Ada"}]
    assert personalization["custom_args"] == {TOKEN_ARG: "order:o-1:email:1"}
    assert body["from"] == {"email": "notifications@herald.example", "name": "Herald"}
    assert body["categories"] == ["operational"]
    assert body["content"] == [{"type": "text/plain", "value": "It shipped."}]
    assert body["attachments"] == [
        {
            "content": base64.b64encode(pdf.content).decode(),
            "filename": "report.pdf",
            "type": "application/pdf",
            "disposition": "attachment",
        }
    ]
    headers = body["headers"]
    assert headers["Message-ID"] == sent.message_id
    assert headers["List-Unsubscribe"] == "<https://herald.test/v1/unsubscribe/t>"
    assert headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"


async def test_an_accepted_message_has_the_providers_id_and_is_counted_once(email, provider):
    sent = await email.send(spec("ada@example.com", token="t-accepted"))
    assert sent.remote_id
    assert provider.sim.stats()["by_token"] == {"t-accepted": 1}


async def test_an_error_body_is_a_definitive_refusal_without_the_address(email, provider):
    with pytest.raises(EmailPermanentError) as caught:
        await email.send(spec("refuse@example.com"))
    assert caught.value.code == 400
    assert "@" not in str(caught.value)
    assert provider.sim.stats()["total"] == 0


@pytest.mark.parametrize(
    "empty", [{"subject": ""}, {"text": ""}, {"html": ""}], ids=["subject", "text", "html"]
)
async def test_an_empty_subject_or_body_is_refused_before_any_request(email, provider, empty):
    # Mail Send's document requires one character or more in each: nothing is sent.
    values = {"subject": "Your order", "text": "It shipped.", **empty}
    with pytest.raises(EmailPermanentError, match="empty"):
        await email.send(replace(spec("ada@example.com"), **values))
    assert provider.sim.stats()["requests_total"] == 0


async def test_a_rate_limit_is_transient_with_the_wait(email, provider):
    with pytest.raises(EmailTransientError) as caught:
        await email.send(spec("ratelimit@example.com"))
    assert caught.value.retry_after == 1.0
    assert provider.sim.stats()["total"] == 0


async def test_a_5xx_is_ambiguous(email, provider):
    with pytest.raises(EmailAmbiguousError):
        await email.send(spec("error500@example.com", token="t-500"))
    # The provider may well have it: the simulator did accept it.
    assert provider.sim.stats()["by_token"] == {"t-500": 1}


async def test_a_timeout_after_the_request_left_is_ambiguous(email, provider):
    with pytest.raises(EmailAmbiguousError):
        await email.send(spec("timeout@example.com", token="t-timeout"))
    assert provider.sim.stats()["by_token"] == {"t-timeout": 1}


async def test_a_4xx_without_the_error_body_is_ambiguous():
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _: httpx.Response(404, text="<html>proxy</html>"))
    )
    transport = SendGridEmail(api_key=API_KEY, base_url="https://sg.test", client=client)
    with pytest.raises(EmailAmbiguousError):
        await transport.send(spec("ada@example.com"))
    await client.aclose()


async def test_a_wrong_api_key_is_refused_about_the_account_and_sends_nothing(provider):
    # The simulator checks the key as SendGrid does (401 with its error body).
    async with SendGridEmail(api_key="SG.wrong", base_url=provider.url) as transport:
        with pytest.raises(EmailPermanentError) as caught:
            await transport.send(spec("ada@example.com"))
    assert caught.value.code == 401 and caught.value.about_the_account
    assert provider.sim.stats()["total"] == 0  # refused before anything was accepted


@pytest.mark.parametrize("status", [401, 403])
async def test_a_bare_401_or_403_is_about_the_account_not_ambiguous(status: int):
    # Authentication and permission come before any processing: nothing was accepted,
    # whatever page a proxy answered with.
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda _: httpx.Response(status, text="<html>no</html>"))
    )
    transport = SendGridEmail(api_key=API_KEY, base_url="https://sg.test", client=client)
    with pytest.raises(EmailPermanentError) as caught:
        await transport.send(spec("ada@example.com"))
    await client.aclose()
    assert caught.value.code == status and caught.value.about_the_account


async def test_an_unreachable_provider_is_transient():
    transport = SendGridEmail(api_key=API_KEY, base_url="http://127.0.0.1:9", connect_timeout=0.5)
    with pytest.raises(EmailTransientError):
        await transport.send(spec("ada@example.com"))
    await transport.aclose()


# --- the signature, against the official verifier ------------------------------------------


def official(public_b64: str, body: bytes, signature: str, timestamp: str) -> bool:
    hook = EventWebhook()
    return hook.verify_signature(
        body.decode(), signature, timestamp, hook.convert_public_key_to_ecdsa(public_b64)
    )


def test_a_valid_signature_verifies_with_the_official_package_and_ours():
    private, public = generate_event_key_pair()
    signature = sign_event_batch(private, timestamp="1765000000", body=BODY)
    assert official(public, BODY, signature, "1765000000")
    assert verify_event_batch(
        load_event_public_key(public), signature=signature, timestamp="1765000000", body=BODY
    )


def test_a_tampered_body_fails_both():
    private, public = generate_event_key_pair()
    signature = sign_event_batch(private, timestamp="1765000000", body=BODY)
    tampered = BODY.replace(b"delivered", b"bounce")
    assert not official(public, tampered, signature, "1765000000")
    assert not verify_event_batch(
        load_event_public_key(public), signature=signature, timestamp="1765000000", body=tampered
    )


def test_a_tampered_timestamp_fails_both():
    private, public = generate_event_key_pair()
    signature = sign_event_batch(private, timestamp="1765000000", body=BODY)
    assert not official(public, BODY, signature, "1765000001")
    assert not verify_event_batch(
        load_event_public_key(public), signature=signature, timestamp="1765000001", body=BODY
    )


def test_another_key_fails_both():
    private, _ = generate_event_key_pair()
    _, other_public = generate_event_key_pair()
    signature = sign_event_batch(private, timestamp="1765000000", body=BODY)
    assert not official(other_public, BODY, signature, "1765000000")
    assert not verify_event_batch(
        load_event_public_key(other_public), signature=signature, timestamp="1765000000", body=BODY
    )


def test_a_malformed_signature_is_false_never_an_exception():
    _, public = generate_event_key_pair()
    key = load_event_public_key(public)
    for bad in ("", "!!!", "a", base64.b64encode(b"not der").decode()):
        assert not verify_event_batch(key, signature=bad, timestamp="1765000000", body=BODY)
    assert not verify_event_batch(key, signature="AAAA", timestamp="17650\u00e9", body=BODY)


# --- the simulator's events ----------------------------------------------------------------


async def wait_for(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    async def reached() -> None:
        while not predicate():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(reached(), timeout)


async def test_the_simulator_posts_signed_batches_the_official_package_accepts(
    email, provider, receiver
):
    await email.send(spec("bounce@example.com", token="t-bounce", categories=["operational"]))
    await provider.sim.idle()
    events = [e for body, _ in receiver.posts for e in json.loads(body)]
    assert [e["event"] for e in events] == ["processed", "bounce"]
    assert all(e[TOKEN_ARG] == "t-bounce" and e["category"] == ["operational"] for e in events)
    assert events[1]["type"] == "bounce"
    for body, headers in receiver.posts:
        assert official(
            provider.sim.public_key,
            body,
            headers[SIGNATURE_HEADER.lower()],
            headers[TIMESTAMP_HEADER.lower()],
        )


async def test_a_refused_batch_is_retried_with_the_same_body_and_timestamp(
    email, provider, receiver
):
    receiver.refuse = 1
    provider.sim.post_batch([{"event": "delivered", "sg_event_id": "e-retry", "timestamp": 1}])
    await provider.sim.idle()
    assert len(receiver.posts) == 2
    (first, first_headers), (second, second_headers) = receiver.posts
    assert first == second
    assert first_headers[TIMESTAMP_HEADER.lower()] == second_headers[TIMESTAMP_HEADER.lower()]
    assert provider.sim.batches[0].statuses == [503, 204]


async def test_what_reaches_a_mailbox_is_relayed_to_the_sink_with_its_attachment(clean_sink):
    server = SendGridSimulatorServer(
        api_key=API_KEY, delays=FAST, relay=("127.0.0.1", clean_sink.port)
    )
    await server.start()
    try:
        async with SendGridEmail(api_key=API_KEY, base_url=server.url) as transport:
            pdf = EmailAttachment("report.pdf", "application/pdf", b"%PDF-1.7 the report")
            sent = await transport.send(spec("ada@example.com", token="t-relay", attachments=[pdf]))
            await transport.send(spec("bounce@example.com", token="t-bounced"))
        await clean_sink.wait_for(1, timeout=5)
        await server.sim.idle()
    finally:
        await server.stop()
    (received,) = clean_sink.messages
    assert list(received.rcpt_tos) == ["ada@example.com"]
    assert received.message["Message-ID"] == sent.message_id
    (part,) = list(received.message.iter_attachments())
    assert part.get_content() == pdf.content
