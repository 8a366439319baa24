"""`POST /v1/recipients/intents`: a recipient's intents, found by their phone number or address.

The same lookup as the console's recipient search (`domain.destinations.normalized_destination`,
the ledger's lookup HMAC, `ledger.listing.to_recipient`), for viewers, operators and
admins. The destination travels in the body only, as on every route that takes one, and
no answer or log line repeats it.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from api.auth import GUARDED, FindingByRecipient, GuardedRoute
from api.deps import IngressDep
from api.intents import BAD_BODY, INVALID, PAGING_NOTE, page_or_422
from api.schemas import IntentPage, IntentSearch
from domain.destinations import normalized_destination
from ledger import listing

router = APIRouter(
    # Not under /v1/intents/: GET /v1/intents/{id_or_key} would claim the path too.
    prefix="/v1/recipients",
    tags=["intents"],
    route_class=GuardedRoute,
    responses={**GUARDED, **BAD_BODY, **INVALID},
)


@router.post(
    "/intents",
    response_model=IntentPage,
    summary="A recipient's intents, by phone number or address (in the body), newest first",
    description=PAGING_NOTE,
)
async def search_intents_by_recipient(
    body: IntentSearch, _by: FindingByRecipient, ingress: IngressDep
) -> IntentPage:
    """Every intent to the destination, whoever recorded it, newest first (`limit`, at
    most 500; `cursor` in the body pages on). The destination is matched by its HMAC, as
    the console matches it."""
    try:
        lookup = ingress.client.lookup_hmac(normalized_destination(body.destination, None))
    except ValueError as err:
        raise HTTPException(
            422,
            [{"loc": ["body", "destination"], "msg": str(err), "type": "invalid_destination"}],
        ) from err

    flt = listing.IntentFilter(recipient_hmac=lookup)
    result: IntentPage = await ingress.tx(
        lambda s: page_or_422(s, flt, body.cursor, limit=body.limit, where="body")
    )
    return result
