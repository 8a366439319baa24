"""Unknown query parameters, and a single-valued one given twice, are refused on every
`/v1/` route.

A parameter a route does not declare used to be dropped without a word: a client that
believed it filtered (`GET /v1/intents?recipient=...`) got everyone's intents. Now it is
a 422 in the shape of every other validation error, naming the parameter and never its
value. One app-wide dependency does it (`create_app`), so a route added later is covered
without a line of its own; it runs after the route's token check, like all validation.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, get_args, get_origin

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from starlette.routing import BaseRoute

GUARDED_PREFIX = "/v1/"
MAX_NAME_SHOWN = 80


def _takes_a_list(annotation: Any) -> bool:
    """Whether a parameter's type is a list (or an optional one): it may be repeated."""
    if get_origin(annotation) in (list, tuple, set, frozenset):
        return True
    return any(_takes_a_list(arg) for arg in get_args(annotation) if arg is not type(None))


def _query_fields(dependant: Dependant) -> dict[str, bool]:
    fields = {f.alias: _takes_a_list(f.field_info.annotation) for f in dependant.query_params}
    for sub in dependant.dependencies:
        fields |= _query_fields(sub)
    return fields


def declared_query_parameters(route: BaseRoute) -> dict[str, bool]:
    """The query parameters a route declares, its dependencies' included, each with
    whether it takes a list (a walk over a handful of dependants: cheaper than any cache
    keyed by a route, which is unhashable)."""
    dependant = getattr(route, "dependant", None)
    return _query_fields(dependant) if isinstance(dependant, Dependant) else {}


async def refuse_unknown_query_parameters(request: Request) -> None:
    """422 naming each query parameter the matched `/v1/` route does not declare, and each
    single-valued one given more than once (the last would silently win)."""
    if not request.url.path.startswith(GUARDED_PREFIX):
        return
    route = request.scope.get("route")
    if route is None:
        return
    declared = declared_query_parameters(route)
    given = Counter(name for name, _ in request.query_params.multi_items())
    problems = [
        {
            "loc": ("query", name[:MAX_NAME_SHOWN]),
            "msg": "is not a parameter of this route; nothing was done",
            "type": "unknown_parameter",
        }
        for name in sorted(set(given) - set(declared))
    ] + [
        {
            "loc": ("query", name),
            "msg": f"is given {given[name]} times; it takes one value; nothing was done",
            "type": "repeated_parameter",
        }
        for name in sorted(given)
        if given[name] > 1 and name in declared and not declared[name]
    ]
    if problems:
        raise RequestValidationError(problems)
