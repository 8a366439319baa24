"""`template-rollout`: an adopter's own template version, reviewed, sent and rolled back.

A clinic keeps its appointment reminder (a template Herald does not package) in its own
catalog file and imports a new version from its CI/CD, as principal `clinic-ci`. The
story activates a version of the demo policy whose ``[review]`` names that key, so the new
version may not become active until a second principal approves it: activating it at once
is refused, and so is `clinic-ci`'s approval of its own version. The content lead
previews it (the hash an attempt with the same variables records), approves it and
activates it; a reminder goes out by SMS and email through the simulators with the new
version. The content lead rolls back (activates the earlier version); the next reminder
renders the earlier one, while the first reminder's evidence (each attempt's template
version and the intent's template pins, as `herald show` reads them) still names the
version it was sent with. The audit trail names who did each step.

Template versions are immutable and kept for ever, so each run imports the next version
number (and, on a ledger that has none, first the clinic's earlier version, approved and
activated the same way); the story ends with the earlier version active, where it began.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from domain import channels
from domain.destinations import region_of
from domain.preview import Preview
from domain.principals import Principal, Role
from domain.requests import NotificationRequest, PlanMode
from domain.review import ReviewRefused
from ledger.models import AuditEvent, TemplateVersionRow
from ledger.templates import ContentFile, Imported, activate_template, import_templates
from ledger.version_review import approve_template_version, preview_template
from scenarios.base import (
    EMAIL_REACHED,
    DemoContext,
    ScenarioFailed,
    attempts_on,
    demo_policy_variant,
    expect,
    policy_active,
    random_uk_mobile,
    suffix,
)

KEY = "appointment-reminder"
"""The adopter's template: not in Herald's package (templates/catalog.toml)."""
POLICY_NAME = "demo-template-review"
REVIEWED = "demo-template-review-2026-12-08.1"
"""The demo policy with a ``[review]`` table naming KEY (nothing else differs)."""
AUTHOR = Principal("clinic-ci", Role.ADMIN)
"""The clinic's CI/CD credential, which imports the catalog."""
REVIEWER = Principal("clinic-content-lead", Role.ADMIN)
"""The second person: reviews, activates and rolls back."""

EARLIER = '''
[[template]]
key = "appointment-reminder"
version = @VERSION@
channel = "sms"
locale = "en"
body = "Hi {{ first_name }}, a reminder of your appointment at {{ clinic }} on {{ starts_on }}."

[template.variables]
first_name = "text"
clinic = "text"
starts_on = "date"

[[template]]
key = "appointment-reminder"
version = @VERSION@
channel = "email"
locale = "en"
subject = "Your appointment on {{ starts_on }}"
body = """
Hello {{ first_name }},

A reminder of your appointment at {{ clinic }} on {{ starts_on }}.
"""

[template.variables]
first_name = "text"
clinic = "text"
starts_on = "date"
'''
"""The clinic's catalog as it stood: the version an intent renders after the rollback."""

NEW = '''
[[template]]
key = "appointment-reminder"
version = @VERSION@
channel = "sms"
locale = "en"
body = """{{ first_name }}, see you at {{ clinic }} on {{ starts_on }}
{%- if room is defined %}, room {{ room }}{% endif %}. Please bring your insurance card."""

[template.variables]
first_name = "text"
clinic = "text"
starts_on = "date"
room = { type = "text", optional = true }

[[template]]
key = "appointment-reminder"
version = @VERSION@
channel = "email"
locale = "en"
subject = "See you on {{ starts_on }} at {{ clinic }}"
body = """
Hello {{ first_name }},

See you at {{ clinic }} on {{ starts_on }}{% if room is defined %}, room {{ room }}{% endif %}.
Please bring your insurance card.
"""

[template.variables]
first_name = "text"
clinic = "text"
starts_on = "date"
room = { type = "text", optional = true }
'''
"""The new version the clinic's CI imports: another wording and an optional variable."""

Step = Callable[[Session], None]
"""One review or activation step, run in a transaction of its own."""

VARIABLES: dict[str, Any] = {
    "first_name": "Ana",
    "clinic": "Riverside Clinic",
    "starts_on": "2026-12-15",
    "room": "4B",
}


def review_policy() -> str:
    """The demo policy whose ``[review]`` covers KEY: its versions need a second principal."""
    return demo_policy_variant(
        REVIEWED,
        f"Demo policy; versions of template {KEY} need a second principal's approval.",
        replace={},
        append=f'\n[review]\ntemplates = ["{KEY}"]\n',
    )


def catalog(text: str, version: int) -> ContentFile:
    """The clinic's catalog file with `text` as version `version`."""
    return ContentFile(f"clinic/{KEY}.toml", text.replace("@VERSION@", str(version)))


async def run(ctx: DemoContext) -> None:
    with policy_active(ctx.client, review_policy(), name=POLICY_NAME) as before:
        ctx.say(f"policy {REVIEWED}: the demo's, whose [review] names template {KEY}")
        await _story(ctx)
    ctx.say(f"policy {before} active again")


