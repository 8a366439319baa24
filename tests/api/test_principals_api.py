"""Principals and roles over the API: every route's role, read from the app's own routes,
against no token, a revoked one and each role; what an app or a viewer may not do; the
recorded operator is the authenticated principal; a token is never logged or shown twice."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.auth import PUBLIC_ROUTES, app_routes, route_access, undeclared_routes
from domain.principals import Role, least_role_for
from ledger import principals
from ledger.models import AuditEvent, OperatorAction, PrincipalRecord
from tests.api.conftest import BEARER, random_mobile, submitted_attempt
from tests.conftest import unique

PHONE = "+447400000142"
CREDENTIALS = ("none", "revoked", *(role.value for role in Role))
EVERYONE = {"app", "viewer", "operator", "admin"}
PEOPLE = {"viewer", "operator", "admin"}
ACTORS = {"operator", "admin"}
APPS_AND_ACTORS = {"app", "operator", "admin"}
"""What an app does on its own credential, and operators for anyone: consent, cancel
(an app only its own intents), attachments."""
ROLE_TABLE: dict[str, set[str]] = {
    "POST /v1/intents": {"app", "admin"},
    "GET /v1/intents": EVERYONE,
    "GET /v1/intents/{id_or_key}": EVERYONE,
    "POST /v1/recipients/intents": PEOPLE,
    "POST /v1/intents/{id_or_key}/cancel": APPS_AND_ACTORS,
    "POST /v1/intents/{id_or_key}/approve-resend": ACTORS,
    "POST /v1/intents/{id_or_key}/lookup": ACTORS,
    "POST /v1/intents/{id_or_key}/settle": ACTORS,
    "GET /v1/settlement-rules": EVERYONE,
    "POST /v1/consents": APPS_AND_ACTORS,
    "POST /v1/consents/revoke": APPS_AND_ACTORS,
    "POST /v1/consents/search": PEOPLE,
    "POST /v1/suppressions": ACTORS,
    "POST /v1/suppressions/search": PEOPLE,
    "POST /v1/suppressions/{suppression_id}/lift": ACTORS,
    "POST /v1/attachments": APPS_AND_ACTORS,
    "GET /v1/principals": {"admin"},
    "POST /v1/principals": {"admin"},
    "POST /v1/principals/{name}/revoke": {"admin"},
    "POST /v1/principals/{name}/rotate": {"admin"},
    "POST /v1/erasures": {"admin"},
    "GET /v1/templates": EVERYONE,
    "GET /v1/templates/{key}": EVERYONE,
    "POST /v1/templates/import": {"admin"},
    "GET /v1/policies": EVERYONE,
    "GET /v1/templates/{key}/versions/{version}": EVERYONE,
    "GET /v1/templates/{key}/versions/{version}/diff": EVERYONE,
    "POST /v1/templates/{key}/versions/{version}/preview": EVERYONE,
    "POST /v1/templates/{key}/versions/{version}/approve": ACTORS,
    "POST /v1/templates/{key}/versions/{version}/refuse": ACTORS,
    "POST /v1/templates/{key}/versions/{version}/activate": ACTORS,
    "GET /v1/policies/{version}": EVERYONE,
    "GET /v1/policies/{version}/diff": EVERYONE,
    "POST /v1/policies/{version}/approve": ACTORS,
    "POST /v1/policies/{version}/refuse": ACTORS,
    "POST /v1/policies/{version}/activate": ACTORS,
    "POST /v1/policies/import": {"admin"},
}
"""docs/api.md's role table: who may call each guarded route. A route the app serves
that is in neither this table nor PUBLIC_ROUTES fails the matrix."""


@dataclass(frozen=True)
class Tokens:
    by_credential: dict[str, str | None]
    names: dict[str, str]

    def header(self, credential: str) -> dict[str, str]:
        token = self.by_credential[credential]
        return {} if token is None else {"Authorization": f"Bearer {token}"}


@pytest.fixture
def tokens(committed: sessionmaker[Session]) -> Tokens:
    """One live principal of each role and one revoked, under fresh names."""
    now = datetime.now(UTC)
    admin = principals.BOOTSTRAP_ACTOR
    by_credential: dict[str, str | None] = {"none": None}
    names: dict[str, str] = {}
    with committed.begin() as session:
        for role in Role:
            name = unique(f"p-{role.value}")
            by_credential[role.value] = principals.create(
                session, name, role, by=admin, at=now
            ).token
            names[role.value] = name
        revoked = unique("p-revoked")
        by_credential["revoked"] = principals.create(
            session, revoked, Role.ADMIN, by=admin, at=now
        ).token
        principals.revoke(session, revoked, by=admin, at=now)
        names["revoked"] = revoked
    return Tokens(by_credential, names)


def _concrete(path: str) -> str:
    """A path of the route with its parameters filled with values that name nothing."""
    return (
        path.replace("{id_or_key}", "no-such:key-1")
        .replace("{suppression_id}", str(2**62))
        .replace("{name}", "no-such-principal")
        .replace("{key}", "no-such-template")
        .replace("{version}", "no-such-version")
        .replace("{value}", "not-a-signed-link")
    )


def test_every_route_of_the_app_declares_its_role_or_is_public(app: FastAPI) -> None:
    assert undeclared_routes(app) == []
    for method, path, route in app_routes(app):
        if route_access(route) is None:
            assert f"{method} {path}" in PUBLIC_ROUTES, f"{method} {path} declares no role"


def test_docs_api_md_names_the_same_roles_for_every_guarded_route() -> None:
    """The route table in docs/api.md is the role table people read: it must agree."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    documented: dict[str, set[str]] = {}
    for method, path, roles in re.findall(
        r"^\| `(\w+) (/[^`]*)` \| bearer: ([^|]+) \|", docs, re.M
    ):
        named = EVERYONE if roles.strip() == "any role" else set(roles.strip().split(", "))
        documented[f"{method} {re.sub(r'{[^}]*}', '{}', path)}"] = named
    expected = {re.sub(r"{[^}]*}", "{}", key): roles for key, roles in ROLE_TABLE.items()}
    assert documented == expected


