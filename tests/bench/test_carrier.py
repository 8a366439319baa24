"""The bench's carrier process: a real simulator in its own process that counts arrivals."""

from __future__ import annotations

import time

import settings as settings_module
from bench.carrier import Carrier, kind_of
from devstack import free_port
from transports.sms import SmsMessage
from transports.twilio import TwilioSms

NEVER = "+447400300001"
NORMAL = "+447400300002"
SENDER = "+15005550006"


def test_each_carrier_call_is_named_by_method_and_path() -> None:
    base = "/2010-04-01/Accounts/AC1/Messages"
    assert kind_of("POST", f"{base}.json") == "create"
    assert kind_of("GET", f"{base}.json") == "list"
    assert kind_of("GET", f"{base}/SM1.json") == "lookup"
    assert kind_of("POST", f"{base}/SM1.json") == "update"
    assert kind_of("GET", "/_sim/stats") is None


async def test_the_carrier_process_counts_creates_and_lookups_and_never_resolves_its_numbers(
    tmp_path,
) -> None:
    cfg = settings_module.Settings()
    carrier = Carrier(
        port=free_port(),
        inbound_url="http://127.0.0.1:9/v1/inbound/sms",
        never_resolves=[NEVER],
        folder=tmp_path,
    )
    await carrier.start()
    try:
        before = time.monotonic()
        lookups = 0
        async with TwilioSms(
            base_url=carrier.url,
            account_sid=cfg.sms_account_sid,
            auth_token=cfg.sms_auth_token.get_secret_value(),
        ) as sms:
            never = await sms.submit(SmsMessage("bench:1", NEVER, "hello", SENDER, None))
            normal = await sms.submit(SmsMessage("bench:2", NORMAL, "hello", SENDER, None))
            deadline = time.monotonic() + 10
            while (await sms.status(normal.remote_id)).raw_status != "delivered":
                lookups += 1
                assert time.monotonic() < deadline, "the normal number was never delivered"
            lookups += 1
            # The normal message has gone through its whole lifecycle; this one has not.
            assert (await sms.status(never.remote_id)).raw_status == "sent"
            lookups += 1
        assert await carrier.count("create") == 2
        assert await carrier.count("lookup", before) == lookups
        assert await carrier.count("lookup", time.monotonic()) == 0
        assert carrier.process.is_alive()
    finally:
        await carrier.stop()
    assert not carrier.process.is_alive()