async def _story(ctx: DemoContext) -> None:
    run_id = suffix()
    recipient = f"patient-{run_id}"
    phone, address = random_uk_mobile(), f"ana.{run_id}@patients.example"
    for channel in ("sms", "email"):
        ctx.consent(recipient, channel)

    earlier, latest = await asyncio.to_thread(_versions, ctx)
    if earlier is None:
        # A ledger that never had the clinic's template: its first version goes through
        # the same review, so there is an approved one to roll back to.
        earlier = latest + 1
        await asyncio.to_thread(_introduce, ctx, EARLIER, earlier)
        ctx.say(f"first import: {KEY} v{earlier}, approved by {REVIEWER.name} and activated")
        latest = earlier
    new = latest + 1
    mark = await asyncio.to_thread(_last_audit_id, ctx)

    done = await asyncio.to_thread(_import, ctx, NEW, new)
    expect(
        done.recorded == [f"{KEY} v{new} (sms/en)", f"{KEY} v{new} (email/en)"],
        f"the import recorded {done.recorded} (unchanged: {done.unchanged}), not v{new}'s two "
        "channels: did another run import the same version at the same moment?",
    )
    ctx.say(f"{AUTHOR.name} imported {KEY} v{new} (sms/en, email/en); v{earlier} stays active")

    what = f"activating v{new} before review"
    early = await asyncio.to_thread(_refused, ctx, what, lambda s: _activate(s, new, REVIEWER))
    expect("is not approved" in early, f"{what}: {early}")
    ctx.say(f"{what}: refused ({early})")
    what = f"{AUTHOR.name} approving its own version"
    own = await asyncio.to_thread(_refused, ctx, what, lambda s: _approve(s, new, AUTHOR))
    expect("its author cannot approve it" in own, f"{what}: {own}")
    ctx.say(f"{what}: refused ({own})")

    shown = await asyncio.to_thread(_preview, ctx, new)
    expect("room 4B" in shown.text, f"the preview does not render the new wording: {shown.text}")
    ctx.say(
        f"{REVIEWER.name} previews v{new} (sms): {shown.segments} segment(s), {shown.encoding}, "
        f"sha256 {shown.sha256[:12]}"
    )
    await asyncio.to_thread(_commit, ctx, lambda s: _approve(s, new, REVIEWER))
    await asyncio.to_thread(_commit, ctx, lambda s: _activate(s, new, REVIEWER))
    ctx.say(f"{REVIEWER.name} approved v{new} and activated it")

    first = await _remind(ctx, f"{KEY}:a-1-{run_id}", recipient, phone, address)
    ctx.show(first, f"reminder 1 (v{new} active)")
    expect(_versions_sent(first) == {"sms": new, "email": new}, _sent(first, new))
    expect(_pins(first) == {"sms": new, "email": new}, f"reminder 1 pinned {_pins(first)}")
    sms = attempts_on(first, "sms")[0]
    expect(
        sms["content_sha256"] == shown.sha256,
        f"reminder 1's SMS hash {sms['content_sha256']} is not the previewed {shown.sha256}",
    )
    ctx.say(f"reminder 1 sent v{new} on both channels; its SMS is the text the reviewer saw")

    await asyncio.to_thread(_commit, ctx, lambda s: _activate(s, earlier, REVIEWER))
    ctx.say(f"{REVIEWER.name} rolled {KEY} back: v{new} -> v{earlier}")
    second = await _remind(ctx, f"{KEY}:a-2-{run_id}", recipient, phone, address)
    ctx.show(second, f"reminder 2 (after the rollback to v{earlier})")
    expect(_versions_sent(second) == {"sms": earlier, "email": earlier}, _sent(second, earlier))
    expect(
        _pins(second) == {"sms": earlier, "email": earlier}, f"reminder 2 pinned {_pins(second)}"
    )

    again = await ctx.timeline(first["intent"]["business_key"])
    expect(
        (_versions_sent(again), _pins(again), _hashes(again))
        == (_versions_sent(first), _pins(first), _hashes(first)),
        f"reminder 1's evidence changed after the rollback: sent {_versions_sent(again)}, "
        f"pinned {_pins(again)}",
    )
    ctx.say(f"reminder 1 still names v{new} (attempts and pins); reminder 2 rendered v{earlier}")

    trail = await asyncio.to_thread(_audit_trail, ctx, mark)
    expected = [
        ("template.import", f"{KEY}@v{new}", AUTHOR.name),
        ("template.preview", f"{KEY}@v{new}", REVIEWER.name),
        ("template.approve", f"{KEY}@v{new}", REVIEWER.name),
        ("template.activate", f"{KEY}@v{new}", REVIEWER.name),
        ("template.rollback", f"{KEY}@v{earlier}", REVIEWER.name),
    ]
    expect(trail == expected, f"the audit trail reads {trail}, expected {expected}")
    for action, subject, actor in trail:
        ctx.say(f"audit: {action} {subject} by {actor}")


