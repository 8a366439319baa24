"""The Twilio adapter against the carrier simulator, over real HTTP, for every fault."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from domain.keys import content_sha256
from domain.states import AttemptState, normalize_provider_status
from simulators.twilio import SimulatorServer
from tests.transports.conftest import (
    ACCOUNT_SID,
    AUTH_TOKEN,
    NORMAL_TO,
    SENDER,
    CallbackReceiver,
)
from transports.errors import (
    SmsAmbiguousError,
    SmsError,
    SmsNotFound,
    SmsPermanentError,
    SmsTransientError,
)
from transports.sms import ProviderStatus, SmsMessage, SmsSubmitted, SmsTransport
from transports.twilio import TwilioSms


def message(
    receiver: CallbackReceiver,
    to: str = NORMAL_TO,
    *,
    body: str | None = None,
    token: str | None = None,
    **extra: object,
) -> SmsMessage:
    token = token or f"class-opening:c-9081:m-{uuid.uuid4().hex[:6]}:sms:1"
    return SmsMessage(
        token=token,
        to=to,
        body=body or f"A seat opened in class c-9081 ({uuid.uuid4().hex[:8]})",
        sender=SENDER,
        status_callback=f"{receiver.server.url}/receipts?token={token}",
        **extra,  # type: ignore[arg-type]
    )


async def stats(simulator: SimulatorServer) -> dict:
    async with httpx.AsyncClient() as client:
        return (await client.get(f"{simulator.url}/_sim/stats")).json()


async def script(simulator: SimulatorServer, **payload: object) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(f"{simulator.url}/_sim/script", json=payload)


async def status_becomes(
    sms: TwilioSms, sid: str, raw_status: str, timeout: float = 5.0
) -> ProviderStatus:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        current = await sms.status(sid)
        if current.raw_status == raw_status:
            return current
        if loop.time() > deadline:
            raise AssertionError(f"{sid} stayed {current.raw_status!r}, wanted {raw_status!r}")
        await asyncio.sleep(0.02)


def statuses(receiver: CallbackReceiver, sid: str) -> list[str]:
    return [r.params["MessageStatus"] for r in receiver.for_sid(sid)]


async def test_the_adapter_satisfies_the_generic_sms_port(sms: TwilioSms) -> None:
    assert isinstance(sms, SmsTransport)


async def test_a_normal_message_is_queued_then_sent_then_delivered_with_receipts(
    sms: TwilioSms, simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    msg = message(receiver)
    submitted = await sms.submit(msg)

    assert isinstance(submitted, SmsSubmitted)
    assert submitted.remote_id.startswith("SM") and len(submitted.remote_id) == 34
    assert submitted.raw_status == "queued"
    assert submitted.segments == 1
    assert submitted.provider_at is not None and submitted.provider_at.tzinfo is not None
    await receiver.wait_until(lambda: "delivered" in statuses(receiver, submitted.remote_id))
    assert statuses(receiver, submitted.remote_id) == ["sent", "delivered"]
    final = await sms.status(submitted.remote_id)
    assert final.raw_status == "delivered" and final.error_code is None
    assert normalize_provider_status(final.raw_status) == AttemptState.DELIVERED
    assert final.body_sha256 == content_sha256(msg.body)
    counts = await stats(simulator)
    assert counts["by_token"] == {msg.token: 1}
    assert counts["total"] == 1 and counts["by_to"] == {NORMAL_TO: 1}


async def test_the_messaging_service_is_sent_instead_of_from_and_starts_accepted(
    simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    async with TwilioSms(
        base_url=simulator.url,
        account_sid=ACCOUNT_SID,
        auth_token=AUTH_TOKEN,
        messaging_service_sid="MG" + "1" * 32,
    ) as sms:
        submitted = await sms.submit(message(receiver, validity_seconds=600))
    assert submitted.raw_status == "accepted"
    stored = simulator.sim.messages[submitted.remote_id]
    assert stored.from_ is None and stored.messaging_service_sid == "MG" + "1" * 32
    assert stored.validity_period == 600


async def test_accept_then_timeout_is_ambiguous_counted_and_found_by_reconciliation(
    simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    msg = message(receiver, "+447400000001")
    started = datetime.now(UTC)
    async with TwilioSms(
        base_url=simulator.url, account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN, read_timeout=0.5
    ) as impatient:
        with pytest.raises(SmsAmbiguousError) as caught:
            await impatient.submit(msg)
        assert caught.value.code == "timeout"

        # The simulator created (and counted) the message whose response it withheld.
        counts = await stats(simulator)
        assert counts["by_token"] == {msg.token: 1} and counts["total"] == 1

        (sid,) = simulator.sim.messages
        await receiver.wait_until(lambda: "sent" in statuses(receiver, sid))
        found = await impatient.find(
            to=msg.to,
            sent_after=started,
            sent_before=datetime.now(UTC),
            body_sha256=content_sha256(msg.body),
        )
        assert [f.remote_id for f in found] == [sid]
        assert found[0].sent_at is not None

        other_body = await impatient.find(
            to=msg.to,
            sent_after=started,
            sent_before=datetime.now(UTC),
            body_sha256=content_sha256("another text"),
        )
        assert other_body == []
        earlier_window = await impatient.find(
            to=msg.to,
            sent_after=started - timedelta(hours=2),
            sent_before=started - timedelta(hours=1),
            body_sha256=content_sha256(msg.body),
        )
        assert earlier_window == []


async def test_find_follows_next_page_uri_across_pages(
    simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    started = datetime.now(UTC)
    async with TwilioSms(
        base_url=simulator.url, account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN, page_size=1
    ) as sms:
        same = [message(receiver, body="Your order o-77 was created") for _ in range(2)]
        sids = [(await sms.submit(m)).remote_id for m in same]
        await sms.submit(message(receiver, body="something else"))
        await receiver.wait_until(lambda: len(receiver.requests) >= 6)  # 3 x sent+delivered
        found = await sms.find(
            to=NORMAL_TO,
            sent_after=started,
            sent_before=datetime.now(UTC),
            body_sha256=content_sha256("Your order o-77 was created"),
        )
    assert sorted(f.remote_id for f in found) == sorted(sids)


async def test_a_429_storm_is_transient_with_retry_after_and_then_accepted(
    sms: TwilioSms, simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    msg = message(receiver, "+447400000002")
    for _ in range(2):
        with pytest.raises(SmsTransientError) as caught:
            await sms.submit(msg)
        assert caught.value.retry_after == 1.0
        assert caught.value.code == "20429" and caught.value.http_status == 429
    submitted = await sms.submit(msg)
    assert submitted.raw_status == "queued"
    counts = await stats(simulator)
    assert counts["by_token"] == {msg.token: 1}, "rejected requests are not submissions"
    assert counts["requests_by_token"] == {msg.token: 3}


async def test_a_503_is_transient_with_retry_after(
    sms: TwilioSms, simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    with pytest.raises(SmsTransientError) as caught:
        await sms.submit(message(receiver, "+447400000003"))
    assert caught.value.http_status == 503 and caught.value.retry_after == 1.0
    assert (await stats(simulator))["total"] == 0


@pytest.mark.parametrize(
    ("to", "code"),
    [("+447400021211", "21211"), ("+447400021610", "21610"), ("+447400021614", "21614")],
)
async def test_a_permanent_code_at_create_time_is_a_permanent_error_without_the_number(
    sms: TwilioSms, simulator: SimulatorServer, receiver: CallbackReceiver, to: str, code: str
) -> None:
    with pytest.raises(SmsPermanentError) as caught:
        await sms.submit(message(receiver, to))
    assert caught.value.code == code and caught.value.http_status == 400
    assert to not in str(caught.value) and to[1:] not in caught.value.reason
    assert (await stats(simulator))["total"] == 0


@pytest.mark.parametrize("code", ["21211", "21610", "21614", "30004", "30005", "30006", "30007"])
async def test_every_permanent_code_scripted_at_run_time_is_refused_at_create(
    sms: TwilioSms, simulator: SimulatorServer, receiver: CallbackReceiver, code: str
) -> None:
    to = "+33600000001"
    assert (await script(simulator, to=to, fault=f"api_error:{code}")).status_code == 200
    with pytest.raises(SmsPermanentError) as caught:
        await sms.submit(message(receiver, to))
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("to", "raw_status", "code"),
    [
        ("+447400030003", "undelivered", "30003"),
        ("+447400030004", "undelivered", "30004"),
        ("+447400030005", "undelivered", "30005"),
        ("+447400030006", "undelivered", "30006"),
        ("+447400030007", "failed", "30007"),
    ],
)
async def test_a_carrier_failure_arrives_as_a_receipt_and_in_the_status(
    sms: TwilioSms, receiver: CallbackReceiver, to: str, raw_status: str, code: str
) -> None:
    submitted = await sms.submit(message(receiver, to))
    await receiver.wait_until(lambda: raw_status in statuses(receiver, submitted.remote_id))
    (receipt,) = [
        r for r in receiver.for_sid(submitted.remote_id) if r.params["MessageStatus"] == raw_status
    ]
    assert receipt.params["ErrorCode"] == code
    final = await sms.status(submitted.remote_id)
    assert (final.raw_status, final.error_code) == (raw_status, code)


@pytest.mark.parametrize("code", ["30004", "30005", "30006", "30007"])
async def test_a_run_time_script_can_turn_any_code_into_an_undelivered_receipt(
    sms: TwilioSms, simulator: SimulatorServer, receiver: CallbackReceiver, code: str
) -> None:
    to = "+33600000002"
    await script(simulator, to=to, fault=f"undelivered:{code}")
    submitted = await sms.submit(message(receiver, to))
    final = await status_becomes(sms, submitted.remote_id, "undelivered")
    assert final.error_code == code


async def test_a_delayed_receipt_leaves_the_message_sent_until_it_arrives(
    sms: TwilioSms, receiver: CallbackReceiver
) -> None:
    submitted = await sms.submit(message(receiver, "+447400000005"))
    sid = submitted.remote_id
    await receiver.wait_until(lambda: "sent" in statuses(receiver, sid))
    assert (await sms.status(sid)).raw_status == "sent"
    await receiver.wait_until(lambda: "delivered" in statuses(receiver, sid))
    sent, delivered = receiver.for_sid(sid)
    assert delivered.at - sent.at >= 0.7  # FAST.delayed_receipt is 0.8 s; delivered is 0.1 s
    assert (await sms.status(sid)).raw_status == "delivered"


async def test_duplicate_receipts_repeat_each_callback_with_one_idempotency_token(
    sms: TwilioSms, receiver: CallbackReceiver
) -> None:
    sid = (await sms.submit(message(receiver, "+447400000006"))).remote_id
    await receiver.wait_until(lambda: statuses(receiver, sid).count("delivered") == 3)
    by_status: dict[str, set[str]] = {}
    for r in receiver.for_sid(sid):
        by_status.setdefault(r.params["MessageStatus"], set()).add(
            r.headers["i-twilio-idempotency-token"]
        )
    assert statuses(receiver, sid) == ["sent"] * 3 + ["delivered"] * 3
    assert all(len(tokens) == 1 for tokens in by_status.values())
    assert by_status["sent"] != by_status["delivered"]


async def test_out_of_order_receipts_deliver_before_sent_and_the_status_is_delivered(
    sms: TwilioSms, receiver: CallbackReceiver
) -> None:
    sid = (await sms.submit(message(receiver, "+447400000007"))).remote_id
    await receiver.wait_until(lambda: len(receiver.for_sid(sid)) == 2)
    assert statuses(receiver, sid) == ["delivered", "sent"]
    assert (await sms.status(sid)).raw_status == "delivered"


async def test_a_message_that_never_resolves_stays_sent_without_any_receipt(
    sms: TwilioSms, receiver: CallbackReceiver
) -> None:
    stuck = (await sms.submit(message(receiver, "+447400000008"))).remote_id
    control = (await sms.submit(message(receiver))).remote_id
    # The control has the same timings: once its final receipt is in, the stuck one's
    # would have been too.
    await receiver.wait_until(lambda: "delivered" in statuses(receiver, control))
    assert receiver.for_sid(stuck) == []
    assert (await status_becomes(sms, stuck, "sent")).raw_status == "sent"
    assert normalize_provider_status("sent") == AttemptState.SENT


async def test_a_slow_response_still_succeeds_within_the_read_timeout(
    sms: TwilioSms, receiver: CallbackReceiver
) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    submitted = await sms.submit(message(receiver, "+447400000004"))
    assert loop.time() - began >= 0.3
    assert submitted.raw_status == "queued"


async def test_a_scheduled_message_can_be_cancelled_and_a_sent_one_cannot(
    sms: TwilioSms, receiver: CallbackReceiver
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    scheduled = await sms.submit(message(receiver, send_at=later))
    assert scheduled.raw_status == "scheduled"
    cancelled = await sms.cancel(scheduled.remote_id)
    assert cancelled.raw_status == "canceled"
    assert normalize_provider_status(cancelled.raw_status) == AttemptState.CANCELLED
    assert (await sms.status(scheduled.remote_id)).raw_status == "canceled"

    sent = (await sms.submit(message(receiver))).remote_id
    await status_becomes(sms, sent, "delivered")
    with pytest.raises(SmsError) as caught:
        await sms.cancel(sent)
    assert caught.value.code == "30409"


async def test_an_unknown_message_is_not_found_as_a_non_create_error(sms: TwilioSms) -> None:
    with pytest.raises(SmsError) as caught:
        await sms.status("SM" + "0" * 32)
    assert caught.value.code == "20404" and caught.value.http_status == 404
    assert not isinstance(caught.value, SmsAmbiguousError)


async def test_a_refused_connection_is_transient_because_nothing_left(
    receiver: CallbackReceiver,
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    async with TwilioSms(
        base_url=f"http://127.0.0.1:{closed_port}",
        account_sid=ACCOUNT_SID,
        auth_token=AUTH_TOKEN,
        connect_timeout=0.5,
    ) as sms:
        with pytest.raises(SmsTransientError) as caught:
            await sms.submit(message(receiver))
    assert caught.value.code == "connect"


async def test_a_wrong_auth_token_is_refused_and_sends_nothing(
    simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    async with TwilioSms(
        base_url=simulator.url, account_sid=ACCOUNT_SID, auth_token="wrong"
    ) as sms:
        with pytest.raises(SmsError) as caught:
            await sms.submit(message(receiver))
    assert caught.value.http_status == 401 and caught.value.code == "20003"
    assert (await stats(simulator))["requests_total"] == 0


async def test_a_rotated_auth_token_refuses_the_old_one_about_the_account_until_it_is_set(
    sms: TwilioSms, simulator: SimulatorServer, receiver: CallbackReceiver
) -> None:
    async with httpx.AsyncClient() as client:
        rotated = await client.post(f"{simulator.url}/_sim/credential", json={"secret": "new"})
        assert rotated.json() == {"rotated": True}
        try:
            with pytest.raises(SmsPermanentError) as caught:
                await sms.submit(message(receiver))
            assert (caught.value.code, caught.value.http_status) == ("20003", 401)
            assert caught.value.about_the_account
            assert (await stats(simulator))["total"] == 0
            refused = await client.post(f"{simulator.url}/_sim/credential", json={})
            assert refused.status_code == 400
        finally:
            # The operator's fix: the carrier accepts the token the client holds again.
            await client.post(f"{simulator.url}/_sim/credential", json={"secret": AUTH_TOKEN})
    assert (await sms.submit(message(receiver))).remote_id


async def test_a_server_error_on_create_is_ambiguous_but_transient_on_a_fetch() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, json={"code": None, "message": "Bad gateway", "status": 502})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    sms = TwilioSms(base_url="http://x", account_sid=ACCOUNT_SID, auth_token="t", client=client)
    msg = SmsMessage("k:1", NORMAL_TO, "hi", SENDER, None)
    with pytest.raises(SmsAmbiguousError):
        await sms.submit(msg)
    with pytest.raises(SmsTransientError):
        await sms.status("SM" + "1" * 32)
    await sms.aclose()
    assert not client.is_closed, "a client passed in belongs to the caller"
    await client.aclose()


@pytest.mark.parametrize(("code", "http_status"), [(21612, 400), (20008, 401), (21606, 403)])
async def test_an_unknown_4xx_with_the_providers_error_body_is_a_definitive_refusal(
    sms: TwilioSms,
    simulator: SimulatorServer,
    receiver: CallbackReceiver,
    code: int,
    http_status: int,
) -> None:
    # A code the classification table does not know: nothing was created, so it is not
    # "may have been accepted" (ambiguous, reconciled) but a refusal with its code.
    to = "+33600000002"
    scripted = await script(simulator, to=to, fault=f"api_error:{code}", http_status=http_status)
    assert scripted.status_code == 200
    with pytest.raises(SmsPermanentError) as caught:
        await sms.submit(message(receiver, to))
    assert caught.value.code == str(code) and caught.value.http_status == http_status
    assert (await stats(simulator))["total"] == 0


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(400, text="<html>bad request (a proxy's page)</html>"),
        httpx.Response(500, json={"code": 20500, "message": "Internal", "status": 500}),
    ],
)
async def test_a_4xx_without_the_providers_body_and_a_5xx_stay_ambiguous_on_create(
    answer: httpx.Response,
) -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: answer))
    sms = TwilioSms(base_url="http://x", account_sid=ACCOUNT_SID, auth_token="t", client=client)
    with pytest.raises(SmsAmbiguousError):
        await sms.submit(SmsMessage("k:1", NORMAL_TO, "hi", SENDER, None))
    await client.aclose()


async def test_the_simulator_refuses_a_scripted_http_status_that_is_not_a_4xx(
    simulator: SimulatorServer,
) -> None:
    for bad in (200, 429, 500):
        answer = await script(
            simulator, to="+33600000003", fault="api_error:21408", http_status=bad
        )
        assert answer.status_code == 400


async def test_a_message_twilio_does_not_hold_is_not_found_and_a_bare_404_is_not(
    sms: TwilioSms, simulator: SimulatorServer
) -> None:
    # Twilio's own 404 (code 20404) is an answer a lookup records; it once read as a
    # transient error and the operator's `settle --lookup` retried without end.
    with pytest.raises(SmsNotFound) as missing:
        await sms.status("SM" + "0" * 32)
    assert (missing.value.http_status, missing.value.code) == (404, "20404")
    # A 404 from something that is not Twilio (a wrong base URL) is no such evidence.
    elsewhere = TwilioSms(
        base_url=f"{simulator.url}/no-such-prefix",
        account_sid=ACCOUNT_SID,
        auth_token=AUTH_TOKEN,
    )
    with pytest.raises(SmsError) as refused:
        await elsewhere.status("SM" + "0" * 32)
    assert not isinstance(refused.value, SmsNotFound)