def test_a_route_added_without_a_role_is_refused(app: FastAPI) -> None:
    @app.get("/v1/undeclared")
    async def undeclared() -> dict[str, str]:
        return {}

    assert undeclared_routes(app) == ["GET /v1/undeclared"]
    from api.auth import check_every_route_declared

    with pytest.raises(RuntimeError, match="GET /v1/undeclared"):
        check_every_route_declared(app)


async def test_the_role_matrix_over_every_route(
    app: FastAPI, http: httpx.AsyncClient, tokens: Tokens
) -> None:
    checked = 0
    served = {f"{m} {p}" for m, p, route in app_routes(app) if route_access(route) is not None}
    assert served == set(ROLE_TABLE), "a guarded route is missing from the role table"
    for method, path, route in app_routes(app):
        if method == "HEAD":
            continue
        access = route_access(route)
        allowed = ROLE_TABLE.get(f"{method} {path}", set())
        url = _concrete(path)
        statuses = {}
        for credential in CREDENTIALS:
            answer = await http.request(method, url, headers=tokens.header(credential), json={})
            statuses[credential] = answer.status_code
            if access is None:
                continue  # public: checked below, all alike
            if credential in ("none", "revoked"):
                expected = 401
            elif credential in allowed:
                assert answer.status_code not in (401, 403), (method, path, credential)
                continue
            else:
                expected = 403
                body = answer.json()
                assert body["needed_role"] == least_role_for(access).value, (method, path)
                assert least_role_for(access).value in body["detail"]
                assert tokens.by_credential[credential] not in answer.text
            assert answer.status_code == expected, (method, path, credential, answer.text)
        if access is None:
            assert len(set(statuses.values())) == 1 and 401 not in statuses.values(), (
                method,
                path,
                statuses,
            )
        checked += 1
    # Intents (5), evidence (6), attachments (1), principals (4), and the public routes.
    assert checked >= 16 + len({k for k in PUBLIC_ROUTES if not k.startswith("HEAD")}) - 1


async def test_an_app_token_cannot_approve_a_resend_settle_or_read_consent_evidence(
    http: httpx.AsyncClient, tokens: Tokens
) -> None:
    app_token = tokens.header("app")
    for path, body, needed in (
        ("/v1/intents/k:1/approve-resend", {"reason": "r"}, "operator"),
        ("/v1/intents/k:1/settle", {"reason": "r", "rule": "x"}, "operator"),
        ("/v1/consents/search", {"recipient_ref": "m-1"}, "viewer"),
    ):
        answer = await http.post(path, json=body, headers=app_token)
        assert answer.status_code == 403, (path, answer.text)
        assert answer.json()["needed_role"] == needed
    # What an app is for still works.
    assert (await http.get("/v1/intents?limit=1", headers=app_token)).status_code == 200


