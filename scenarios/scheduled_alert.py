"""`scheduled-alert`: fintech seller alerts scheduled for a send-at, then cancelled.

- Alert A is cancelled before its send-at: no policy decision, no attempt, nothing reaches
  the carrier; the timeline says cancelled.
- Alert B is cancelled after it was submitted (simulator fault `never_resolves`: the
  carrier takes it and never reports a final status). The cancel stops the polls and
  closes the workflow; the message is not recalled and the ledger says so; the carrier
  saw exactly one submission.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import EventType

from domain.channels import SMS
from domain.principals import Principal, Role
from domain.requests import NotificationRequest
from scenarios.base import (
    DemoContext,
    expect,
    parse_at,
    random_uk_mobile,
    suffix,
)

NEVER_RESOLVES = "+447400000008"


def _request(key: str, seller: str, phone: str, send_at: datetime) -> NotificationRequest:
    return NotificationRequest(
        business_key=key,
        recipient_ref=seller,
        template_key="scheduled-alert",
        phone=phone,
        send_at=send_at,
        variables={"title": "Payout of EUR 1,240.00 to your account", "at": "09:00"},
    )


async def _cancelled_before_send_at(ctx: DemoContext, seller: str, run_id: str) -> None:
    key = f"scheduled-alert:{seller}:payout-a-{run_id}"
    send_at = datetime.now(UTC) + timedelta(seconds=60)
    ref = await ctx.client.notify(_request(key, seller, random_uk_mobile(), send_at))
    # The operator sees it waiting for its send-at, then cancels it.
    await ctx.wait_phase(ref.workflow_id, ("scheduled",))
    cancel = await ctx.client.cancel(
        key, by=Principal("seller-support", Role.OPERATOR), reason="payout reversed"
    )
    expect(cancel.accepted, f"{key}: the cancel was refused: {cancel.message}")
    result = await ctx.result(ref.workflow_id, timeout=20)
    doc = await ctx.timeline(key)
    ctx.show(doc, "alert A: cancelled before send-at")
    expect(result.outcome == "cancelled", f"{key}: the workflow says {result.outcome}")
    expect(doc["intent"]["state"] == "cancelled", f"{key}: ledger says {doc['intent']['state']}")
    expect(not doc["attempts"], f"{key}: an attempt exists although it was cancelled in time")
    expect(not doc["decisions"], f"{key}: a policy decision was made before send-at")
    expect(datetime.now(UTC) < send_at, f"{key}: the check ran after send-at; it proves nothing")
    closed = ", ".join(cancel.closed) or "nothing"
    ctx.say(f"alert A: cancel closed {closed} before send-at; no decision, no attempt")


async def _cancelled_after_submission(ctx: DemoContext, seller: str, run_id: str) -> None:
    key = f"scheduled-alert:{seller}:payout-b-{run_id}"
    send_at = datetime.now(UTC) + timedelta(seconds=2)
    ref = await ctx.client.notify(_request(key, seller, NEVER_RESOLVES, send_at))
    doc = await ctx.wait_for(
        key,
        "the submission to the carrier",
        lambda d: any(a["remote_id"] for a in d["attempts"]),
        timeout=30,
    )
    attempt = doc["attempts"][0]
    token = attempt["token"]
    expect(
        parse_at(attempt["prepared_at"]) >= send_at,  # type: ignore[operator]
        f"{key}: the attempt was prepared before send-at",
    )
    cancel = await ctx.client.cancel(
        key, by=Principal("seller-support", Role.OPERATOR), reason="payout reversed"
    )
    cancelled_at = datetime.now(UTC)
    in_flight = ", ".join(cancel.in_flight) or "none"
    ctx.say(f"alert B: cancel after submission -> {cancel.message} (in flight: {in_flight})")
    expect(cancel.accepted, f"{key}: the cancel was refused: {cancel.message}")
    expect(token in cancel.in_flight, f"{key}: the cancel does not list {token} as in flight")
    expect("not recalled" in cancel.message, f"{key}: the cancel answer claims {cancel.message!r}")
    result = await ctx.result(ref.workflow_id, timeout=20)

    # Polls stop: no poll is scheduled after the cancel, and the workflow closed well before
    # its polling horizon.
    handle = ctx.handle(ref.workflow_id)
    polls_after = 0
    seen_cancel = False
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            seen_cancel = True
        if (
            seen_cancel
            and event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name
            == SMS.poll_activity
        ):
            polls_after += 1
    expect(seen_cancel, f"{key}: the cancel update is not in the workflow history")
    expect(polls_after == 0, f"{key}: {polls_after} poll(s) were scheduled after the cancel")
    expect(
        (datetime.now(UTC) - cancelled_at).total_seconds() < 20,
        f"{key}: the workflow kept running after the cancel",
    )

    doc = await ctx.timeline(key)
    ctx.show(doc, "alert B: cancelled after submission")
    expect(doc["intent"]["cancelled_at"], f"{key}: the cancel is not recorded on the intent")
    expect(
        doc["intent"]["state"] != "cancelled",
        f"{key}: the ledger says `cancelled` for a message the carrier accepted "
        "(that would claim it was recalled)",
    )
    state = doc["attempts"][0]["state"]
    expect(
        state in ("submitted", "sent", "unknown"),
        f"{key}: the accepted attempt reads {state!r}",
    )
    action = [a for a in doc["operator_actions"] if a["action"] == "cancel"][-1]
    note = str((action["detail"] or {}).get("note", ""))
    expect("not recalled" in note, f"{key}: the ledger's cancel record says {note!r}")
    made, requested = await ctx.submissions(token)
    expect(made == 1 and requested == 1, f"{key}: {made} submissions ({requested} requests)")
    ctx.say(
        f"alert B: result {result.outcome}; polls stopped; attempt stays {state}; "
        "the ledger says it was not recalled"
    )


async def run(ctx: DemoContext) -> None:
    run_id = suffix()
    seller = f"seller-fin-{run_id}"
    ctx.consent(seller, "sms")
    await asyncio.gather(
        _cancelled_before_send_at(ctx, seller, run_id),
        _cancelled_after_submission(ctx, seller, run_id),
    )
