"""Business keys belong to their app: two apps use one key without colliding or learning
of each other, and intents recorded before namespaces keep their ids and tokens
(docs/api.md, "How keys are scoped")."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from domain import keys
from domain.principals import Role
from domain.states import AttemptState
from ledger import observations, principals
from ledger import repository as repo
from ledger.errors import PrincipalExists
from ledger.models import Intent
from tests.api.conftest import BEARER, StubTemporal, post_signed, random_mobile
from tests.api.test_receipts import path_for, receipt
from tests.conftest import unique
from tests.ledger.conftest import fields, make_attempt

pytestmark = pytest.mark.ledger


def app_principal(
    committed: sessionmaker[Session], namespace: str | None = None
) -> tuple[str, dict[str, str]]:
    name = unique("app")
    with committed.begin() as session:
        token = principals.create(
            session,
            name,
            Role.APP,
            by=principals.BOOTSTRAP_ACTOR,
            at=datetime.now(UTC),
            namespace=namespace,
        ).token
    return name, {"Authorization": f"Bearer {token}"}


def order(key: str, order_id: str) -> dict[str, object]:
    return {
        "business_key": key,
        "recipient_ref": "m-1842",
        "template_key": "order-created",
        "template_version": 1,
        "phone": random_mobile(),
        "variables": {"order_id": order_id},
    }


async def test_two_apps_record_one_business_key_with_different_bodies_and_never_meet(
    http: httpx.AsyncClient, committed: sessionmaker[Session], temporal: StubTemporal
) -> None:
    key = unique("order-created:o")
    shop, shop_auth = app_principal(committed)
    gym, gym_auth = app_principal(committed)
    created, bodies = {}, {}
    for name, auth, order_id in ((shop, shop_auth, "o-1"), (gym, gym_auth, "o-2")):
        bodies[name] = order(key, order_id)
        answer = await http.post("/v1/intents", json=bodies[name], headers=auth)
        assert answer.status_code == 201, answer.text
        created[name] = answer.json()
        # The key's namespace (the principal's name by default) is in its workflow id.
        assert created[name]["workflow_id"] == f"notification:{name}~{key}"
        assert created[name]["business_key"] == key
    assert created[shop]["intent_id"] != created[gym]["intent_id"]
    assert {c["workflow_id"] for c in created.values()} <= set(temporal.starts)

    # Each reads its own by key; the other's id is as unknown as a missing one.
    unknown = await http.get("/v1/intents/order-created:no-such-1", headers=shop_auth)
    for name, auth, other in ((shop, shop_auth, gym), (gym, gym_auth, shop)):
        own = await http.get(f"/v1/intents/{key}", headers=auth)
        assert own.status_code == 200, own.text
        assert own.json()["intent"]["id"] == created[name]["intent_id"]
        theirs = await http.get(f"/v1/intents/{created[other]['intent_id']}", headers=auth)
        assert (theirs.status_code, theirs.json()) == (404, unknown.json())
        named = await http.get(f"/v1/intents/{other}~{key}", headers=auth)
        assert (named.status_code, named.json()) == (404, unknown.json())

    # The same app replaying its key gets its own intent back.
    again = await http.post("/v1/intents", json=bodies[shop], headers=shop_auth)
    assert again.status_code == 200 and again.json()["intent_id"] == created[shop]["intent_id"]
    # Another body under its own key is still a conflict, within its namespace alone.
    changed = {**bodies[shop], "variables": {"order_id": "o-9"}}
    other = await http.post("/v1/intents", json=changed, headers=shop_auth)
    assert other.status_code == 409 and created[gym]["intent_id"] not in other.text
    assert "another principal" not in other.text

    # A person names which one with NAMESPACE~KEY; a bare key held by two is refused in words.
    for name in (shop, gym):
        read = await http.get(f"/v1/intents/{name}~{key}", headers=BEARER)
        assert read.json()["intent"]["id"] == created[name]["intent_id"]
    both = await http.get(f"/v1/intents/{key}", headers=BEARER)
    assert both.status_code == 404 and "several namespaces" in both.json()["detail"]


async def test_a_declared_namespace_names_the_keys_and_holds_no_contact_data(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    namespace = unique("billing")
    _, auth = app_principal(committed, namespace)
    key = unique("invoice-due:i")
    answer = await http.post("/v1/intents", json=order(key, "o-1"), headers=auth)
    assert answer.json()["workflow_id"] == f"notification:{namespace}~{key}"
    with committed.begin() as session, pytest.raises(ValueError, match="phone number"):
        principals.create(
            session,
            unique("app"),
            Role.APP,
            by=principals.BOOTSTRAP_ACTOR,
            at=datetime.now(UTC),
            namespace="shop-447911123456",
        )
    with committed.begin() as session, pytest.raises(PrincipalExists):
        principals.create(
            session,
            unique("app"),
            Role.APP,
            by=principals.BOOTSTRAP_ACTOR,
            at=datetime.now(UTC),
            namespace=namespace.upper(),
        )


async def test_an_intent_recorded_before_namespaces_keeps_its_ids_and_is_read_replayed_cancelled_and_receipted(  # noqa: E501
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher, temporal: StubTemporal
) -> None:
    # What migration 0019 leaves of an intent the app recorded before: in its recorder's
    # namespace, with the workflow id and the token of the bare key.
    name, auth = app_principal(committed)
    key = unique("order-created:o")
    with committed.begin() as session:
        recorded_fields = fields(session, cipher, key)
        recorded_fields = type(recorded_fields)(
            **{**recorded_fields.__dict__, "namespace": name, "created_by": name}
        )
        recorded = repo.record_intent(session, recorded_fields)
        session.execute(
            update(Intent)
            .where(Intent.id == recorded.intent_id)
            .values(workflow_id=keys.workflow_id(key))
        )
        attempt = make_attempt(session, cipher, recorded.intent_id, key, rule="allow")
        remote_id = unique("SM")
        observations.record_observation(
            session,
            observations.ObservationFacts(
                source="send",
                raw_status="queued",
                normalized=AttemptState.SUBMITTED,
                observed_at=datetime.now(UTC),
                dedupe_key=f"send:{attempt.token}",
                remote_id=remote_id,
            ),
            token=attempt.token,
        )
    legacy_workflow = f"notification:{key}"
    assert attempt.token == f"{key}:sms:1"

    read = await http.get(f"/v1/intents/{key}", headers=auth)
    assert read.status_code == 200 and read.json()["intent"]["id"] == recorded.intent_id
    assert read.json()["intent"]["workflow_id"] == legacy_workflow

    # The app replaying its key after the upgrade gets it back, not a second intent.
    body = {
        "business_key": key,
        "recipient_ref": "m-1842",
        "template_key": "demo",
        "phone": "+447400000100",
        "variables": {"n": 1, "intent_id": key},
    }
    replayed = await http.post("/v1/intents", json=body, headers=auth)
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["intent_id"] == recorded.intent_id
    assert replayed.json()["workflow_id"] == legacy_workflow

    # A new attempt of it is made in the scheme its workflow id was made in.
    assert keys.attempt_token(keys.identity_of_workflow(legacy_workflow), "email", 1) == (
        f"{key}:email:1"
    )

    answer = await post_signed(http, path_for(attempt.token), receipt(remote_id, "delivered"))
    assert answer.status_code == 204
    assert [(wid, arg.state) for wid, _, arg in temporal.signals] == [
        (legacy_workflow, "delivered")
    ]

    temporal.closes_at_update = True
    cancelled = await http.post(
        f"/v1/intents/{key}/cancel", json={"reason": "customer asked"}, headers=BEARER
    )
    assert cancelled.status_code == 200, cancelled.text
    assert temporal.closed == {legacy_workflow}


async def test_an_admin_adds_an_app_with_its_namespace_over_the_api(
    http: httpx.AsyncClient,
) -> None:
    namespace = unique("shop")
    added = await http.post(
        "/v1/principals",
        json={"name": unique("app"), "role": "app", "namespace": namespace},
        headers=BEARER,
    )
    assert added.status_code == 201, added.text
    listed = (await http.get("/v1/principals", headers=BEARER)).json()["items"]
    assert {p["namespace"] for p in listed if p["name"] == added.json()["name"]} == {namespace}
    taken = await http.post(
        "/v1/principals",
        json={"name": unique("app"), "role": "app", "namespace": namespace},
        headers=BEARER,
    )
    assert taken.status_code == 409 and "belongs to principal" in taken.json()["detail"]
    phone = await http.post(
        "/v1/principals",
        json={"name": unique("app"), "role": "app", "namespace": "shop-447911123456"},
        headers=BEARER,
    )
    assert phone.status_code == 422
    (issue,) = phone.json()["detail"]
    assert issue["loc"] == ["body", "namespace"] and "447911" not in issue["msg"]