async def test_a_viewer_sees_destinations_masked_only(
    http: httpx.AsyncClient, tokens: Tokens, committed: sessionmaker[Session], cipher
) -> None:
    sent = submitted_attempt(committed, cipher, phone=PHONE)
    answer = await http.get(f"/v1/intents/{sent.intent_id}", headers=tokens.header("viewer"))
    assert answer.status_code == 200, answer.text
    attempt = answer.json()["attempts"][0]
    assert attempt["destination_masked"] == "+44********42"
    assert PHONE not in answer.text and PHONE[1:] not in answer.text


async def test_a_cancel_records_the_authenticated_name_whatever_the_body_says(
    http: httpx.AsyncClient, tokens: Tokens, committed: sessionmaker[Session], cipher
) -> None:
    sent = submitted_attempt(committed, cipher)
    answer = await http.post(
        f"/v1/intents/{sent.intent_id}/cancel",
        json={"operator": "someone-else", "reason": "seat filled"},
        headers=tokens.header("operator"),
    )
    assert answer.status_code == 200, answer.text
    operator = tokens.names["operator"]
    assert answer.json()["operator"] == operator
    with committed() as session:
        action = session.execute(
            select(OperatorAction).where(OperatorAction.intent_id == sent.intent_id)
        ).scalar_one()
    assert (action.operator, action.operator_role) == (operator, "operator")
    timeline = (await http.get(f"/v1/intents/{sent.intent_id}", headers=BEARER)).json()
    assert [(a["operator"], a["operator_role"]) for a in timeline["operator_actions"]] == [
        (operator, "operator")
    ]


