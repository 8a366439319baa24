"""`ambiguous-settled`: an ambiguous send ends in a person's decision, then a resend.

The carrier accepts an SMS and never reports on it (simulator fault `never_resolves`,
limited to the first submission). At the polling horizon the attempt ends `unknown`; the
workflow stays open for a settlement and files the review item at once. A resend is
refused while the outcome is unknown. An operator checks with the carrier (it still holds
the message as `sent`, which answers nothing), settles the attempt as not delivered under
`carrier-confirmed-not-delivered` (a rule that needs that fresh lookup and allows a
resend), and approves the resend; the second attempt is delivered.

The story activates a version of the demo policy whose horizon is HORIZON_SECONDS instead
of 60 and re-activates the one that was active afterwards: how long the carrier stays
silent proves nothing, and waiting out the demo's minute was most of the story's time.

Outcome: one intent, two attempts, exactly one delivered message; the settlement is an
operator observation with its rule and policy version; the review item is closed by the
settlement; the simulator counted one submission per attempt token.
"""

from __future__ import annotations

from domain.principals import Principal, Role
from scenarios.base import (
    DemoContext,
    demo_policy_variant,
    expect,
    policy_active,
    random_uk_mobile,
    suffix,
)

RULE = "carrier-confirmed-not-delivered"
HORIZON_SECONDS = 10
"""The story's polling horizon: long enough for a few polls (1-5 s apart), short enough
that the story does not wait out the demo policy's minute."""
POLICY_NAME = "demo-short-horizon"
SHORT_HORIZON = "demo-short-horizon-2026-12-08.1"


def short_horizon_policy() -> str:
    """The demo policy with a polling horizon of HORIZON_SECONDS (the browser tier's settle
    story uses it too)."""
    return demo_policy_variant(
        SHORT_HORIZON,
        f"Demo policy; SMS polling horizon {HORIZON_SECONDS} s.",
        replace={"sms_poll_horizon_seconds = 60": f"sms_poll_horizon_seconds = {HORIZON_SECONDS}"},
    )


async def run(ctx: DemoContext) -> None:
    with policy_active(ctx.client, short_horizon_policy(), name=POLICY_NAME) as before:
        ctx.say(f"policy {SHORT_HORIZON}: the demo's, with a {HORIZON_SECONDS} s polling horizon")
        await _story(ctx)
    ctx.say(f"policy {before} active again")


async def _story(ctx: DemoContext) -> None:
    run_id = suffix()
    key = f"demo:ambiguous-{run_id}"
    recipient = f"demo-member-{run_id}"
    phone = random_uk_mobile()
    operator = Principal("night-ops", Role.OPERATOR)
    await ctx.sim_script(phone, "never_resolves", count=1)
    ref = await ctx.send_demo_sms(key, recipient, phone)
    ctx.say(f"intent {ref.intent_id}: the carrier will accept the SMS and never report on it")
    doc = await ctx.wait_for(
        key,
        "the polling horizon's unknown and a settlement window",
        lambda d: d["intent"]["awaiting"] == "settlement",
        timeout=120,
    )
    first = doc["attempts"][0]
    expect(first["state"] == "unknown", f"expected the first attempt unknown, not {first['state']}")
    items = [r for r in doc["review_items"] if r["kind"] == "unknown_outcome"]
    expect(
        len(items) == 1 and items[0]["resolved_at"] is None,
        "the horizon verdict did not file its review item at once",
    )
    ctx.say(
        f"unknown at the horizon; waiting for a settlement until {doc['intent']['awaiting_until']}"
    )

    early = await ctx.client.approve_resend(
        key, channel="sms", by=operator, reason="customer says nothing came"
    )
    expect(not early.accepted, "a resend was accepted before any settlement")
    ctx.say(f"resend before settling: refused ({early.message})")

    looked = await ctx.client.lookup(key, channel="sms", by=operator)
    expect(looked.raw_status == "sent", f"the carrier lookup said {looked.raw_status!r}")
    ctx.say(f"checked with the carrier: {looked.message}")
    settled = await ctx.client.settle(
        key,
        channel="sms",
        rule=RULE,
        reason="carrier shows it stuck at sent for over a minute; treat as lost",
        by=operator,
    )
    expect(settled.accepted, f"the settlement was refused: {settled.message}")
    ctx.say(f"settled: {settled.message}")
    resend = await ctx.client.approve_resend(
        key, channel="sms", by=operator, reason="settled as not delivered"
    )
    expect(resend.accepted, f"the resend after the settlement was refused: {resend.message}")

    result = await ctx.result(ref.workflow_id, timeout=120)
    doc = await ctx.timeline(key)
    ctx.show(doc)
    expect(result.outcome == "delivered", f"expected delivered, the workflow said {result.outcome}")
    attempts = doc["attempts"]
    expect(
        [(a["number"], a["state"]) for a in attempts] == [(1, "undelivered"), (2, "delivered")],
        f"expected #1 settled undelivered and #2 delivered, got "
        f"{[(a['number'], a['state']) for a in attempts]}",
    )
    expect(attempts[0]["settled_rule"] == RULE, "the first attempt does not name its rule")
    settlement = [o for o in doc["observations"] if o["source"] == "operator"]
    expect(
        len(settlement) == 1 and settlement[0]["verdict"] == "settles_unknown",
        "the settlement is not one operator observation that settled the unknown",
    )
    actions = [(a["action"], a["outcome"], a["operator"]) for a in doc["operator_actions"]]
    expect(("settle", "accepted", "night-ops") in actions, f"no accepted settle: {actions}")
    expect(
        ("approve-resend", "refused", "night-ops") in actions
        and ("approve-resend", "accepted", "night-ops") in actions,
        f"expected a refused then an accepted resend: {actions}",
    )
    item = next(r for r in doc["review_items"] if r["kind"] == "unknown_outcome")
    expect(
        item["resolved_at"] is not None and RULE in (item["resolution_note"] or ""),
        "the review item was not closed by the settlement",
    )
    for a in attempts:
        created, _ = await ctx.submissions(a["token"])
        expect(created == 1, f"{a['token']}: the carrier counted {created} submissions, not 1")
    ctx.say("one intent, two attempts, one delivered message; the review item closed")