# --- the ledger's side ---------------------------------------------------------------


def _versions(ctx: DemoContext) -> tuple[int | None, int]:
    """KEY's active version (None when it has none) and its highest recorded one (0)."""
    c = TemplateVersionRow
    with ctx.client.sessions() as session:
        active = set(
            session.execute(select(c.version).where(c.key == KEY, c.active.is_(True))).scalars()
        )
        latest = session.execute(select(func.max(c.version)).where(c.key == KEY)).scalar()
    if len(active) > 1:
        raise ScenarioFailed(f"template {KEY!r} has active versions {sorted(active)}")
    return (active.pop() if active else None), latest or 0


def _import(ctx: DemoContext, text: str, version: int) -> Imported:
    with ctx.client.sessions.begin() as session:
        return import_templates(session, [catalog(text, version)], by=AUTHOR)


def _introduce(ctx: DemoContext, text: str, version: int) -> None:
    """Import `version`, approve it by the reviewer and activate it."""
    _import(ctx, text, version)
    _commit(ctx, lambda s: _approve(s, version, REVIEWER))
    _commit(ctx, lambda s: _activate(s, version, REVIEWER))


def _approve(session: Session, version: int, by: Principal) -> None:
    approve_template_version(session, KEY, version, by=by, at=datetime.now(UTC))


def _activate(session: Session, version: int, by: Principal) -> None:
    activate_template(session, KEY, version, by=by)


def _commit(ctx: DemoContext, step: Step) -> None:
    with ctx.client.sessions.begin() as session:
        step(session)


def _refused(ctx: DemoContext, what: str, step: Step) -> str:
    """Why `step` (`what` it does) was refused by the review rules; ScenarioFailed when it
    was not."""
    try:
        _commit(ctx, step)
    except ReviewRefused as err:
        return str(err)
    raise ScenarioFailed(f"{what} was accepted; the review rules refuse it")


def _preview(ctx: DemoContext, version: int) -> Preview:
    with ctx.client.sessions.begin() as session:
        return preview_template(
            session, KEY, version, channel="sms", locale="en", variables=VARIABLES,
            region=region_of("GB"), category="transactional", by=REVIEWER, at=datetime.now(UTC),
        )  # fmt: skip


def _last_audit_id(ctx: DemoContext) -> int:
    with ctx.client.sessions() as session:
        return session.execute(select(func.max(AuditEvent.id))).scalar() or 0


def _audit_trail(ctx: DemoContext, after: int) -> list[tuple[str, str, str]]:
    """The audit events on KEY's versions since `after`, in order, each step once (an
    import records one event per channel)."""
    with ctx.client.sessions() as session:
        rows = session.execute(
            select(AuditEvent.action, AuditEvent.subject, AuditEvent.actor)
            .where(AuditEvent.id > after, AuditEvent.subject.startswith(f"{KEY}@"))
            .order_by(AuditEvent.id)
        ).all()
    return list(dict.fromkeys((r.action, r.subject, r.actor) for r in rows))


# --- the intents -----------------------------------------------------------------------


async def _remind(
    ctx: DemoContext, key: str, recipient: str, phone: str, address: str
) -> dict[str, Any]:
    """One reminder by SMS and email at once, naming no version: intake pins the active one."""
    ref = await ctx.client.notify(
        NotificationRequest(
            business_key=key,
            recipient_ref=recipient,
            template_key=KEY,
            phone=phone,
            email=address,
            channels=("sms", "email"),
            mode=PlanMode.ALL,
            variables=VARIABLES,
        )
    )
    result = await ctx.result(ref.workflow_id, timeout=45)
    expect(result.outcome == "delivered", f"{key}: {result.outcome}: {result.reason}")
    doc = await ctx.timeline(key)
    states = {a["channel"]: a["state"] for a in doc["attempts"]}
    expect(
        len(doc["attempts"]) == 2
        and states.get(channels.SMS.name) == "delivered"
        and states.get(channels.EMAIL.name) in EMAIL_REACHED,
        f"{key}: expected one delivered SMS and one email that reached, got {states}",
    )
    return doc


def _versions_sent(doc: dict[str, Any]) -> dict[str, int]:
    return {a["channel"]: a["template_version"] for a in doc["attempts"]}


def _pins(doc: dict[str, Any]) -> dict[str, int]:
    pins = doc["intent"]["template_pins"] or {}
    return {channel: pin["version"] for channel, pin in pins.items()}


def _hashes(doc: dict[str, Any]) -> dict[str, str]:
    return {a["channel"]: a["content_sha256"] for a in doc["attempts"]}


def _sent(doc: dict[str, Any], version: int) -> str:
    return (
        f"{doc['intent']['business_key']} rendered {_versions_sent(doc)}, expected v{version} "
        "on both channels"
    )
