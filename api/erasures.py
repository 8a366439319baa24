"""Erasing one recipient's contact data over HTTP (admins): `POST /v1/erasures`.

The same function as `herald erase` (`ledger.erasure.erase`): the recipient travels in the
body only, and no answer, error or log line repeats it (they name the recipient's HMAC).
Refused with 409 under legal hold or while one of the recipient's intents is open, the
reason naming the business keys (docs/ledger.md, "Erasure").
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Response

from api.auth import GUARDED, Administering, GuardedRoute
from api.deps import IngressDep
from api.idempotency import Idempotent
from api.intents import BAD_BODY, INVALID
from api.schemas import ErasureBody, ErasureRecorded, Problem
from domain.key_privacy import NoteRefused
from ledger import erasure
from ledger.errors import ErasureRefused

log = logging.getLogger("herald.api")

router = APIRouter(
    prefix="/v1/erasures",
    tags=["erasures"],
    route_class=GuardedRoute,
    responses={**GUARDED, **INVALID},
)
REFUSED: dict[int | str, dict[str, Any]] = {
    409: {
        "model": Problem,
        "description": "Refused: an intent of the recipient is on legal hold, or still open "
        "(cancel it and erase once it has closed); nothing was erased.",
    }
}


@router.post(
    "",
    status_code=201,
    response_model=ErasureRecorded,
    summary="Erase a recipient's contact data everywhere in the ledger; the evidence stays "
    "as hashes",
    responses={200: {"description": "A dry run: what would be erased."}, **REFUSED, **BAD_BODY},
)
async def erase_recipient(
    body: ErasureBody,
    by: Administering,
    ingress: IngressDep,
    response: Response,
    _key: Idempotent,
) -> ErasureRecorded:
    try:
        who = erasure.recipient(body.kind, body.value, ingress.client.lookup_hmac)
    except ValueError as err:
        raise HTTPException(
            422,
            [
                {
                    "loc": ["body", "value"],
                    "msg": f"{err} (rule recipient.valid)",
                    "type": "invalid_destination",
                }
            ],
        ) from err
    try:
        report = await ingress.tx(
            lambda s: erasure.erase(
                s, who, by=by, reason=body.reason, at=datetime.now(UTC), dry_run=body.dry_run
            )
        )
    except ErasureRefused as err:
        raise HTTPException(409, str(err)) from err
    except NoteRefused as err:
        raise HTTPException(
            422, [{"loc": ["body", err.field], "msg": str(err), "type": "invalid_request"}]
        ) from err
    if body.dry_run:
        response.status_code = 200
    else:
        # The register of erasures outside the ledger, for after a restore (an HMAC only).
        log.info("recipient %s erased by %s", who.subject, by.name)
    return ErasureRecorded(**report.as_dict())
