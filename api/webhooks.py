"""What providers and recipients send without a token, authenticated by a signature:
delivery receipts and inbound SMS (the provider's signature over the URL and the form),
and the one-click unsubscribe link (Herald's own signature over the attempt token).

Every receipt goes through the same ledger transition as a poll, is deduplicated, and is
then signalled to the intent's workflow. A bad signature changes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from fastapi.responses import HTMLResponse
from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from activities.contracts import ReceiptSignal
from api.deps import MAX_BODY_BYTES, Ingress, IngressDep
from api.intents import INVALID
from api.schemas import NO_CONTROL, Problem, Unsubscribed
from domain import channels, keywords
from domain.destinations import phone_e164
from domain.states import (
    PROVIDER_STATUSES,
    AttemptState,
    is_terminal,
    normalize_provider_status,
)
from domain.unsubscribe import verify_unsubscribe_token
from ledger import evidence, observations
from ledger import repository as repo
from ledger.models import InboundKeyword, Suppression
from ledger.observations import ObservationFacts

log = logging.getLogger("herald.api")

SIGNAL_TIMEOUT_SECONDS = 5.0
TOKEN_MAX_LENGTH = 240
"""The longest `token` a provider callback may carry (Herald's are far shorter)."""
_MESSAGE_SID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_ERROR_CODE = re.compile(r"^[A-Za-z0-9_-]{1,20}$")


def _bad(ingress: Ingress, detail: str) -> HTTPException:
    ingress.counters.rejected.labels("malformed").inc()
    return HTTPException(400, detail)


@dataclass(frozen=True)
class SignedForm:
    """A verified webhook: its parameters and the URL the signature covers."""

    params: dict[str, str]
    signed_url: str

    def signed_string(self) -> str:
        """The string the signature is an HMAC of: the URL, then each parameter's name and
        value concatenated with no separator, names sorted (the twilio package's
        `RequestValidator.compute_signature`). Many forms have the same string: a boundary
        moved between a name and its value (`AccountSidA=C0...` for `AccountSid=AC0...`),
        or an empty pair (`&=`) added, all verify with one captured signature."""
        return self.signed_url + "".join(name + self.params[name] for name in sorted(self.params))

    def digest(self) -> str:
        """SHA-256 of exactly what the signature covers, as it covers it
        (:meth:`signed_string`): every form one signature verifies has one digest, so a
        captured callback re-cut at its boundaries or sent with fresh unsigned headers is
        the same callback. Parsed pairs would not do: each re-cut parses differently."""
        return hashlib.sha256(self.signed_string().encode("utf-8", "surrogatepass")).hexdigest()


FORM = "application/x-www-form-urlencoded"


def _media_type(request: Request) -> str:
    return request.headers.get("Content-Type", "").partition(";")[0].strip().lower()


def require_media_type(request: Request, ingress: Ingress, media_type: str) -> None:
    """400 before the signature is looked at when the body is not sent as the provider
    sends it (a form for Twilio, JSON for Telnyx and SendGrid), whatever it contains."""
    if _media_type(request) != media_type:
        raise _bad(ingress, f"Content-Type must be {media_type}")


async def signed_form(request: Request, ingress: Ingress) -> SignedForm:
    """The form parameters of a provider webhook, once its signature is verified.

    Only a form is a form: a body sent as `text/plain`, JSON or with no Content-Type is
    400 before its signature is even looked at, whatever it contains."""
    require_media_type(request, ingress, FORM)
    body = await request.body()
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(body))
    except (UnicodeDecodeError, ValueError) as err:
        raise _bad(ingress, "body must be application/x-www-form-urlencoded") from err
    params = dict(pairs)
    if len(params) != len(pairs):
        # The signature covers every value of a repeated name; providers never repeat one.
        raise _bad(ingress, "a form parameter is repeated")
    signature = request.headers.get("X-Twilio-Signature")
    if not signature:
        ingress.counters.rejected.labels("signature").inc()
        raise HTTPException(403, "missing X-Twilio-Signature")
    signed_url = ingress.public_url(request)
    if not ingress.validator.validate(signed_url, params, signature):
        ingress.counters.rejected.labels("signature").inc()
        raise HTTPException(403, "signature does not match")
    for name, value in params.items():
        if "\x00" in name or "\x00" in value:
            raise _bad(ingress, f"form parameter {name[:40]!r} contains a NUL character")
    return SignedForm(params, signed_url)


