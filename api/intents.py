"""The operator and app API: create (with Idempotency-Key), list, read, cancel, approve-resend.

An app reads and cancels the intents it created, never another's (404, as if missing);
approve-resend stays with operators.

Every route declares its role (api.auth); the token is checked before the body is parsed.
The operator recorded on a cancel or an approved resend is the authenticated principal.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from api import idempotency
from api.auth import (
    GUARDED,
    CancellingIntents,
    CreatingIntents,
    GuardedRoute,
    Operating,
    ReadingIntents,
)
from api.deps import Ingress, IngressDep
from api.idempotency import Idempotent
from api.schemas import (
    CURSOR_DESCRIPTION,
    CURSOR_PATTERN,
    NO_CONTROL,
    AwaitingFilter,
    CancelOutcome,
    Channel,
    Instant,
    IntentCreate,
    IntentCreated,
    IntentPage,
    OperatorBody,
    Problem,
    ResendBody,
    ResendOutcome,
    Timeline,
    ValidationProblem,
    refusal,
)
from domain import key_privacy
from domain.intents import IntentState
from domain.principals import Principal
from ledger import listing
from ledger.errors import NO_INTENT, AmbiguousKey, IntentConflict, InvalidRequest

log = logging.getLogger("herald.api")

PAGING_NOTE = (
    "Newest first, keyset paged on (created_at, id): `next` and `previous` are opaque "
    "cursors (null at either end); pass one back as `cursor` "
    "with the same filters (a cursor of other filters, or not one at all, is 422). An intent "
    "recorded while you page shifts no page you have not read. A state filter reads at most "
    f"{listing.SCAN_PER_PAGE} intents per page: a page may hold fewer than `limit` items "
    "(`truncated`) and `next` goes on from where it stopped."
)
LINK_HEADER = {
    "Link": {
        "description": 'RFC 8288 links to the `rel="next"` and `rel="prev"` pages.',
        "schema": {"type": "string"},
    }
}
START_TIMEOUT_SECONDS = 10.0


IdOrKey = Annotated[
    str,
    Path(
        description="Intent id or business key.", min_length=1, max_length=240, pattern=NO_CONTROL
    ),
]
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Problem}}
INVALID: dict[int | str, dict[str, Any]] = {
    422: {
        "model": ValidationProblem,
        "description": "A field is invalid: `loc` names it, `msg` says why (no value echoed).",
    }
}
"""Every route's 422 (see `validation_problem`), in place of FastAPI's default schema,
which advertises `input` and `ctx`."""


BAD_BODY: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "The body is not UTF-8 (or not parseable at all)."}
}
"""FastAPI's own 400 for a JSON body it cannot decode, on every route that takes one."""


OTHERS_KEY = "this business key is recorded by another principal; choose your own keys"


LOCATION = {
    "description": "The intent's URL (`/v1/intents/{intent_id}`).",
    "schema": {"type": "string"},
}
"""The header `respond` sets on a created (or existing) intent."""


def _not_found(id_or_key: str) -> HTTPException:
    # The key is not echoed (ledger.errors.NO_INTENT): a business key may hold a subject id
    # that is contact data (`GET /v1/intents/%2B447400952999`). The ledger's own "not found"
    # is answered with the same words by api.errors.answer_not_found.
    return HTTPException(404, NO_INTENT)


def _lookupable(id_or_key: str) -> bool:
    # A NUL cannot be stored, so it can never name an intent (and Postgres refuses it).
    return "\x00" not in id_or_key


def page_or_422(
    session: Session, flt: listing.IntentFilter, cursor: str | None, *, limit: int, where: str
) -> IntentPage:
    """The page `cursor` names under `flt` (`ledger.listing.page`: the console's paging);
    a cursor this filter did not hand out is a 422 naming it (`where`: query or body)."""
    try:
        at = listing.read_cursor(cursor, flt) if cursor is not None else None
    except listing.InvalidCursor as err:
        raise RequestValidationError(
            [{"loc": (where, "cursor"), "msg": str(err), "type": "invalid_cursor"}]
        ) from err
    return IntentPage.of(listing.page(session, flt, at, size=limit), limit=limit)


def link_header(request: Request, page: IntentPage) -> dict[str, str]:
    """RFC 8288 `Link` to the next and previous pages: the request's own URL with the cursor
    replaced (so its filters carry over)."""
    links = [
        f'<{request.url.include_query_params(cursor=cursor)}>; rel="{rel}"'
        for rel, cursor in (("next", page.next), ("prev", page.previous))
        if cursor
    ]
    return {"Link": ", ".join(links)} if links else {}


