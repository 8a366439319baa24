"""`sms`: one SMS intent on the happy path: authorize, prepare, submit, signed receipt."""

from __future__ import annotations

from scenarios.base import DemoContext, expect, suffix

DEMO_PHONE = "+447400000100"
"""A UK mobile number the carrier simulator delivers normally (docs/simulator.md)."""


async def run(ctx: DemoContext) -> None:
    run_id = suffix()
    key = f"demo:d-{run_id}"
    recipient = f"demo-member-{run_id}"
    ref = await ctx.send_demo_sms(key, recipient, DEMO_PHONE)
    result = await ctx.result(ref.workflow_id)
    doc = await ctx.timeline(key)
    ctx.show(doc)
    expect(result.outcome == "delivered", f"expected delivered, the workflow said {result.outcome}")
    expect(doc["intent"]["state"] == "delivered", "the ledger does not say delivered")
