"""What every provider's ingress route does with what it receives, whichever provider
sent it: the checks before a signature is looked at (the media type, the token's length,
a malformed request counted), waking the intent's workflow after a receipt that settled
its attempt, and an inbound keyword (STOP, START) applied once per provider message.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from fastapi import HTTPException, Request
from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from activities.contracts import ReceiptSignal
from api.deps import Ingress
from domain import channels, keywords
from domain.destinations import phone_e164
from domain.states import AttemptState, is_terminal
from ledger import evidence, observations
from ledger.models import InboundKeyword, Suppression

log = logging.getLogger("herald.api")

SIGNAL_TIMEOUT_SECONDS = 5.0
TOKEN_MAX_LENGTH = 240
"""The longest `token` a provider callback may carry (Herald's are far shorter)."""


def malformed(ingress: Ingress, detail: str) -> HTTPException:
    """The 400 for a request no provider would send (`detail` names what is wrong),
    counted as malformed."""
    ingress.counters.rejected.labels("malformed").inc()
    return HTTPException(400, detail)


def _media_type(request: Request) -> str:
    return request.headers.get("Content-Type", "").partition(";")[0].strip().lower()


def require_media_type(request: Request, ingress: Ingress, media_type: str) -> None:
    """400 before the signature is looked at when the body is not sent as the provider
    sends it (a form for Twilio, JSON for Telnyx and SendGrid), whatever it contains."""
    if _media_type(request) != media_type:
        raise malformed(ingress, f"Content-Type must be {media_type}")


def _sender_e164(sender: str) -> str:
    """The sender in E.164. An opt-out is honoured even from a number Herald would not text."""
    try:
        return phone_e164(sender)
    except ValueError as err:
        raise ValueError(f"From: {err}") from err


def suppress(session: Session, lookup: str, channel: str, reason: str, source: str) -> bool:
    """Add a suppression unless an active one exists for the destination (redeliveries)."""
    _, created = evidence.suppress(
        session,
        destination_hmac=lookup,
        channel=channel,
        reason=reason,
        source=source,
        at=datetime.now(UTC),
    )
    return created


async def wake_workflow(
    ingress: Ingress, result: observations.ObservationResult, code: str | None
) -> None:
    """Signal the intent's workflow after a receipt (from any provider) that settled its
    attempt.

    Only a settling receipt wakes the workflow (it waits for a terminal state); an
    intermediate `sent` is in the ledger and would cost a signal and a task for nothing.
    """
    if not (
        result.changed
        and result.workflow_id
        and result.token
        and result.state
        and is_terminal(AttemptState(result.state))
    ):
        return
    try:
        handle = ingress.client.temporal.get_workflow_handle(result.workflow_id)
        await asyncio.wait_for(
            handle.signal("receipt", ReceiptSignal(result.token, result.state, code)),
            SIGNAL_TIMEOUT_SECONDS,
        )
    except Exception as err:  # noqa: BLE001 - the ledger has it; polling will see it
        log.info("receipt recorded but the workflow was not signalled: %s", type(err).__name__)


async def record_keyword(
    ingress: Ingress,
    sender: str,
    body: str,
    *,
    provider: str,
    provider_id: str,
    provider_at: datetime | None = None,
) -> None:
    """An inbound SMS through any provider: STOP words suppress SMS to the sender, START
    words lift an opt-out, anything else is ignored. The suppression is per destination
    and channel, never per provider, so an opt-out received through one provider holds
    for every provider (failover never bypasses it).

    Each keyword is kept once by the provider's own id (`provider_id`): a replay, however
    late, changes nothing. One whose provider time is older than the destination's latest
    keyword is kept and not applied (a STOP delayed past the START that followed it)."""
    kind = keywords.classify_keyword(body)
    if kind is None:
        return
    try:
        e164 = _sender_e164(sender)
    except ValueError as err:
        raise malformed(ingress, str(err)) from err
    lookup = ingress.client.lookup_hmac(e164)
    word = body.strip().rstrip(".!?;,").strip().upper()
    sms = channels.SMS.name

    def work(session: Session) -> str:
        newer = (
            session.execute(
                select(InboundKeyword.provider_id).where(
                    InboundKeyword.destination_hmac == lookup,
                    InboundKeyword.provider_at > provider_at,
                )
            ).first()
            if provider_at is not None
            else None
        )
        kept = session.execute(
            pg_insert(InboundKeyword)
            .values(
                provider=provider,
                provider_id=provider_id[:120],
                destination_hmac=lookup,
                kind=kind,
                word=word[:20],
                provider_at=provider_at,
                received_at=datetime.now(UTC),
                applied=newer is None,
            )
            .on_conflict_do_nothing()
            .returning(InboundKeyword.provider_id)
        ).first()
        if kept is None:
            return "a replay, not applied"
        if newer is not None:
            return "older than the latest keyword, not applied"
        if kind == "opt_out":
            suppress(session, lookup, sms, "opted_out", f"keyword:{word}")
        else:
            session.execute(
                update(Suppression)
                .where(
                    Suppression.destination_hmac == lookup,
                    Suppression.channel == sms,
                    Suppression.reason == "opted_out",
                    Suppression.lifted_at.is_(None),
                )
                .values(lifted_at=datetime.now(UTC), lifted_source=f"keyword:{word}"[:60])
            )
        return "applied"

    outcome = await ingress.tx(work)
    log.info("inbound keyword %s recorded (%s): %s", word, kind, outcome)
