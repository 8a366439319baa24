"""`POST /v1/attachments`: an app or an operator uploads an attachment an intent then names.

The bytes go to the configured artifact store (HERALD_ARTIFACT_STORE: the data folder, or
the ledger's own table that every worker reaches) and are registered in the ledger by
their SHA-256, computed as they arrive: that hash is the attachment's id, which an
intent's `artifact_sha256` names, and the same bytes uploaded again are the same
attachment. Limits: HERALD_ATTACHMENT_MAX_BYTES (413 naming it) and the media types of
`ledger.artifacts.MEDIA_TYPES` (415 naming them). Neither the bytes nor the file's name
are logged.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Annotated, Any

from fastapi import APIRouter, File, HTTPException, UploadFile
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from api.auth import GUARDED, GuardedRoute, UploadingAttachments
from api.deps import IngressDep
from api.intents import INVALID
from api.schemas import AttachmentStored, Problem
from ledger import artifacts
from ledger.models import Artifact

log = logging.getLogger("herald.api")

ATTACHMENTS_PATH = "/v1/attachments"
MULTIPART_ALLOWANCE = 16 * 1024
"""What a multipart body may carry beyond the attachment itself (boundaries, part
headers): the body limit of this path is the attachment limit plus this."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def too_large(limit: int) -> str:
    """The 413's words, naming the limit (the route's and the body limit's alike)."""
    return f"an attachment is at most {limit} bytes (HERALD_ATTACHMENT_MAX_BYTES)"


def _refused(field: str, message: str) -> HTTPException:
    return HTTPException(422, [{"loc": ["body", field], "msg": message, "type": "invalid_request"}])


def _filename(given: str | None) -> str:
    """The name the recipient sees: the last part of the one sent (no folders)."""
    name = re.split(r"[\\/]", given or "")[-1].strip()
    if not name or name in (".", ".."):
        raise _refused("file", "the file part needs a filename (Content-Disposition)")
    if _CONTROL.search(name) or len(name) > 200:
        raise _refused("file", "a filename is at most 200 characters, none of them control ones")
    return name


router = APIRouter(
    prefix="/v1",
    tags=["attachments"],
    route_class=GuardedRoute,
    responses={**GUARDED, **INVALID},
)


@router.post(
    "/attachments",
    status_code=201,
    response_model=AttachmentStored,
    summary="Upload an attachment for an email intent to name by its SHA-256",
    description=(
        "`multipart/form-data` with one part, `file`, whose `Content-Type` is one of "
        + ", ".join(f"`{t}`" for t in artifacts.MEDIA_TYPES)
        + ". The answer's `sha256` is the attachment's id: put it in an intent's "
        "`artifact_sha256` (email only). The same bytes uploaded again answer 200 with the "
        "same id (the first upload's name and media type stay)."
    ),
    responses={
        200: {"model": AttachmentStored, "description": "These bytes were uploaded before."},
        413: {"model": Problem, "description": "Larger than HERALD_ATTACHMENT_MAX_BYTES."},
        415: {"model": Problem, "description": "A media type not on the list (named)."},
    },
    openapi_extra={
        "requestBody": {
            "content": {
                "multipart/form-data": {
                    "encoding": {"file": {"contentType": ", ".join(artifacts.MEDIA_TYPES)}}
                }
            }
        }
    },
)
async def upload_attachment(
    file: Annotated[UploadFile, File(description="The attachment's bytes, with its filename.")],
    by: UploadingAttachments,
    ingress: IngressDep,
) -> JSONResponse:
    media_type = (file.content_type or "").partition(";")[0].strip().lower()
    if media_type not in artifacts.MEDIA_TYPES:
        raise HTTPException(
            415,
            f"an attachment's media type is one of {', '.join(artifacts.MEDIA_TYPES)}"
            f"{'' if media_type else ' (the file part has no Content-Type)'}",
        )
    filename = _filename(file.filename)
    limit = ingress.attachment_max_bytes
    data = await file.read(limit + 1)
    if len(data) > limit:
        raise HTTPException(413, too_large(limit))
    ref = await asyncio.to_thread(
        ingress.artifacts.put, data, media_type=media_type, filename=filename
    )

    def register(session: Session) -> dict[str, Any]:
        existed = session.get(Artifact, ref.sha256) is not None
        row = artifacts.register(session, ref)
        return AttachmentStored(
            sha256=row.sha256,
            size=row.size,
            media_type=row.media_type,
            filename=row.filename,
            existed=existed,
        ).model_dump(mode="json")

    doc = await ingress.tx(register)
    log.info(
        "attachment %s... stored (%d bytes, %s) by %s",
        ref.sha256[:12],
        ref.size,
        media_type,
        by.name,
    )
    return JSONResponse(doc, status_code=200 if doc["existed"] else 201)
