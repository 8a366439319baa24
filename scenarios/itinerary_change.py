"""`itinerary-change`: a Paris-Boston connection moved from 14:10 to 16:05.

Three travellers, one itinerary event each (SMS first, email as the fallback):

1. SMS accepted but never delivered (simulator fault `never_resolves`): when the email
   window passes (10 minutes in production, 10 s in the demo policy, the same durable
   timer) polling stops and email is tried, with consent evaluated again: a second policy
   decision, for email.
2. Opted out (texted STOP, which the ingress turns into a suppression, and revoked
   consent): nothing is sent on any channel; both decisions are denials with reasons.
3. A permanent number failure (simulator fault `api_error:21211`, invalid number):
   email at once, without waiting for the window.
"""

from __future__ import annotations

import asyncio
from typing import Any

from domain.channels import EMAIL
from domain.requests import NotificationRequest
from scenarios.base import (
    DemoContext,
    attempts_on,
    decisions_on,
    expect,
    parse_at,
    random_uk_mobile,
    suffix,
)

NEVER_RESOLVES = "+447400000008"
INVALID_NUMBER = "+447400021211"
EMAIL_WINDOW_SECONDS = 10
"""The demo policy's `email_after_seconds` (policies/demo.toml)."""


def _request(key: str, traveller: str, phone: str, email: str) -> NotificationRequest:
    return NotificationRequest(
        business_key=key,
        recipient_ref=traveller,
        template_key="itinerary-change",
        phone=phone,
        email=email,
        channels=("sms", "email"),
        variables={
            "first_name": traveller.split("-")[0].title(),
            "flight": "AF334",
            "origin": "Paris CDG",
            "destination": "Boston BOS",
            "old_departure": "14:10",
            "new_departure": "16:05",
            "trip_url": "https://trips.example/pnr/Q7X2LM",
        },
    )


async def _not_delivered_in_time(ctx: DemoContext, trip: str) -> dict[str, Any]:
    traveller = f"ana-{trip}"
    key = f"itinerary-change:{trip}:ana"
    for channel in ("sms", "email"):
        ctx.consent(traveller, channel)
    ref = await ctx.client.notify(
        _request(key, traveller, NEVER_RESOLVES, f"ana.{trip}@traveller.example")
    )
    result = await ctx.result(ref.workflow_id, timeout=60)
    doc = await ctx.timeline(key)
    sms, mail = attempts_on(doc, "sms"), attempts_on(doc, "email")
    expect(sms and mail, f"{key}: expected an SMS then an email attempt, got {doc['attempts']}")
    expect(
        sms[0]["state"] in ("submitted", "sent", "unknown"),
        f"{key}: the SMS reads {sms[0]['state']}; the story needs it undelivered",
    )
    expect(mail[0]["state"] == "sent", f"{key}: the email is {mail[0]['state']}, not sent")
    email_decisions = decisions_on(doc, "email")
    expect(
        len(decisions_on(doc, "sms")) == 1 and len(email_decisions) == 1,
        f"{key}: expected one decision per channel, got {len(doc['decisions'])}",
    )
    expect(email_decisions[0]["outcome"] == "allow", f"{key}: email was not allowed")
    expect(
        email_decisions[0]["inputs"].get("consents_used"),
        f"{key}: the email decision records no consent evidence",
    )
    waited = (
        parse_at(email_decisions[0]["decided_at"]) - parse_at(sms[0]["submitted_at"])  # type: ignore[operator]
    ).total_seconds()
    expect(
        waited >= EMAIL_WINDOW_SECONDS - 1,
        f"{key}: email was decided {waited:.1f} s after the SMS submission, before the window",
    )
    expect(result.outcome in ("sent", "delivered"), f"{key}: the workflow says {result.outcome}")
    ctx.say(f"traveller 1: SMS {sms[0]['state']}, email decided again {waited:.1f} s later: sent")
    return doc


