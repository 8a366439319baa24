"""The Twilio-compatible SMS ingress: delivery receipts and inbound SMS, each
authenticated by the provider's signature over the URL and the form
(``X-Twilio-Signature``).

Every receipt goes through the same ledger transition as a poll, is deduplicated, and is
then signalled to the intent's workflow (`api.ingress.receiving`). A bad signature
changes nothing. The ordinary receipt is served without FastAPI's routing
(`api.ingress.fast_receipts`), through `receive_sms_receipt`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, HTTPException, Query, Request, Response

from api.deps import MAX_BODY_BYTES, Ingress, IngressDep
from api.ingress.receiving import (
    TOKEN_MAX_LENGTH,
    malformed,
    record_keyword,
    require_media_type,
    wake_workflow,
)
from api.intents import INVALID
from api.schemas import NO_CONTROL, Problem
from domain.states import PROVIDER_STATUSES, normalize_provider_status
from ledger import observations
from ledger.observations import ObservationFacts

_MESSAGE_SID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_ERROR_CODE = re.compile(r"^[A-Za-z0-9_-]{1,20}$")


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


async def signed_form(request: Request, ingress: Ingress) -> SignedForm:
    """The form parameters of a provider webhook, once its signature is verified.

    Only a form is a form: a body sent as `text/plain`, JSON or with no Content-Type is
    400 before its signature is even looked at, whatever it contains."""
    require_media_type(request, ingress, FORM)
    body = await request.body()
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(body))
    except (UnicodeDecodeError, ValueError) as err:
        raise malformed(ingress, "body must be application/x-www-form-urlencoded") from err
    params = dict(pairs)
    if len(params) != len(pairs):
        # The signature covers every value of a repeated name; providers never repeat one.
        raise malformed(ingress, "a form parameter is repeated")
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
            raise malformed(ingress, f"form parameter {name[:40]!r} contains a NUL character")
    return SignedForm(params, signed_url)


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
    """The SMS status callback's work, for the route above and for `api.ingress.fast_receipts`
    (which serves the common case without FastAPI's routing and dependency stack)."""
    form = await signed_form(request, ingress)
    params = form.params
    if token is not None and "\x00" in token:
        raise malformed(ingress, "token contains a NUL character")
    sid = params.get("MessageSid") or params.get("SmsSid")
    raw = (params.get("MessageStatus") or params.get("SmsStatus") or "").strip()
    if not sid or not raw:
        raise malformed(ingress, "MessageSid and MessageStatus are required")
    if not _MESSAGE_SID.match(sid):
        raise malformed(ingress, "MessageSid is not a message id (letters and digits, <= 80)")
    try:
        normalized = normalize_provider_status(raw)
    except ValueError as err:
        raise malformed(ingress, f"unknown MessageStatus {raw[:40]!r}") from err
    code = params.get("ErrorCode") or None
    if code is not None and not _ERROR_CODE.match(code):
        raise malformed(ingress, "ErrorCode is not an error code (letters and digits, <= 20)")
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
        raise malformed(ingress, "From, Body and MessageSid are required")
    if not _MESSAGE_SID.match(sid):
        raise malformed(ingress, "MessageSid is not a message id (letters and digits, <= 80)")
    # Twilio's inbound webhook carries no time: its MessageSid alone orders nothing.
    await record_keyword(ingress, sender, body, provider="twilio", provider_id=sid)
    return Response("<Response/>", media_type="application/xml")