async def test_principals_over_the_api_and_the_token_shown_once_and_never_logged(
    http: httpx.AsyncClient, committed: sessionmaker[Session], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    name = unique("support")
    added = await http.post("/v1/principals", json={"name": name, "role": "viewer"}, headers=BEARER)
    assert added.status_code == 201, added.text
    token = added.json()["token"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)  # 32 random bytes, url-safe
    later: list[httpx.Response] = []

    as_viewer = {"Authorization": f"Bearer {token}"}
    later.append(await http.get("/v1/intents?limit=1", headers=as_viewer))
    assert later[-1].status_code == 200
    later.append(await http.post("/v1/intents/k:1/cancel", json={"reason": "r"}, headers=as_viewer))
    assert later[-1].status_code == 403
    later.append(await http.get("/v1/principals", headers=BEARER))
    listed = {p["name"]: p for p in later[-1].json()["items"]}
    assert listed[name]["role"] == "viewer" and listed[name]["last_used_at"] is not None
    assert listed[name]["revoked_at"] is None
    later.append(
        await http.post("/v1/principals", json={"name": name, "role": "admin"}, headers=BEARER)
    )
    assert later[-1].status_code == 409

    # Rotate: the old token stops at once, the new one works.
    rotated = await http.post(f"/v1/principals/{name}/rotate", headers=BEARER)
    new_token = rotated.json()["token"]
    assert new_token != token
    later.append(await http.get("/v1/intents?limit=1", headers=as_viewer))
    assert later[-1].status_code == 401
    as_rotated = {"Authorization": f"Bearer {new_token}"}
    assert (await http.get("/v1/intents?limit=1", headers=as_rotated)).status_code == 200

    # Revoke: the next request is refused, with no restart.
    later.append(await http.post(f"/v1/principals/{name}/revoke", headers=BEARER))
    assert later[-1].status_code == 200 and later[-1].json()["revoked_at"]
    later.append(await http.get("/v1/intents?limit=1", headers=as_rotated))
    assert later[-1].status_code == 401

    with committed() as session:
        row = session.execute(
            select(PrincipalRecord).where(PrincipalRecord.name == name)
        ).scalar_one()
        audit = session.execute(
            select(AuditEvent.action, AuditEvent.actor, AuditEvent.actor_role)
            .where(AuditEvent.subject == name)
            .order_by(AuditEvent.id)
        ).all()
    assert token not in row.token_sha256 and row.token_sha256 == principals.token_hash(new_token)
    assert [tuple(a) for a in audit] == [
        ("principal.added", "break-glass", "admin"),
        ("principal.rotated", "break-glass", "admin"),
        ("principal.revoked", "break-glass", "admin"),
    ]
    for answer in later:
        assert token not in answer.text and row.token_sha256 not in answer.text
    logged = "\n".join(
        f"{r.getMessage()} {r.args!r} {getattr(r, '__dict__', {})!r}" for r in caplog.records
    )
    assert caplog.records, "the API logs what principals did"
    for secret in (token, new_token, principals.token_hash(token), "Bearer"):
        assert secret not in logged


def _app_principal(committed: sessionmaker[Session]) -> tuple[str, dict[str, str]]:
    name = unique("app")
    with committed.begin() as session:
        token = principals.create(
            session, name, Role.APP, by=principals.BOOTSTRAP_ACTOR, at=datetime.now(UTC)
        ).token
    return name, {"Authorization": f"Bearer {token}"}


def _order(key: str) -> dict[str, object]:
    return {
        "business_key": key,
        "recipient_ref": "m-1842",
        "template_key": "order-created",
        "template_version": 1,
        "phone": random_mobile(),
        "variables": {"order_id": "o-77"},
    }


async def test_two_apps_each_read_only_the_intents_they_created(
    http: httpx.AsyncClient, committed: sessionmaker[Session], tokens: Tokens
) -> None:
    names, headers, intents = {}, {}, {}
    for app_name in ("shop", "gym"):
        names[app_name], headers[app_name] = _app_principal(committed)
        doc = _order(unique(f"order-created:{app_name}"))
        created = await http.post("/v1/intents", json=doc, headers=headers[app_name])
        assert created.status_code == 201, created.text
        intents[app_name] = {**created.json(), "doc": doc}

    shop, gym = intents["shop"], intents["gym"]
    listed = await http.get("/v1/intents", params={"limit": 500}, headers=headers["shop"])
    keys = {item["business_key"] for item in listed.json()["items"]}
    assert shop["business_key"] in keys and gym["business_key"] not in keys
    assert {item["created_by"] for item in listed.json()["items"]} == {names["shop"]}

    # The other app's intent, by id or by key, is exactly as unknown as a missing one.
    unknown = await http.get("/v1/intents/order-created:no-such-1", headers=headers["shop"])
    for ref in (gym["intent_id"], gym["business_key"]):
        answer = await http.get(f"/v1/intents/{ref}", headers=headers["shop"])
        assert (answer.status_code, answer.json()) == (404, unknown.json())
    own = await http.get(f"/v1/intents/{shop['intent_id']}", headers=headers["shop"])
    assert own.status_code == 200 and own.json()["intent"]["created_by"] == names["shop"]

    # Recording the other app's key is an intent of its own (the key is in its own
    # namespace: tests/api/test_key_namespaces.py), never the other's id; nor does
    # replaying the Idempotency-Key the other used hand it over.
    taken = await http.post("/v1/intents", json=gym["doc"], headers=headers["shop"])
    assert taken.status_code == 201 and gym["intent_id"] not in taken.text
    key = {"Idempotency-Key": unique("idem")}
    first = await http.post("/v1/intents", json=gym["doc"], headers={**headers["gym"], **key})
    assert first.status_code == 200 and first.json()["intent_id"] == gym["intent_id"]
    replayed = await http.post("/v1/intents", json=gym["doc"], headers={**headers["shop"], **key})
    assert "idempotent-replayed" not in replayed.headers and gym["intent_id"] not in replayed.text

    # People's roles read every intent, as before.
    viewer = tokens.header("viewer")
    everyone = await http.get("/v1/intents", params={"limit": 500}, headers=viewer)
    seen = {item["business_key"] for item in everyone.json()["items"]}
    assert {shop["business_key"], gym["business_key"]} <= seen
    for ref in (shop["intent_id"], gym["intent_id"]):
        assert (await http.get(f"/v1/intents/{ref}", headers=viewer)).status_code == 200


async def test_revoking_the_last_admin_over_the_api_is_409_and_changes_nothing(
    pg_url: str, cipher
) -> None:
    from sqlalchemy import create_engine

    from ledger import migrate
    from tests.api.conftest import StubTemporal, build_app
    from tests.conftest import fresh_database

    url = fresh_database(pg_url, "herald_last_admin_api")
    migrate.upgrade(url)
    engine = create_engine(url)
    try:
        sessions = sessionmaker(engine, expire_on_commit=False)
        with sessions.begin() as session:
            principals.create(
                session,
                "only-admin",
                Role.ADMIN,
                by=principals.BOOTSTRAP_ACTOR,
                at=datetime.now(UTC),
            )
        app, _ = build_app(sessions, cipher, StubTemporal())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://herald") as http:
            refused = await http.post("/v1/principals/only-admin/revoke", headers=BEARER)
            assert refused.status_code == 409, refused.text
            assert "last active admin" in refused.json()["detail"]
            listed = await http.get("/v1/principals", headers=BEARER)
            assert [p["revoked_at"] for p in listed.json()["items"]] == [None]
    finally:
        engine.dispose()
