"""The consent and suppression API: consent recorded and revoked by apps and operators,
suppressions added and lifted by operators, both listed by viewers.

Recipients and destinations travel in request bodies only, never in a URL (proxies and
the access log keep URLs), and no answer, error or log line repeats them: a destination
is stored as its HMAC, and a consent is listed for the `recipient_ref` the caller named.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from api.auth import GUARDED, GuardedRoute, Operating, ReadingEvidence, RecordingConsent
from api.deps import IngressDep
from api.idempotency import Idempotent
from api.intents import BAD_BODY, INVALID
from api.schemas import (
    ConsentBody,
    ConsentList,
    ConsentQuery,
    ConsentRevoked,
    ConsentView,
    Problem,
    SuppressionBody,
    SuppressionLift,
    SuppressionLifted,
    SuppressionList,
    SuppressionQuery,
    SuppressionRecorded,
    SuppressionView,
)
from domain.destinations import normalized_destination
from ledger import evidence
from ledger.models import Consent, Suppression

log = logging.getLogger("herald.api")

SuppressionId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The suppression's id.")]


def _invalid_destination(err: ValueError) -> HTTPException:
    return HTTPException(
        422, [{"loc": ["body", "destination"], "msg": str(err), "type": "invalid_destination"}]
    )


def consent_view(row: Consent) -> ConsentView:
    return ConsentView.of(row)


def suppression_fields(row: Suppression) -> dict[str, Any]:
    return SuppressionView(**evidence.suppression_fields(row)).model_dump()


router = APIRouter(
    prefix="/v1",
    tags=["consents"],
    route_class=GuardedRoute,
    responses={**GUARDED, **BAD_BODY, **INVALID},
)


@router.post(
    "/consents",
    status_code=201,
    response_model=ConsentView,
    summary="Record a consent grant, live from now",
)
async def record_consent(
    body: ConsentBody, by: RecordingConsent, ingress: IngressDep, _key: Idempotent
) -> ConsentView:
    now = datetime.now(UTC)

    def work(session: Session) -> ConsentView:
        row = evidence.record_consent_by(
            session,
            by,
            recipient_ref=body.recipient_ref,
            channel=body.channel,
            purpose=body.purpose,
            source=body.source,
            at=now,
        )
        return consent_view(row)

    view: ConsentView = await ingress.tx(work)
    log.info("consent %d recorded (%s, %s)", view.id, view.channel, view.purpose)
    return view


@router.post(
    "/consents/revoke",
    response_model=ConsentRevoked,
    summary="End every live grant for the recipient, channel and purpose",
    description=(
        "Every live grant for the recipient and purpose on `channel` is ended (a `*` "
        "grant too: it covered this channel); on `*`, the grants of every channel. "
        "The rows stay as history with `revoked_at` and `revoked_source`, and the next "
        "authorization is denied with rule `consent.revoked`, citing the revoke. With "
        "nothing live, `ended` is empty and nothing changes."
    ),
)
async def revoke_consent(
    body: ConsentBody, by: RecordingConsent, ingress: IngressDep, _key: Idempotent
) -> ConsentRevoked:
    now = datetime.now(UTC)

    def work(session: Session) -> ConsentRevoked:
        ended = evidence.revoke_consent_by(
            session,
            by,
            recipient_ref=body.recipient_ref,
            channel=body.channel,
            purpose=body.purpose,
            source=body.source,
            at=now,
        )
        return ConsentRevoked(revoked_at=now, ended=[consent_view(c) for c in ended])

    result: ConsentRevoked = await ingress.tx(work)
    log.info(
        "consent revoked (%s, %s): %d grant(s) ended",
        body.channel,
        body.purpose,
        len(result.ended),
    )
    return result


@router.post(
    "/consents/search",
    response_model=ConsentList,
    summary="Every grant on record for a recipient (revoked ones included)",
)
async def search_consents(
    body: ConsentQuery, _by: ReadingEvidence, ingress: IngressDep
) -> ConsentList:
    def work(session: Session) -> ConsentList:
        rows = evidence.consents_of(
            session, body.recipient_ref, channel=body.channel, purpose=body.purpose
        )
        return ConsentList(items=[consent_view(r) for r in rows])

    result: ConsentList = await ingress.tx(work)
    return result


@router.post(
    "/suppressions",
    status_code=201,
    response_model=SuppressionRecorded,
    summary="Suppress a destination on a channel (or `*`: every channel)",
    responses={
        200: {
            "model": SuppressionRecorded,
            "description": "An active suppression on that channel already existed.",
        }
    },
)
async def record_suppression(
    body: SuppressionBody, by: Operating, ingress: IngressDep, _key: Idempotent
) -> JSONResponse:
    try:
        lookup = ingress.client.lookup_hmac(normalized_destination(body.destination, body.channel))
    except ValueError as err:
        raise _invalid_destination(err) from err
    now = datetime.now(UTC)

    def work(session: Session) -> dict[str, Any]:
        row, created = evidence.suppress_by(
            session,
            by,
            destination_hmac=lookup,
            channel=body.channel,
            reason=body.reason,
            source=body.source,
            at=now,
        )
        return {**suppression_fields(row), "created": created}

    doc = await ingress.tx(work)
    log.info("suppression %d on %s (created=%s)", doc["id"], doc["channel"], doc["created"])
    recorded = SuppressionRecorded.model_validate(doc).model_dump(mode="json")
    return JSONResponse(recorded, status_code=201 if doc["created"] else 200)


@router.post(
    "/suppressions/search",
    response_model=SuppressionList,
    summary="Every suppression on record for a destination (lifted ones included)",
)
async def search_suppressions(
    body: SuppressionQuery, _by: ReadingEvidence, ingress: IngressDep
) -> SuppressionList:
    try:
        lookup = ingress.client.lookup_hmac(normalized_destination(body.destination, body.channel))
    except ValueError as err:
        raise _invalid_destination(err) from err

    def work(session: Session) -> SuppressionList:
        rows = evidence.suppressions_of(session, lookup, channel=body.channel)
        return SuppressionList(
            items=[SuppressionView.model_validate(suppression_fields(r)) for r in rows]
        )

    result: SuppressionList = await ingress.tx(work)
    return result


@router.post(
    "/suppressions/{suppression_id}/lift",
    response_model=SuppressionLifted,
    summary="Lift one suppression (kept as history)",
    responses={404: {"model": Problem, "description": "No suppression with that id."}},
)
async def lift_suppression(
    suppression_id: SuppressionId,
    by: Operating,
    ingress: IngressDep,
    _key: Idempotent,
    body: SuppressionLift | None = None,
) -> SuppressionLifted:
    source = body.source if body else "api"
    now = datetime.now(UTC)

    def work(session: Session) -> SuppressionLifted:
        row, changed = evidence.lift_suppression_by(
            session, by, suppression_id, source=source, at=now
        )
        return SuppressionLifted(**suppression_fields(row), changed=changed)

    result: SuppressionLifted = await ingress.tx(work)
    log.info("suppression %d lifted (changed=%s)", suppression_id, result.changed)
    return result
