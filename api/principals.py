"""Managing principals over HTTP (admins): add, list, revoke, rotate.

An add or a rotate answers with the new token once; nothing later shows it (the ledger
keeps only its hash), and nothing logs it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path

from api.auth import GUARDED, Administering, GuardedRoute
from api.deps import Ingress, IngressDep
from api.idempotency import Idempotent
from api.intents import BAD_BODY, INVALID
from api.schemas import PrincipalCreate, PrincipalList, PrincipalToken, PrincipalView, Problem
from domain.principals import NAME_PATTERN, Principal
from ledger import principals
from ledger.errors import InvalidNamespace, LastAdmin, PrincipalExists, PrincipalRevoked

log = logging.getLogger("herald.api")

Name = Annotated[str, Path(pattern=NAME_PATTERN, description="The principal's name.")]


def _issued(issued: principals.IssuedToken) -> PrincipalToken:
    return PrincipalToken(
        name=issued.principal.name, role=issued.principal.role, token=issued.token
    )


router = APIRouter(
    prefix="/v1/principals",
    tags=["principals"],
    route_class=GuardedRoute,
    responses={**GUARDED, **INVALID},
)
UNKNOWN: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "No principal of that name."},
    409: {
        "model": Problem,
        "description": "It is revoked already, or (revoke) it is the last active admin.",
    },
}


@router.get("", response_model=PrincipalList, summary="Every principal (never a token)")
async def list_principals(_by: Administering, ingress: IngressDep) -> PrincipalList:
    views = await ingress.tx(principals.list_principals)
    return PrincipalList(
        items=[PrincipalView.model_validate(v, from_attributes=True) for v in views]
    )


@router.post(
    "",
    status_code=201,
    response_model=PrincipalToken,
    summary="Add a principal; its token is in this answer and nowhere else",
    responses={
        409: {"model": Problem, "description": "The name, or the namespace, is taken."},
        **BAD_BODY,
    },
)
async def add_principal(
    body: PrincipalCreate, by: Administering, ingress: IngressDep
) -> PrincipalToken:
    now = datetime.now(UTC)
    try:
        issued = await ingress.tx(
            lambda s: principals.create(
                s, body.name, body.role, by=by, at=now, namespace=body.namespace
            )
        )
    except InvalidNamespace as err:
        raise HTTPException(
            422, [{"loc": ["body", "namespace"], "msg": str(err), "type": "invalid_request"}]
        ) from err
    except ValueError as err:
        raise HTTPException(
            422, [{"loc": ["body", "name"], "msg": str(err), "type": "invalid_name"}]
        ) from err
    except PrincipalExists as err:
        raise HTTPException(409, str(err)) from err
    log.info("principal %s added (%s) by %s", body.name, body.role.value, by.name)
    return _issued(issued)


async def _change(ingress: Ingress, name: str, by: Principal, work: Any) -> Any:
    try:
        return await ingress.tx(lambda s: work(s, name, by=by, at=datetime.now(UTC)))
    except (PrincipalRevoked, LastAdmin) as err:
        raise HTTPException(409, str(err)) from err


@router.post(
    "/{name}/revoke",
    response_model=PrincipalView,
    summary="Revoke a principal: its token is refused from the next request on",
    responses=UNKNOWN,
)
async def revoke_principal(
    name: Name, by: Administering, ingress: IngressDep, _key: Idempotent
) -> PrincipalView:
    view = await _change(ingress, name, by, principals.revoke)
    log.info("principal %s revoked by %s", name, by.name)
    return PrincipalView.model_validate(view, from_attributes=True)


@router.post(
    "/{name}/rotate",
    response_model=PrincipalToken,
    summary="A new token for a principal; the old one stops working at once",
    responses=UNKNOWN,
)
async def rotate_principal_token(
    name: Name, by: Administering, ingress: IngressDep
) -> PrincipalToken:
    issued = await _change(ingress, name, by, principals.rotate)
    log.info("principal %s rotated by %s", name, by.name)
    return _issued(issued)
