"""`session-report`: a gaming session report emailed as an immutable attachment.

The report is written once to the content-addressed artifact store and registered in the
ledger (`artifact`: sha256, size, media type, location); the intent names it by hash and
is email-only. The email worker verifies the bytes against the hash before it connects
to SMTP; the SMTP sink receives an attachment with the same SHA-256. The report never
enters the SMS path: intake refuses an SMS-only plan with an attachment, and the intent
has no SMS decision, attempt or carrier submission. A second report whose stored file
was altered after registration is refused before sending (the hash check), and nothing
with its Message-ID reaches the sink.
"""

from __future__ import annotations

import asyncio
import csv
import io
import os
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage

from domain.channels import EMAIL
from domain.principals import Principal, Role
from domain.requests import NotificationRequest
from ledger.artifacts import POSTGRES_LOCATION, ArtifactRef, open_store, register
from ledger.errors import InvalidRequest
from ledger.models import ArtifactContent
from scenarios.base import EMAIL_REACHED, DemoContext, ScenarioFailed, expect, sha256_hex, suffix
from transports.email import message_id_for

MEDIA_TYPE = "text/csv"


def _report(session_id: str, ended: datetime) -> bytes:
    rows = [
        ("session_id", "player", "table", "hands", "net_chips", "ended_at"),
        (session_id, "p-5521", "holdem-6max-12", "184", "+1320", ended.isoformat()),
        (session_id, "p-0917", "holdem-6max-12", "184", "-410", ended.isoformat()),
        (session_id, "p-3308", "holdem-6max-12", "171", "-910", ended.isoformat()),
    ]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue().encode()


def _store_and_register(ctx: DemoContext, data: bytes, filename: str) -> ArtifactRef:
    # The store the stack's worker reads (HERALD_ARTIFACT_STORE), as an upload would.
    store = open_store(ctx.artifact_store, data_path=ctx.data_path, sessions=ctx.client.sessions)
    ref = store.put(data, media_type=MEDIA_TYPE, filename=filename)
    with ctx.client.sessions.begin() as session:
        register(session, ref)
    return ref


def _tamper(ctx: DemoContext, ref: ArtifactRef) -> None:
    """Change the stored bytes behind the ledger's back (same size, different content)."""
    if ref.location == POSTGRES_LOCATION:
        with ctx.client.sessions.begin() as session:
            row = session.get(ArtifactContent, ref.sha256)
            assert row is not None
            first = bytes(row.content)[:1]
            row.content = (b"X" if first != b"X" else b"Y") + bytes(row.content)[1:]
        return
    path = ref.location
    os.chmod(path, 0o644)
    with open(path, "r+b") as handle:
        first = handle.read(1)
        handle.seek(0)
        handle.write(b"X" if first != b"X" else b"Y")
    os.chmod(path, 0o444)


def _request(
    key: str, recipient: str, address: str, sha256: str, session_id: str
) -> NotificationRequest:
    now = datetime.now(UTC)
    return NotificationRequest(
        business_key=key,
        recipient_ref=recipient,
        template_key="session-report",
        email=address,
        channels=("email",),
        country="MT",
        artifact_sha256=sha256,
        variables={
            "session_id": session_id,
            "started_at": (now - timedelta(hours=3)).strftime("%Y-%m-%d %H:%M"),
            "ended_at": now.strftime("%Y-%m-%d %H:%M"),
            "intents": 3,
            "delivered": 3,
            "fell_back": 0,
            "unknown": 0,
            "blocked": 0,
            "report_url": f"https://ops.casino.example/sessions/{session_id}",
        },
    )


def _attachment_of(message: EmailMessage) -> tuple[str | None, bytes]:
    for part in message.iter_attachments():
        payload = part.get_payload(decode=True)
        assert isinstance(payload, bytes)
        return part.get_filename(), payload
    raise ScenarioFailed("the email reached the sink without an attachment")


