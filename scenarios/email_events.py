"""Email that reports back (issue 40): SendGrid's signed events reach the ledger.

1. An order alert by email reaches `delivered` from a signed `delivered` event.
2. A second address hard-bounces: the attempt ends `undelivered`, the address is
   suppressed for email with the bounce as evidence, and the next intent to it is denied by
   policy, naming the bounce.
3. A third address reports the (operational) alert as spam: it is suppressed for that
   category only; a transactional message to it still goes and is delivered.
4. Every event batch the provider sent is delivered again, byte for byte: nothing changes
   (each event is deduplicated on its `sg_event_id`).

Needs the SendGrid simulator (`herald dev`'s default email provider): its addresses are
scripted by local part (`bounce+...`, `complain+...`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from domain.requests import Category, NotificationRequest
from scenarios.base import DemoContext, attempts_on, decisions_on, expect, suffix
from scenarios.order_created import _variables as order_variables

TEMPLATE = "order-created"


def _request(key: str, recipient: str, address: str, category: Category) -> NotificationRequest:
    return NotificationRequest(
        business_key=key,
        recipient_ref=recipient,
        template_key=TEMPLATE,
        email=address,
        channels=("email",),
        country="FR",
        category=category,
        variables=order_variables(key.rpartition(":")[2]),
    )


async def _send(
    ctx: DemoContext,
    key: str,
    recipient: str,
    address: str,
    category: Category = Category.TRANSACTIONAL,
) -> tuple[Any, dict[str, Any]]:
    ref = await ctx.client.notify(_request(key, recipient, address, category))
    result = await ctx.result(ref.workflow_id, timeout=60)
    return result, await ctx.timeline(key)


def _effects(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(o["raw_status"], o["verdict"], o["applied"]) for o in doc["observations"]]


async def _quiet(ctx: DemoContext, timeout: float = 20.0) -> None:
    """Until the simulator has no event left to post and no POST in flight."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (await ctx.email_sim("GET", "/_sim/email/stats"))["pending"]:
        expect(
            asyncio.get_running_loop().time() < deadline,
            f"the provider still had events to post after {timeout:.0f} s",
        )
        await asyncio.sleep(0.2)


async def run(ctx: DemoContext) -> None:
    if not ctx.addresses.email_provider.startswith("sendgrid") or not (
        ctx.addresses.email_simulator
    ):
        # SMTP reports no events, and a real SendGrid account has no scripted addresses.
        ctx.skip(
            "email-events needs herald dev's SendGrid simulator as the email provider "
            f"(this stack sends email through {ctx.addresses.email_provider or 'smtp'})"
        )
        return
    run_id = suffix()
    recipient = f"buyer-{run_id}"
    ctx.consent(recipient, "email")
    docs: dict[str, dict[str, Any]] = {}

    # 1. Delivered, from a signed event.
    key = f"order-created:ee-{run_id}-1"
    result, doc = await _send(ctx, key, recipient, f"camille.{run_id}@shop.example")
    (mail,) = attempts_on(doc, "email")
    expect(result.outcome == "delivered", f"{key}: the workflow says {result.outcome}")
    expect(mail["state"] == "delivered", f"{key}: the email is {mail['state']}")
    expect(
        any(
            o["source"] == "webhook" and o["raw_status"] == "delivered" for o in doc["observations"]
        ),
        f"{key}: no signed delivered event in the ledger: {_effects(doc)}",
    )
    ctx.show(doc, "1. delivered, from a signed event")
    docs[key] = doc

    # 2. A hard bounce: undelivered, suppressed, the next intent denied naming the bounce.
    bounced = f"bounce+{run_id}@shop.example"
    key = f"order-created:ee-{run_id}-2"
    result, doc = await _send(ctx, key, recipient, bounced)
    (mail,) = attempts_on(doc, "email")
    expect(mail["state"] == "undelivered", f"{key}: the bounced email is {mail['state']}")
    ctx.show(doc, "2. a hard bounce")
    docs[key] = doc
    key = f"order-created:ee-{run_id}-3"
    result, doc = await _send(ctx, key, recipient, bounced)
    decision = decisions_on(doc, "email")[-1]
    expect(
        decision["outcome"] == "deny" and decision["rule"] == "suppression.hard_bounce",
        f"{key}: the next intent to the bounced address was {decision['outcome']} "
        f"({decision['rule']}), not denied by the bounce",
    )
    expect(not attempts_on(doc, "email"), f"{key}: an attempt was made to a bounced address")
    ctx.say(f"the next intent to the bounced address: denied ({decision['reason']})")
    docs[key] = doc

    # 3. A complaint suppresses its category only.
    complains = f"complain+{run_id}@shop.example"
    key = f"order-created:ee-{run_id}-4"
    result, doc = await _send(ctx, key, recipient, complains, Category.OPERATIONAL)
    expect(result.outcome == "delivered", f"{key}: the workflow says {result.outcome}")
    await ctx.wait_for(
        key,
        "the spam report",
        lambda d: any(o["raw_status"] == "spamreport" for o in d["observations"]),
        timeout=20,
    )
    docs[key] = await ctx.timeline(key)
    key = f"order-created:ee-{run_id}-5"
    result, doc = await _send(ctx, key, recipient, complains, Category.OPERATIONAL)
    decision = decisions_on(doc, "email")[-1]
    expect(
        decision["rule"] == "suppression.complaint",
        f"{key}: an operational message after the complaint was {decision['outcome']} "
        f"({decision['rule']})",
    )
    docs[key] = doc
    key = f"order-created:ee-{run_id}-6"
    result, doc = await _send(ctx, key, recipient, complains, Category.TRANSACTIONAL)
    expect(
        result.outcome == "delivered",
        f"{key}: a transactional message after an operational complaint is {result.outcome}",
    )
    ctx.say("the complaint suppressed operational mail only: a transactional one was delivered")
    docs[key] = doc

    # 4. Every batch again, byte for byte: nothing changes. First every event still to
    # come (the last message's spam report) must have arrived.
    await _quiet(ctx)
    before = {k: _effects(await ctx.timeline(k)) for k in docs}
    batches = await ctx.email_sim("GET", "/_sim/email/batches")
    for index in range(len(batches)):
        await ctx.email_sim("POST", "/_sim/email/replay", {"index": index})
    await _quiet(ctx)
    after = {k: _effects(await ctx.timeline(k)) for k in docs}
    replayed = (await ctx.email_sim("GET", "/_sim/email/batches"))[: len(batches)]
    expect(
        all(b["statuses"][-1] == 204 for b in replayed),
        "the ingress refused a replayed batch; the replay proved nothing",
    )
    expect(before == after, "a replayed event batch changed the ledger")
    ctx.say(f"{len(batches)} event batch(es) replayed byte for byte: nothing changed")