async def _opted_out(ctx: DemoContext, trip: str) -> dict[str, Any]:
    traveller = f"ben-{trip}"
    key = f"itinerary-change:{trip}:ben"
    phone = random_uk_mobile()
    address = f"ben.{trip}@traveller.example"
    # Ben texted STOP (the simulator posts the signed inbound webhook to the ingress) and
    # withdrew his consent for both channels.
    inbound = await ctx.sim_inbound(phone, "STOP")
    expect(
        inbound.get("status_code") == 200,
        f"the ingress answered the STOP webhook with {inbound.get('status_code')}",
    )
    for channel in ("sms", "email"):
        ctx.consent(traveller, channel, revoked=True)
    ref = await ctx.client.notify(_request(key, traveller, phone, address))
    result = await ctx.result(ref.workflow_id, timeout=30)
    doc = await ctx.timeline(key)
    expect(result.outcome == "denied", f"{key}: expected denied, got {result.outcome}")
    expect(doc["intent"]["state"] == "denied", f"{key}: ledger says {doc['intent']['state']}")
    expect(not doc["attempts"], f"{key}: an attempt was prepared for an opted-out traveller")
    for channel in ("sms", "email"):
        ds = decisions_on(doc, channel)
        expect(
            len(ds) == 1 and ds[0]["outcome"] == "deny" and ds[0]["reason"],
            f"{key}: expected one {channel} denial with a reason, got {ds}",
        )
    sms_rule = decisions_on(doc, "sms")[0]["rule"]
    expect(
        sms_rule.startswith("suppression"),
        f"{key}: the SMS denial cites {sms_rule!r}, not the STOP suppression",
    )
    stats = await ctx.sim_stats()
    expect(phone not in stats["by_to"], f"{key}: the carrier received a message for Ben")
    mail = await asyncio.to_thread(ctx.received_mail)
    expect(
        not any(address in str(m.get("To", "")) for m in mail),
        f"{key}: the SMTP sink received a message for Ben",
    )
    ctx.say(
        "traveller 2: nothing sent; "
        + "; ".join(f"{d['channel']} {d['rule']}" for d in doc["decisions"])
    )
    return doc


async def _permanent_failure(ctx: DemoContext, trip: str) -> dict[str, Any]:
    traveller = f"chloe-{trip}"
    key = f"itinerary-change:{trip}:chloe"
    for channel in ("sms", "email"):
        ctx.consent(traveller, channel)
    await ctx.client.notify(
        _request(key, traveller, INVALID_NUMBER, f"chloe.{trip}@traveller.example")
    )
    # The workflow then waits for an operator's approve-resend, so read the ledger instead
    # of waiting for the workflow's result.
    doc = await ctx.wait_for(
        key,
        "the email after the permanent SMS failure",
        lambda d: any(a["channel"] == EMAIL.name and a["state"] == "sent" for a in d["attempts"]),
        timeout=30,
    )
    sms, mail = attempts_on(doc, "sms")[0], attempts_on(doc, "email")[0]
    expect(sms["state"] == "failed", f"{key}: the SMS is {sms['state']}, not failed")
    expect(sms["error_code"] == "21211", f"{key}: the SMS error code is {sms['error_code']}")
    failed_at = parse_at(sms["terminal_at"]) or parse_at(sms["prepared_at"])
    gap = (parse_at(mail["prepared_at"]) - failed_at).total_seconds()  # type: ignore[operator]
    expect(
        gap < EMAIL_WINDOW_SECONDS / 2,
        f"{key}: email came {gap:.1f} s after the permanent failure; it should be at once",
    )
    ctx.say(f"traveller 3: SMS failed (21211), email {gap:.1f} s later: sent")
    return doc


async def run(ctx: DemoContext) -> None:
    trip = f"af334-{suffix()}"
    docs = await asyncio.gather(
        _not_delivered_in_time(ctx, trip),
        _opted_out(ctx, trip),
        _permanent_failure(ctx, trip),
    )
    for title, doc in zip(
        (
            "traveller 1: SMS not delivered in time -> email",
            "traveller 2: opted out",
            "traveller 3: permanent number failure -> email at once",
        ),
        docs,
        strict=True,
    ):
        ctx.show(doc, title)
