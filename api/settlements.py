"""Settling ambiguity over HTTP: the active policy's settlement rules, a provider lookup
of an unknown attempt, and a settlement under a named rule.

The settlement and the lookup go through the intent's workflow (`HeraldClient.settle` /
`lookup`, the one path the CLI and the console take too), recorded under the
authenticated principal with its proof; the workflow's validator refuses what the rule
forbids, and the answer says why (409).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from api.auth import GUARDED, GuardedRoute, Operating, ReadingIntents
from api.deps import IngressDep
from api.idempotency import Idempotent
from api.intents import (
    BAD_BODY,
    INVALID,
    NOT_FOUND,
    IdOrKey,
    _lookupable,
    _not_found,
    _note_refused,
)
from api.schemas import (
    Channel,
    LookupBody,
    LookupOutcome,
    SettleBody,
    SettlementRules,
    SettleOutcome,
)
from domain import key_privacy
from ledger import settlements

router = APIRouter(
    prefix="/v1",
    tags=["operations"],
    route_class=GuardedRoute,
    responses={**GUARDED, **INVALID},
)


@router.get(
    "/settlement-rules",
    response_model=SettlementRules,
    summary="The active policy's settlement rules (for a channel: those its provider allows)",
)
async def list_settlement_rules(
    _by: ReadingIntents, ingress: IngressDep, channel: Channel | None = Query(None)
) -> dict[str, Any]:
    def work(session: Session) -> dict[str, Any]:
        version, rules = settlements.active_settlement_policy(session)
        offered = (
            rules.offered(provider_has_lookup=settlements.provider_has_lookup(channel))
            if channel
            else rules.rules
        )
        return {
            "policy_version": version,
            "window_seconds": rules.window_seconds,
            "rules": [r.as_dict() for r in offered],
        }

    result: dict[str, Any] = await ingress.tx(work)
    return result


@router.post(
    "/intents/{id_or_key}/lookup",
    response_model=LookupOutcome,
    summary="Ask the provider what it holds for the channel's unknown attempt (recorded)",
    responses={**NOT_FOUND, **BAD_BODY},
)
async def look_up_attempt(
    id_or_key: IdOrKey,
    by: Operating,
    ingress: IngressDep,
    _key: Idempotent,
    body: LookupBody | None = None,
) -> dict[str, Any]:
    """Runs where the transports live (a worker activity, through the intent's workflow);
    a rule that needs a provider lookup needs one from the last 30 minutes. The body may
    be left out: every field has a default (`{"channel": "sms"}`)."""
    if not _lookupable(id_or_key):
        raise _not_found(id_or_key)
    channel = (body or LookupBody()).channel
    result = await ingress.client.lookup(id_or_key, channel=channel, by=by)
    return asdict(result)


@router.post(
    "/intents/{id_or_key}/settle",
    response_model=SettleOutcome,
    summary="Settle the channel's unknown attempt under a named rule of the active policy",
    responses={
        **NOT_FOUND,
        **BAD_BODY,
        409: {"model": SettleOutcome, "description": "Refused; `message` says why."},
    },
)
async def settle_intent(
    id_or_key: IdOrKey, body: SettleBody, by: Operating, ingress: IngressDep, _key: Idempotent
) -> JSONResponse:
    """Recorded under the authenticated principal (an operator or admin), judged by the
    policy version active now; an `operator` field in the body is ignored."""
    if not _lookupable(id_or_key):
        raise _not_found(id_or_key)
    try:
        result = await ingress.client.settle(
            id_or_key,
            channel=body.channel,
            rule=body.rule,
            reason=body.reason,
            reference=body.reference,
            by=by,
        )
    except key_privacy.NoteRefused as err:
        raise _note_refused(err) from err
    return JSONResponse(
        {**asdict(result), "operator": by.name}, status_code=200 if result.accepted else 409
    )
