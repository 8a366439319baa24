"""No route of the app runs a dependency in the thread pool: FastAPI hands every plain
`def` dependency to it, a thread hop per request before the handler even starts (on the
receipt route, a twentieth of the ingress's Python time in `herald bench --profile`).
Blocking work goes to `Transactions`/`asyncio.to_thread` explicitly, where it is seen."""

from __future__ import annotations

import inspect
from typing import Any

from fastapi.routing import APIRoute

from api.auth import app_routes


def _is_async(call: Any) -> bool:
    if inspect.iscoroutinefunction(call):
        return True
    dunder = getattr(call, "__call__", None)  # noqa: B004 - instances with an async __call__
    return not inspect.isfunction(call) and inspect.iscoroutinefunction(dunder)


def _sync_dependencies(dependant: Any, seen: list[str]) -> list[str]:
    for dep in dependant.dependencies:
        if dep.call is not None and not _is_async(dep.call):
            seen.append(getattr(dep.call, "__qualname__", repr(dep.call)))
        _sync_dependencies(dep, seen)
    return seen


def test_every_dependency_of_every_route_is_async(app):
    routes = [(m, p, r) for m, p, r in app_routes(app) if isinstance(r, APIRoute)]
    assert len(routes) > 20
    sync = {
        f"{method} {path}": found
        for method, path, route in routes
        if (found := _sync_dependencies(route.dependant, []))
    }
    assert not sync, sync
    app_wide = [d.dependency for d in app.router.dependencies]
    assert app_wide and all(_is_async(d) for d in app_wide)
