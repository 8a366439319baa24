"""The console's mount guard: a page that does not depend on the signed-in session (the
function itself, not one that shares its name) refuses to mount.

No `from __future__ import annotations` here: the routes' annotations name local values."""

from types import SimpleNamespace
from typing import Annotated

import pytest
from fastapi import APIRouter, Depends, FastAPI

import api.console
from api import auth
from api.console.deps import Who


async def signed_in() -> str:
    """An impostor: named like the session dependency, checking nothing."""
    return "anyone"


@pytest.fixture(autouse=True)
def public_routes_restored(monkeypatch):
    monkeypatch.setattr(auth, "PUBLIC_ROUTES", dict(auth.PUBLIC_ROUTES))


def _group(path: str, dependency: object) -> SimpleNamespace:
    router = APIRouter(prefix="/console", include_in_schema=False)

    @router.get(path)
    async def route(who: dependency) -> str:  # type: ignore[valid-type]
        return "a page"

    return SimpleNamespace(router=router)


def test_a_page_that_depends_on_a_namesake_of_the_session_is_refused(monkeypatch):
    impostor = _group("/impostor", Annotated[str, Depends(signed_in)])
    monkeypatch.setattr(api.console, "PAGE_GROUPS", (*api.console.PAGE_GROUPS, impostor))
    with pytest.raises(RuntimeError, match="/console/impostor does not require a session"):
        api.console.mount_console(FastAPI())


def test_a_page_that_depends_on_the_session_mounts(monkeypatch):
    guarded = _group("/guarded", Who)
    monkeypatch.setattr(api.console, "PAGE_GROUPS", (*api.console.PAGE_GROUPS, guarded))
    api.console.mount_console(FastAPI())
    assert auth.PUBLIC_ROUTES["GET /console/guarded"] == api.console.SESSION_GUARD