def _sender_e164(sender: str) -> str:
    """The sender in E.164. An opt-out is honoured even from a number Herald would not text."""
    try:
        return phone_e164(sender)
    except ValueError as err:
        raise ValueError(f"From: {err}") from err


def _suppress(session: Session, lookup: str, channel: str, reason: str, source: str) -> bool:
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


PROBLEMS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": Problem,
        "description": f"Not `{FORM}`, not UTF-8, or a malformed form; `detail` says why.",
    },
    403: {"model": Problem, "description": "Missing or wrong X-Twilio-Signature."},
    413: {"model": Problem, "description": f"Body larger than {MAX_BODY_BYTES} bytes."},
}
_SIGNATURE_HEADER = {
    "name": "X-Twilio-Signature",
    "in": "header",
    "required": True,
    "description": "The provider's signature over the URL it called and the form fields.",
    "schema": {"type": "string", "minLength": 1},
}


def signed_form_body(fields: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The OpenAPI of a provider webhook: a signed form (read by `signed_form`, not by a
    FastAPI parameter, since the signature covers the raw fields)."""
    text = {"type": "string", "pattern": r"^[^\x00]*$"}
    return {
        "parameters": [_SIGNATURE_HEADER],
        "requestBody": {
            "required": True,
            "content": {
                FORM: {
                    "schema": {
                        "type": "object",
                        "properties": {name: {**text, **spec} for name, spec in fields.items()},
                        "required": required,
                        # Providers add fields without notice; all are signed and kept.
                        "additionalProperties": text,
                    }
                }
            },
        },
    }


RECEIPT_FORM = signed_form_body(
    {
        "MessageSid": {"pattern": _MESSAGE_SID.pattern},
        "SmsSid": {"pattern": _MESSAGE_SID.pattern},
        "MessageStatus": {"enum": sorted(PROVIDER_STATUSES)},
        "SmsStatus": {"enum": sorted(PROVIDER_STATUSES)},
        "ErrorCode": {"pattern": r"^$|" + _ERROR_CODE.pattern},
    },
    ["MessageSid", "MessageStatus"],
)
INBOUND_FORM = signed_form_body({"From": {"minLength": 1}, "Body": {}}, ["From", "Body"])

TWIML: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/xml": {}}, "description": "An empty TwiML answer."}
}


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
        raise _bad(ingress, str(err)) from err
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
            _suppress(session, lookup, sms, "opted_out", f"keyword:{word}")
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


router = APIRouter(tags=["provider-webhooks"])
"""Provider webhooks, signed by the provider."""


@router.post(
    "/v1/receipts/sms",
    status_code=204,
    response_class=Response,
    responses={**PROBLEMS, **INVALID},
    summary="An SMS status callback (signed)",
    openapi_extra=RECEIPT_FORM,
)
async def receive_twilio_receipt(
    request: Request,
    ingress: IngressDep,
    token: Annotated[
        str | None,
        Query(
            max_length=TOKEN_MAX_LENGTH,
            pattern=NO_CONTROL,
            description="The attempt token we sent.",
        ),
    ] = None,
) -> Response:
    """Verified, deduplicated, recorded through the one transition, then signalled.

    A receipt for a message id nobody knows is kept as orphan evidence (204).
    """
    return await receive_sms_receipt(request, ingress, token)


async def receive_sms_receipt(request: Request, ingress: Ingress, token: str | None) -> Response:
    """The SMS status callback's work, for the route above and for `api.fast_receipts`
    (which serves the common case without FastAPI's routing and dependency stack)."""
    form = await signed_form(request, ingress)
    params = form.params
    if token is not None and "\x00" in token:
        raise _bad(ingress, "token contains a NUL character")
    sid = params.get("MessageSid") or params.get("SmsSid")
    raw = (params.get("MessageStatus") or params.get("SmsStatus") or "").strip()
    if not sid or not raw:
        raise _bad(ingress, "MessageSid and MessageStatus are required")
    if not _MESSAGE_SID.match(sid):
        raise _bad(ingress, "MessageSid is not a message id (letters and digits, <= 80)")
    try:
        normalized = normalize_provider_status(raw)
    except ValueError as err:
        raise _bad(ingress, f"unknown MessageStatus {raw[:40]!r}") from err
    code = params.get("ErrorCode") or None
    if code is not None and not _ERROR_CODE.match(code):
        raise _bad(ingress, "ErrorCode is not an error code (letters and digits, <= 20)")
    # Deduplicated on the signed string itself: the provider's retries of one callback
    # repeat it exactly, and a replay with a fresh (unsigned) I-Twilio-Idempotency-Token,
    # or re-cut at its name/value boundaries, is the same callback, not a new observation.
    dedupe = "webhook:" + form.digest()
    facts = ObservationFacts(
        source="webhook",
        raw_status=raw,
        normalized=normalized,
        observed_at=datetime.now(UTC),
        dedupe_key=dedupe,
        provider_code=code,
        remote_id=sid,
    )
    through = ingress.through["twilio"]
    result = await ingress.tx(
        lambda s: observations.record_observation(s, facts, token=token, through=through)
    )
    ingress.counters.receipts.labels(result.verdict).inc()
    if result.verdict == "duplicate":
        ingress.counters.duplicates.labels("webhook_redelivery").inc()
    await wake_workflow(ingress, result, code)
    return Response(status_code=204)


@router.post(
    "/v1/inbound/sms",
    response_class=Response,
    responses={**PROBLEMS, **TWIML, **INVALID},
    summary="An inbound SMS (signed): opt-out and opt-in keywords",
    openapi_extra=INBOUND_FORM,
)
async def receive_inbound_sms(request: Request, ingress: IngressDep) -> Response:
    """STOP, STOPALL, UNSUBSCRIBE, CANCEL, END, QUIT suppress SMS to the sender;
    START, YES, UNSTOP lift it. Anything else is acknowledged and ignored."""
    params = (await signed_form(request, ingress)).params
    sender, body, sid = params.get("From"), params.get("Body"), params.get("MessageSid")
    if not sender or body is None or not sid:
        raise _bad(ingress, "From, Body and MessageSid are required")
    if not _MESSAGE_SID.match(sid):
        raise _bad(ingress, "MessageSid is not a message id (letters and digits, <= 80)")
    # Twilio's inbound webhook carries no time: its MessageSid alone orders nothing.
    await record_keyword(ingress, sender, body, provider="twilio", provider_id=sid)
    return Response("<Response/>", media_type="application/xml")


unsubscribe_router = APIRouter(tags=["recipients"])
"""The one-click unsubscribe link, signed by Herald."""
UNKNOWN_LINK: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "Not a link Herald signed."},
    **INVALID,
}