async def run(ctx: DemoContext) -> None:
    run_id = suffix()
    session_id = f"gs-{run_id}"
    recipient = f"ops-lead-{run_id}"
    address = f"ops-lead+{run_id}@casino.example"
    ctx.consent(recipient, "email")
    data = _report(session_id, datetime.now(UTC))
    ref = await asyncio.to_thread(_store_and_register, ctx, data, f"session-{session_id}.csv")
    ctx.say(f"report artifact {ref.sha256[:16]}... {ref.size} bytes {ref.media_type}")

    # An attachment can never take the SMS path: intake refuses it outright.
    try:
        await ctx.client.notify(
            NotificationRequest(
                business_key=f"session-report:{session_id}:sms",
                recipient_ref=recipient,
                template_key="demo",
                phone="+447400000100",
                artifact_sha256=ref.sha256,
                variables={"n": 1, "intent_id": session_id},
            )
        )
    except InvalidRequest as err:
        expect(err.field == "artifact_sha256", f"intake refused it for another reason: {err}")
        ctx.say(f"an SMS plan with the attachment is refused at intake: {err}")
    else:
        raise ScenarioFailed("intake accepted an SMS-only intent carrying an attachment")

    key = f"session-report:{session_id}"
    ref_intent = await ctx.client.notify(_request(key, recipient, address, ref.sha256, session_id))
    result = await ctx.result(ref_intent.workflow_id, timeout=30)
    doc = await ctx.timeline(key)
    ctx.show(doc, "session report")
    expect(
        result.outcome in EMAIL_REACHED,
        f"{key}: the workflow says {result.outcome}: {result.reason}",
    )
    expect(
        [a["channel"] for a in doc["attempts"]] == [EMAIL.name]
        and all(d["channel"] == EMAIL.name for d in doc["decisions"]),
        f"{key}: the report touched another channel: {doc['attempts']} / {doc['decisions']}",
    )
    attempt = doc["attempts"][0]
    expect(attempt["state"] in EMAIL_REACHED, f"{key}: the email attempt is {attempt['state']}")
    message = await ctx.mail_with_id(attempt["message_id"])
    expect(message is not None, f"{key}: the SMTP sink has no message {attempt['message_id']}")
    assert message is not None
    filename, payload = _attachment_of(message)
    expect(
        sha256_hex(payload) == ref.sha256,
        f"{key}: the attachment received hashes to {sha256_hex(payload)[:16]}..., "
        f"not {ref.sha256[:16]}...",
    )
    expect(filename == ref.filename, f"{key}: attachment named {filename!r}")
    stats = await ctx.sim_stats()
    expect(
        not any(t.startswith(key) for t in stats["requests_by_token"]),
        f"{key}: the carrier simulator received a request for the report",
    )
    ctx.say(f"received with the same SHA-256 ({ref.sha256[:16]}...); no SMS decision or attempt")

    await _tampered(ctx, recipient, address, run_id)


async def _tampered(ctx: DemoContext, recipient: str, address: str, run_id: str) -> None:
    session_id = f"gs-{run_id}-b"
    data = _report(session_id, datetime.now(UTC))
    ref = await asyncio.to_thread(_store_and_register, ctx, data, f"session-{session_id}.csv")
    await asyncio.to_thread(_tamper, ctx, ref)
    key = f"session-report:{session_id}"
    await ctx.client.notify(_request(key, recipient, address, ref.sha256, session_id))
    doc = await ctx.wait_for(
        key,
        "the hash check to refuse the altered report",
        lambda d: any(a["state"] in ("failed", "submitted", *EMAIL_REACHED) for a in d["attempts"]),
        timeout=30,
    )
    attempt = doc["attempts"][0]
    expect(
        attempt["state"] == "failed",
        f"{key}: a report altered after registration was {attempt['state']}; the hash check "
        "did not stop it",
    )
    raws = {o["raw_status"] for o in doc["observations"]}
    expect("artifact_mismatch" in raws, f"{key}: no artifact_mismatch observation ({raws})")
    leaked = await ctx.mail_with_id(message_id_for(attempt["token"]), timeout=1)
    expect(leaked is None, f"{key}: the altered report reached the SMTP sink")
    # Nothing to resend until the report is regenerated: the operator closes the intent.
    await ctx.client.cancel(
        key, by=Principal("ops-lead", Role.OPERATOR), reason="report file corrupted; regenerate"
    )
    ctx.say("an altered report is refused before SMTP (artifact_mismatch); operator closed it")
