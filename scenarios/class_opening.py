"""`class-opening`: the 18:00:00 race from the waitlist story.

A seat opens in class c-9081 for member m-1842. The carrier accepts the SMS but its answer
is lost (simulator fault `accept_then_timeout`: the 201 is withheld past the adapter's
10 s read timeout). The signed delivery receipt reaches the ingress first (~0.7 s); the
worker records `unknown` when its read times out (~10 s) and reconciles by lookup instead
of sending again. An operator then cancels because the seat filled (the story's "+60 s",
compressed to right after the workflow reported delivered).

Outcome: `delivered` stands; the late `unknown` is kept as evidence (`applied = false`);
the cancel is recorded with no claim of recall; the simulator counted exactly one
submission for the attempt token.
"""

from __future__ import annotations

from domain.principals import Principal, Role
from domain.requests import NotificationRequest
from scenarios.base import DemoContext, expect, parse_at, suffix

ACCEPT_THEN_TIMEOUT = "+447400000001"
"""Simulator fault number: message created and delivered, the create response withheld."""

VARIABLES = {
    "class_name": "Spin (c-9081)",
    "starts_at": "18:30",
    "hold_until": "18:15",
    "booking_url": "https://studio.example/c/9081",
}


async def run(ctx: DemoContext) -> None:
    key = f"class-opening:c-9081:m-1842.{suffix()}"
    recipient = "m-1842"
    ctx.consent(recipient, "sms")
    ref = await ctx.client.notify(
        NotificationRequest(
            business_key=key,
            recipient_ref=recipient,
            template_key="class-opening",
            phone=ACCEPT_THEN_TIMEOUT,
            variables=VARIABLES,
        )
    )
    ctx.say(f"18:00:00 seat opened: intent {ref.intent_id}; the carrier's answer will be lost")
    result = await ctx.result(ref.workflow_id, timeout=60)
    expect(
        result.outcome == "delivered",
        f"expected delivered (the receipt beat the lost answer), the workflow said "
        f"{result.outcome}: {result.reason}",
    )

    # +60 s in the story: the seat filled, an operator presses cancel.
    cancel = await ctx.client.cancel(
        key, by=Principal("front-desk", Role.OPERATOR), reason="seat filled"
    )
    ctx.say(f"operator cancel: {cancel.message}")
    doc = await ctx.timeline(key)
    ctx.show(doc)

    expect(len(doc["attempts"]) == 1, f"expected one attempt, found {len(doc['attempts'])}")
    attempt = doc["attempts"][0]
    token = attempt["token"]
    expect(attempt["state"] == "delivered", f"attempt state is {attempt['state']}, not delivered")
    expect(doc["intent"]["state"] == "delivered", "a cancel after delivery must not hide it")
    expect(doc["intent"]["cancelled_at"], "the cancel was not recorded on the intent")

    observations = [o for o in doc["observations"] if o["attempt"] == token]
    delivered = [o for o in observations if o["normalized_status"] == "delivered" and o["applied"]]
    unknown = [o for o in observations if o["normalized_status"] == "unknown"]
    expect(delivered, "no applied `delivered` observation (the receipt) is in the ledger")
    expect(
        unknown,
        "no `unknown` observation: the lost answer was not recorded as ambiguous "
        "(is the adapter's read timeout still shorter than the simulator's 30 s hang?)",
    )
    expect(
        all(not o["applied"] for o in unknown),
        "an `unknown` observation was applied over `delivered` (state went backward)",
    )
    first_delivered = min(parse_at(o["observed_at"]) for o in delivered)  # type: ignore[type-var]
    expect(
        any(parse_at(o["observed_at"]) > first_delivered for o in unknown),  # type: ignore[operator]
        "the `unknown` observation is not later than the receipt; the race did not happen",
    )

    made, requested = await ctx.submissions(token)
    expect(
        made == 1 and requested == 1,
        f"the simulator saw {made} message(s) from {requested} create request(s) for "
        f"{token}; exactly one submission expected",
    )

    cancels = [a for a in doc["operator_actions"] if a["action"] == "cancel"]
    expect(cancels, "the operator's cancel is not in the ledger")
    note = str((cancels[-1]["detail"] or {}).get("note", ""))
    expect(cancels[-1]["outcome"] == "accepted", "the cancel was not accepted")
    for text in (note, cancel.message):
        expect(
            "nothing recalled" in text or "not recalled" in text,
            f"the cancel's record does not say that nothing was recalled: {text!r}",
        )
    ctx.say(
        f"exactly one submission ({made}); delivered stands; "
        f"{len(unknown)} late `unknown` kept as evidence; cancel recorded, nothing recalled"
    )
