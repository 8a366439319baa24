"""Unknown query parameters are refused on every `/v1/` route.

A parameter a route does not declare used to be dropped without a word: a client that
believed it filtered (`GET /v1/intents?recipient=...`) got everyone's intents. Now it is
a 422 in the shape of every other validation error, naming the parameter and never its
value. One app-wide dependency does it (`create_app`), so a route added later is covered
without a line of its own; it runs after the route's token check, like all validation.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from starlette.routing import BaseRoute

GUARDED_PREFIX = "/v1/"
MAX_NAME_SHOWN = 80


def _query_names(dependant: Dependant) -> frozenset[str]:
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return frozenset(names)


def declared_query_parameters(route: BaseRoute) -> frozenset[str]:
    """The query parameters a route declares, its dependencies' included (a walk over a
    handful of dependants: cheaper than any cache keyed by a route, which is unhashable)."""
    dependant = getattr(route, "dependant", None)
    return _query_names(dependant) if isinstance(dependant, Dependant) else frozenset()


async def refuse_unknown_query_parameters(request: Request) -> None:
    """422 naming each query parameter the matched `/v1/` route does not declare."""
    if not request.url.path.startswith(GUARDED_PREFIX):
        return
    route = request.scope.get("route")
    if route is None:
        return
    declared = declared_query_parameters(route)
    unknown = sorted({name for name, _ in request.query_params.multi_items()} - declared)
    if unknown:
        raise RequestValidationError(
            [
                {
                    "loc": ("query", name[:MAX_NAME_SHOWN]),
                    "msg": "is not a parameter of this route; nothing was done",
                    "type": "unknown_parameter",
                }
                for name in unknown
            ]
        )