LinkValue = Annotated[str, Path(pattern=NO_CONTROL, description="The signed link's value.")]


def verified(ingress: Ingress, value: str) -> str:
    # A link Herald signed is ASCII; anything else is not one (and hmac refuses it).
    token = (
        verify_unsubscribe_token(ingress.unsubscribe_secret, value)
        if (value.isascii() and "\x00" not in value)
        else None
    )
    if token is None:
        raise HTTPException(404, "unknown unsubscribe link")
    return token


@unsubscribe_router.get(
    "/v1/unsubscribe/{value}",
    # The page is HTML; its 404 and 422 are JSON like every other error. A plain
    # Response class lets the document file each under the type it really has.
    response_class=Response,
    responses={
        200: {
            "content": {"text/html": {"schema": {"type": "string"}}},
            "description": "The page.",
        },
        **UNKNOWN_LINK,
    },
    summary="The confirmation page (changes nothing: link scanners fetch it)",
)
async def show_unsubscribe_page(value: LinkValue, ingress: IngressDep) -> HTMLResponse:
    verified(ingress, value)
    return HTMLResponse(
        "<!doctype html><html><head><meta charset='utf-8'><title>Unsubscribe</title>"
        "</head><body><form method='post'><p>Stop these emails?</p>"
        "<input type='hidden' name='List-Unsubscribe' value='One-Click'>"
        "<button type='submit'>Unsubscribe</button></form></body></html>"
    )


@unsubscribe_router.post(
    "/v1/unsubscribe/{value}",
    response_model=Unsubscribed,
    responses=UNKNOWN_LINK,
    summary="RFC 8058 one-click unsubscribe",
)
async def unsubscribe_in_one_click(value: LinkValue, ingress: IngressDep) -> dict[str, str]:
    """Suppress email to the attempt's destination (idempotent)."""
    token = verified(ingress, value)

    def work(session: Session) -> None:
        attempt = repo.attempt_by_token(session, token)
        # RFC 8058 one-click unsubscribe is an email header: it suppresses email.
        _suppress(
            session, attempt.destination_hmac, channels.EMAIL.name, "unsubscribed", "one-click"
        )

    try:
        await ingress.tx(work)
    except repo.NotFound as err:
        raise HTTPException(404, "unknown unsubscribe link") from err
    return {"status": "unsubscribed"}
