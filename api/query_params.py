"""Unknown query parameters, a single-valued one given twice, and any holding a control
character are refused on every `/v1/` route (a control character in the console too).

A parameter a route does not declare used to be dropped without a word: a client that
believed it filtered (`GET /v1/intents?recipient=...`) got everyone's intents. Now it is
a 422 in the shape of every other validation error, naming the parameter and never its
value. One app-wide dependency does it (`create_app`), so a route added later is covered
without a line of its own; it runs after the route's token check, like all validation.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from typing import Any, get_args, get_origin

from fastapi import HTTPException, Request
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


CONSOLE_PREFIX = "/console"
UNKNOWN = "unknown_parameter"
CONTROL = "control_character"


def has_control_character(text: str) -> bool:
    """Whether `text` holds a control character (Unicode Cc: U+0000-001F, U+007F-009F)."""
    return any(unicodedata.category(c) == "Cc" for c in text)


def _problem(where: str, name: str, msg: str, kind: str) -> dict[str, object]:
    return {"loc": (where, name[:MAX_NAME_SHOWN]), "msg": msg, "type": kind}


async def refuse_unknown_query_parameters(request: Request) -> None:
    """On every route, a query or path parameter holding a control character (a NUL, which
    Postgres text cannot hold, a newline, an escape) is refused before it reaches a query:
    a 400 page in the console. On a `/v1/` route, 422 naming each query parameter the
    route does not declare, each single-valued one given more than once (the last would
    silently win), and each holding a control character."""
    path = request.url.path
    given = Counter(name for name, _ in request.query_params.multi_items())
    controlled = sorted(
        {n for n, value in request.query_params.multi_items() if has_control_character(value)}
    )
    in_path = sorted(
        n for n, v in request.path_params.items() if isinstance(v, str) and has_control_character(v)
    )
    if path.startswith(CONSOLE_PREFIX) and (controlled or in_path):
        names = ", ".join(n[:MAX_NAME_SHOWN] for n in [*in_path, *controlled])
        raise HTTPException(400, f"{names}: holds a control character; nothing was done")
    route = request.scope.get("route")
    if not path.startswith(GUARDED_PREFIX) or route is None:
        return
    declared = declared_query_parameters(route)
    unknown = sorted(set(given) - set(declared))
    problems = [
        _problem("query", n, "is not a parameter of this route; nothing was done", UNKNOWN)
        for n in unknown
    ]
    problems += [
        _problem(
            "query",
            n,
            f"is given {given[n]} times; it takes one value; nothing was done",
            "repeated_parameter",
        )
        for n in sorted(given)
        if given[n] > 1 and n in declared and not declared[n]
    ]
    control = "holds a control character; nothing was done"
    problems += [_problem("path", n, control, CONTROL) for n in in_path]
    problems += [_problem("query", n, control, CONTROL) for n in controlled if n not in unknown]
    if problems:
        raise RequestValidationError(problems)
