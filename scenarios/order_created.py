"""`order-created`: a marketplace order alert to an EU seller over email AND SMS at once.

Each channel has its own channel key and attempt token (`<ns>~<key>:email:1`, `<ns>~<key>:sms:1`)
and each attempt records the exact template version and content hash it rendered. An
operator then rolls the template back (activates the previous version): the next order
renders the previous version, while the first order's evidence still names its own.
After the retention window (the PII purge run with a clock far in the future, inside a
transaction this scenario rolls back so it never erases anyone else's data), the
auditor's view still reconstructs both deliveries: template version, content hash,
policy decision and policy version, remote id / Message-ID.
"""

from __future__ import annotations

import asyncio
import importlib
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from domain import keys
from domain.channels import EMAIL, SMS
from domain.principals import Principal, Role
from domain.requests import NotificationRequest, PlanMode
from ledger import timeline
from ledger.models import AuditEvent, TemplateVersionRow
from ledger.templates import activate_template
from scenarios.base import EMAIL_REACHED, DemoContext, ScenarioFailed, attempts_on, expect, suffix

SELLER_PHONE = "+33612345678"
"""A valid French mobile number (phonenumbers: FR, MOBILE); the simulator delivers it."""

TEMPLATE = "order-created"


def _variables(order_id: str) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "first_name": "Camille",
        "total": "EUR 84.90",
        "items": ["Vinyl: Air - Moon Safari", "Poster A2"],
        "tracking_url": f"https://market.example/orders/{order_id}",
    }


def _active_version(ctx: DemoContext) -> int:
    with ctx.client.sessions() as session:
        versions = set(
            session.execute(
                select(TemplateVersionRow.version).where(
                    TemplateVersionRow.key == TEMPLATE,
                    TemplateVersionRow.locale == "en",
                    TemplateVersionRow.active.is_(True),
                )
            ).scalars()
        )
    if len(versions) != 1:
        raise ScenarioFailed(f"template {TEMPLATE!r} has active versions {sorted(versions)}")
    return versions.pop()


MERCHANDISER = Principal("merchandising-lead", Role.OPERATOR)
"""Who rolls the template back and forward in the story: the audit trail names them."""


def _activate(ctx: DemoContext, version: int) -> str | None:
    """Activate `version` as MERCHANDISER; the action its audit event names, if any."""
    with ctx.client.sessions.begin() as session:
        activate_template(session, TEMPLATE, version, locale="en", by=MERCHANDISER)
        return session.execute(
            select(AuditEvent.action)
            .where(
                AuditEvent.subject == f"{TEMPLATE}@v{version}",
                AuditEvent.actor == MERCHANDISER.name,
            )
            .order_by(AuditEvent.id.desc())
            .limit(1)
        ).scalar_one_or_none()


async def _order(ctx: DemoContext, seller: str, order_id: str, email: str) -> dict[str, Any]:
    key = f"order-created:{order_id}"
    ref = await ctx.client.notify(
        NotificationRequest(
            business_key=key,
            recipient_ref=seller,
            template_key=TEMPLATE,
            phone=SELLER_PHONE,
            email=email,
            channels=("email", "sms"),
            mode=PlanMode.ALL,
            variables=_variables(order_id),
        )
    )
    result = await ctx.result(ref.workflow_id, timeout=45)
    expect(
        result.outcome == "delivered",
        f"{key}: expected delivered (SMS receipt, email reached), got {result.outcome}: "
        f"{result.reason}",
    )
    doc = await ctx.timeline(key)
    for channel in ("email", "sms"):
        expect(len(attempts_on(doc, channel)) == 1, f"{key}: expected one {channel} attempt")
    sms, mail = attempts_on(doc, "sms")[0], attempts_on(doc, "email")[0]
    expect(sms["state"] == "delivered", f"{key}: SMS is {sms['state']}, not delivered")
    expect(
        mail["state"] in EMAIL_REACHED,
        f"{key}: email is {mail['state']}, not sent (SMTP 250) or delivered (provider event)",
    )
    # The key in its namespace (the in-process client's: docs/api.md, "How keys are scoped").
    identity = keys.identity(ctx.client.namespace, key)
    expect(
        sms["token"] == f"{identity}:sms:1" and mail["token"] == f"{identity}:email:1",
        f"{key}: channel tokens are {sms['token']} and {mail['token']}",
    )
    return doc