router = APIRouter(
    prefix="/v1/intents",
    tags=["intents"],
    route_class=GuardedRoute,
    responses={**GUARDED, **INVALID},
)


async def record_and_start(
    ingress: Ingress, body: IntentCreate, by: Principal
) -> tuple[int, dict[str, Any]]:
    """Record the intent (own transaction) under `by`, then start its workflow.

    A failed start still answers with the recorded intent: it is durable, and the
    outbox relay starts its workflow.
    """
    client = ingress.client
    try:
        ref = await ingress.tx(lambda s: client.record(s, body.to_request(), by=by))
    except InvalidRequest as err:
        raise _invalid(err) from err
    except IntentConflict as err:
        return 409, {"detail": str(err)}
    if ref.existed and not by.reads_intent_of(ref.created_by):
        # Another app's intent: its id is not this app's to learn.
        return 409, {"detail": OTHERS_KEY}
    try:
        await asyncio.wait_for(client.start(ref.intent_id, ref.workflow_id), START_TIMEOUT_SECONDS)
    except Exception as err:  # noqa: BLE001 - the outbox relay starts it later
        log.warning(
            "intent %s recorded; workflow start deferred to the relay: %s",
            ref.intent_id,
            type(err).__name__,
        )
    ingress.counters.note_intent(existed=ref.existed)
    created = IntentCreated(
        intent_id=ref.intent_id,
        workflow_id=ref.workflow_id,
        business_key=ref.business_key,
        existed=ref.existed,
    )
    return (200 if ref.existed else 201), created.model_dump(mode="json")


def respond(status: int, doc: dict[str, Any]) -> JSONResponse:
    headers = {}
    if status in (200, 201) and "intent_id" in doc:
        headers["Location"] = f"/v1/intents/{doc['intent_id']}"
    return JSONResponse(doc, status_code=status, headers=headers)


@router.post(
    "",
    status_code=201,
    response_model=IntentCreated,
    summary="Record an intent and start its workflow",
    description=(
        "One business event -> one intent: a second request with the same "
        "`business_key` and the same payload returns the existing intent (200); another "
        "payload under that key is 409. " + idempotency.NOTE
    ),
    responses={
        200: {
            "model": IntentCreated,
            "description": "The business key already existed.",
            "headers": {"Location": LOCATION},
        },
        201: {"headers": {"Location": LOCATION}},
        **BAD_BODY,
        409: {
            "model": Problem,
            "description": "The business key exists with another payload, or was "
            "recorded by another principal.",
        },
    },
)
async def create_intent(
    body: IntentCreate, by: CreatingIntents, ingress: IngressDep, _key: Idempotent
) -> JSONResponse:
    status, doc = await record_and_start(ingress, body, by)
    return respond(status, doc)


@router.get(
    "",
    response_model=IntentPage,
    summary="List intents, newest first, a page at a time",
    description=PAGING_NOTE + " The cursors are also sent as a `Link` header.",
    responses={200: {"headers": LINK_HEADER}},
)
async def list_intents(
    request: Request,
    by: ReadingIntents,
    ingress: IngressDep,
    state: Annotated[IntentState | None, Query(description="Derived intent state.")] = None,
    channel: Annotated[Channel | None, Query(description="In the channel plan.")] = None,
    region: Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_-]{1,10}$")] = None,
    event_type: Annotated[
        str | None, Query(pattern=r"^[a-z][a-z0-9]*(?:[-.][a-z0-9]+)*$", max_length=80)
    ] = None,
    since: Annotated[
        Instant | None,
        Query(description="Created at or after: RFC 3339 with its offset."),
    ] = None,
    awaiting: Annotated[
        AwaitingFilter | None,
        Query(
            description="Those whose workflow waits for an operator: for a settlement, an "
            "approve-resend, or `any` (each item's `awaiting_until` says until when)."
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None,
        Query(
            description=CURSOR_DESCRIPTION,
            max_length=listing.MAX_CURSOR_LENGTH,
            pattern=CURSOR_PATTERN,
        ),
    ] = None,
) -> JSONResponse:
    flt = listing.IntentFilter(
        state=state.value if state else None,
        channel=channel,
        region=region,
        event_type=event_type,
        created_from=since,
        awaiting=awaiting,
        # An app lists only the intents it recorded.
        created_by=by.name if by.reads_only_own_intents else None,
    )
    page: IntentPage = await ingress.tx(
        lambda s: page_or_422(s, flt, cursor, limit=limit, where="query")
    )
    return JSONResponse(page.model_dump(mode="json"), headers=link_header(request, page))