def _evidence(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What an auditor needs per channel, read from the timeline alone."""
    decisions = {d["id"]: d for d in doc["decisions"]}
    out = {}
    for a in doc["attempts"]:
        decision = decisions.get(a["decision_id"], {})
        out[a["channel"]] = {
            "token": a["token"],
            "state": a["state"],
            "template": f"{a['template_key']}@v{a['template_version']}",
            "content_sha256": a["content_sha256"],
            "decision": f"{decision.get('outcome')}:{decision.get('rule')}",
            "policy_version": decision.get("policy_version"),
            "remote_id": a["remote_id"],
            "message_id": a["message_id"],
        }
    return out


async def run(ctx: DemoContext) -> None:
    run_id = suffix()
    seller = f"seller-eu-{run_id}"
    email = f"orders+{run_id}@seller-eu.example"
    for channel in ("sms", "email"):
        ctx.consent(seller, channel)

    current = await asyncio.to_thread(_active_version, ctx)
    expect(current >= 2, f"template {TEMPLATE!r} needs a previous version to roll back to")
    first = await _order(ctx, seller, f"o-77-{run_id}", email)
    ctx.show(first, "order 1")
    for channel, ev in _evidence(first).items():
        expect(
            ev["template"] == f"{TEMPLATE}@v{current}",
            f"order 1 {channel} rendered {ev['template']}, the active version is v{current}",
        )
    message = await ctx.mail_with_id(attempts_on(first, "email")[0]["message_id"])
    expect(message is not None, "the SMTP sink has no message with order 1's Message-ID")

    # The rollback: activate the previous version. History is not touched.
    audited = await asyncio.to_thread(_activate, ctx, current - 1)
    expect(
        audited == "template.rollback",
        f"the rollback's audit event by {MERCHANDISER.name} is {audited}, not template.rollback",
    )
    ctx.say(f"template {TEMPLATE} rolled back by {MERCHANDISER.name}: v{current} -> v{current - 1}")
    try:
        second = await _order(ctx, seller, f"o-78-{run_id}", email)
    finally:
        # Put the catalogue back as it was, so later runs start from the same state.
        await asyncio.to_thread(_activate, ctx, current)
    ctx.show(second, "order 2 (after the rollback)")
    for channel, ev in _evidence(second).items():
        expect(
            ev["template"] == f"{TEMPLATE}@v{current - 1}",
            f"order 2 {channel} rendered {ev['template']}, expected the rolled-back v{current - 1}",
        )
    again = await ctx.timeline(first["intent"]["business_key"])
    expect(
        _evidence(again) == _evidence(first),
        "order 1's evidence changed after the rollback",
    )

    await _after_retention(ctx, [first, second])


async def _after_retention(ctx: DemoContext, docs: list[dict[str, Any]]) -> None:
    try:
        retention = importlib.import_module("ledger.retention")
    except ModuleNotFoundError as err:
        if err.name != "ledger.retention":
            raise
        ctx.skip("retention step: ledger.retention (purge) does not exist yet")
        return
    purge = getattr(retention, "purge", None)
    if purge is None:
        raise ScenarioFailed("ledger.retention has no purge(session, *, now)")
    later = datetime.now(UTC) + timedelta(days=ctx.retention_days + 3650)

    def audit() -> tuple[Any, list[dict[str, Any]]]:
        # One transaction, rolled back: the purge sees every row as past its window, the
        # auditor reads the result, and nobody else's readable data is lost.
        with ctx.client.sessions() as session:
            try:
                report = purge(session, now=later)
                session.flush()
                return report, [
                    timeline.timeline(session, d["intent"]["business_key"]) for d in docs
                ]
            finally:
                session.rollback()

    report, purged = await asyncio.to_thread(audit)
    ctx.say(
        f"retention purge as of {later.date()} (rolled back afterwards): PII of "
        f"{report.intents_purged} intent(s) and {report.attempts_purged} attempt(s) removed, "
        f"{report.held} on legal hold"
    )
    for before, after in zip(docs, purged, strict=True):
        key = before["intent"]["business_key"]
        if not ctx.as_json:
            ctx.show(after, f"{key}: the auditor's view after the retention window")
        for a in after["attempts"]:
            expect(
                not a["pii_readable"],
                f"{key}: {a['channel']} attempt still has a readable destination after the "
                "purge (ledger.retention.purge did not remove it)",
            )
        expect(
            _evidence(after) == _evidence(before),
            f"{key}: the purge changed the routing evidence: {_evidence(after)}",
        )
        ev = _evidence(after)
        for channel in ("sms", "email"):
            e = ev[channel]
            expect(
                e["content_sha256"] and e["policy_version"] and e["decision"].startswith("allow"),
                f"{key}: {channel} evidence incomplete after the purge: {e}",
            )
        expect(ev[SMS.name]["remote_id"], f"{key}: the SMS remote id is gone after the purge")
        expect(ev[EMAIL.name]["message_id"], f"{key}: the Message-ID is gone after the purge")
    check = await ctx.timeline(docs[0]["intent"]["business_key"])
    if not all(a["pii_readable"] for a in check["attempts"]):
        ctx.say("note: the purge committed on its own; the rollback did not undo it")