@router.get(
    "/{id_or_key}",
    response_model=Timeline,
    summary="An intent's timeline from the ledger",
    responses=NOT_FOUND,
)
async def get_intent(id_or_key: IdOrKey, by: ReadingIntents, ingress: IngressDep) -> dict[str, Any]:
    if not _lookupable(id_or_key):
        raise _not_found(id_or_key)
    try:
        # A key is looked up in the caller's namespace (an app's alone): docs/api.md.
        doc: dict[str, Any] = await asyncio.to_thread(
            lambda: ingress.client.timeline(id_or_key, by=by)
        )
    except AmbiguousKey as err:
        # A person's bare key that several apps use (an app never meets this): say which.
        raise HTTPException(404, str(err)) from err
    if not by.reads_intent_of(doc["intent"].get("created_by")):
        # Another app's intent is as unknown as a missing one: a 403 would confirm it.
        raise _not_found(id_or_key)
    return doc


@router.post(
    "/{id_or_key}/cancel",
    response_model=CancelOutcome,
    summary="Close the intent's future work (nothing already sent is recalled)",
    responses={**NOT_FOUND, **BAD_BODY},
)
async def cancel_intent(
    id_or_key: IdOrKey,
    body: OperatorBody,
    by: CancellingIntents,
    ingress: IngressDep,
    _key: Idempotent,
) -> dict[str, Any]:
    """Recorded under the authenticated principal (`operator` in the answer); an
    `operator` field in the body is ignored. An app cancels only the intents it created:
    another's is 404, as for a read (`HeraldClient.cancel` finds only what `by` reads)."""
    if not _lookupable(id_or_key):
        raise _not_found(id_or_key)
    try:
        result = await ingress.client.cancel(id_or_key, by=by, reason=body.reason)
    except key_privacy.NoteRefused as err:
        raise _note_refused(err) from err
    return {**asdict(result), "operator": by.name}


@router.post(
    "/{id_or_key}/approve-resend",
    response_model=ResendOutcome,
    summary="Approve a new attempt after a retryable failure or a reconciled ambiguity",
    responses={
        **NOT_FOUND,
        **BAD_BODY,
        409: {"model": ResendOutcome, "description": "Refused; `message` says why."},
    },
)
async def approve_resend(
    id_or_key: IdOrKey, body: ResendBody, by: Operating, ingress: IngressDep, _key: Idempotent
) -> JSONResponse:
    """Recorded under the authenticated principal; an `operator` field is ignored."""
    if not _lookupable(id_or_key):
        raise _not_found(id_or_key)
    try:
        result = await ingress.client.approve_resend(
            id_or_key, channel=body.channel, by=by, reason=body.reason
        )
    except key_privacy.NoteRefused as err:
        raise _note_refused(err) from err
    return JSONResponse(
        {**asdict(result), "operator": by.name}, status_code=200 if result.accepted else 409
    )


def _note_refused(err: key_privacy.NoteRefused) -> HTTPException:
    """A reason or reference holding contact data: 422 on its field, in the same shape."""
    return HTTPException(
        422, [{"loc": ["body", err.field], "msg": str(err), "type": "invalid_request"}]
    )


def _invalid(err: InvalidRequest) -> HTTPException:
    """The same shape as FastAPI's own 422, so clients handle one format: every problem
    intake found, one issue each."""
    return HTTPException(
        422,
        [
            {"loc": ["body", field], "msg": problem, "type": "invalid_request"}
            for field, problem in err.problems
        ],
    )


async def validation_problem(request: Request, exc: Exception) -> JSONResponse:
    """The app's handler for `RequestValidationError`, on every route: each issue names
    the field (`loc`), the problem (`msg`, in words) and its kind (`type`), and nothing
    that was sent (`api.schemas.refusal`). FastAPI's default body also has `input` (the
    value sent, e.g. a phone number or an address under an unknown field) and `ctx`; a
    response travels through proxies, client logs and error trackers, so neither is echoed."""
    assert isinstance(exc, RequestValidationError)
    issues = [refusal(error) for error in exc.errors()]
    return JSONResponse({"detail": jsonable_encoder(issues)}, status_code=422)
