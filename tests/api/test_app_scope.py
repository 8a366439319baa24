"""An app does on its own credential what an app must (issue #50): it records and revokes
consent for its recipients (attributed to it), cancels the intents it created and never
another's (404, exactly as a read), and uploads attachments its email intents name."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from activities.contracts import AuthorizeInput
from activities.ledger import LedgerActivities
from domain.principals import Role
from ledger import principals
from ledger.artifacts import FolderArtifactStore, PostgresArtifactStore
from ledger.models import ArtifactContent, AuditEvent, Consent, OperatorAction
from tests.activities.test_email_send import VARIABLES as ITINERARY
from tests.api.conftest import BEARER, random_mobile
from tests.conftest import unique

pytestmark = pytest.mark.ledger

CSV = b"session_id,hands\ngs-1,184\n"


def app_principal(committed: sessionmaker[Session]) -> tuple[str, dict[str, str]]:
    name = unique("app")
    with committed.begin() as session:
        token = principals.create(
            session, name, Role.APP, by=principals.BOOTSTRAP_ACTOR, at=datetime.now(UTC)
        ).token
    return name, {"Authorization": f"Bearer {token}"}


def order(recipient: str, **overrides: object) -> dict[str, object]:
    return {
        "business_key": unique("order-created:o"),
        "recipient_ref": recipient,
        "template_key": "order-created",
        "template_version": 1,
        "phone": random_mobile(),
        "variables": {"order_id": "o-77"},
        **overrides,
    }


async def test_an_app_records_consent_and_its_intent_is_then_authorized_and_revokes_it(
    http: httpx.AsyncClient, committed: sessionmaker[Session], cipher
) -> None:
    name, app = app_principal(committed)
    recipient = unique("m")
    created = await http.post("/v1/intents", json=order(recipient), headers=app)
    assert created.status_code == 201, created.text
    intent_id = created.json()["intent_id"]
    ledger = LedgerActivities(committed, cipher)
    denied = await ledger.authorize(AuthorizeInput(intent_id, "sms", 1))
    assert (denied.outcome, denied.rule) == ("deny", "consent.missing")

    granted = await http.post(
        "/v1/consents",
        json={"recipient_ref": recipient, "channel": "sms", "source": "checkout-form"},
        headers=app,
    )

    assert granted.status_code == 201, granted.text
    grant = granted.json()
    assert (grant["recorded_by"], grant["source"], grant["live"]) == (name, "checkout-form", True)
    assert (await ledger.authorize(AuthorizeInput(intent_id, "sms", 2))).outcome == "allow"
    with committed() as session:
        row = session.get(Consent, grant["id"])
        assert row is not None and row.evidence == {
            "recorded_by": name,
            "recorded_by_role": "app",
        }
        audit = session.execute(
            select(AuditEvent.actor, AuditEvent.actor_role).where(
                AuditEvent.action == "consent.recorded",
                AuditEvent.subject == f"consent:{grant['id']}",
            )
        ).one()
    assert tuple(audit) == (name, "app")

    revoked = await http.post(
        "/v1/consents/revoke",
        json={"recipient_ref": recipient, "channel": "sms", "source": "app-settings"},
        headers=app,
    )

    assert revoked.status_code == 200, revoked.text
    assert [(c["id"], c["revoked_source"]) for c in revoked.json()["ended"]] == [
        (grant["id"], "app-settings")
    ]
    decision = await ledger.authorize(AuthorizeInput(intent_id, "sms", 3))
    assert (decision.outcome, decision.rule) == ("deny", "consent.revoked")
    # Reading consent evidence stays with people's roles.
    search = await http.post("/v1/consents/search", json={"recipient_ref": recipient}, headers=app)
    assert search.status_code == 403


async def test_an_app_cancels_its_own_intent_and_another_apps_is_404_like_a_read(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    shop_name, shop = app_principal(committed)
    _, gym = app_principal(committed)
    later = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    created = await http.post("/v1/intents", json=order(unique("m"), send_at=later), headers=shop)
    assert created.status_code == 201, created.text
    intent_id, key = created.json()["intent_id"], created.json()["business_key"]
    unknown = await http.post(
        "/v1/intents/order-created:no-such-1/cancel", json={"reason": "not needed"}, headers=gym
    )
    assert unknown.status_code == 404

    for ref in (intent_id, key):
        theirs = await http.post(
            f"/v1/intents/{ref}/cancel", json={"reason": "not needed"}, headers=gym
        )
        assert (theirs.status_code, theirs.json()) == (404, unknown.json())
        read = await http.get(f"/v1/intents/{ref}", headers=gym)
        assert (read.status_code, read.json()) == (404, unknown.json())
    with committed() as session:
        actions = session.execute(
            select(OperatorAction).where(OperatorAction.intent_id == intent_id)
        ).all()
    assert actions == [], "another app's refused cancel recorded something"

    own = await http.post(
        f"/v1/intents/{key}/cancel", json={"reason": "order withdrawn"}, headers=shop
    )

    assert own.status_code == 200, own.text
    assert own.json()["operator"] == shop_name
    with committed() as session:
        recorded = session.execute(
            select(
                OperatorAction.action, OperatorAction.operator, OperatorAction.operator_role
            ).where(OperatorAction.intent_id == intent_id)
        ).all()
    assert [tuple(r) for r in recorded] == [("cancel", shop_name, "app")]
    # An operator still cancels any intent.
    operator = await http.post(
        f"/v1/intents/{intent_id}/cancel", json={"reason": "support asked"}, headers=BEARER
    )
    assert operator.status_code == 200, operator.text


async def test_an_app_uploads_an_attachment_once_by_content_and_names_it_in_an_email_intent(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    _, app = app_principal(committed)
    data = CSV + unique("row").encode()
    digest = hashlib.sha256(data).hexdigest()

    first = await http.post(
        "/v1/attachments",
        files={"file": ("session-report.csv", data, "text/csv; charset=utf-8")},
        headers=app,
    )
    again = await http.post(
        "/v1/attachments",
        files={"file": ("other-name.csv", data, "text/csv")},
        headers=app,
    )

    assert first.status_code == 201, first.text
    assert first.json() == {
        "sha256": digest,
        "size": len(data),
        "media_type": "text/csv",
        "filename": "session-report.csv",
        "existed": False,
    }
    assert again.status_code == 200 and again.json() == {**first.json(), "existed": True}
    # The test app's store is the ledger's own table (Ingress's default).
    with committed() as session:
        stored = session.get(ArtifactContent, digest)
        assert stored is not None and bytes(stored.content) == data

    intent = await http.post(
        "/v1/intents",
        json={
            "business_key": unique("itinerary-change:t"),
            "recipient_ref": unique("m"),
            "template_key": "itinerary-change",
            "email": "traveller@example.com",
            "channels": ["email"],
            "country": "GB",
            "artifact_sha256": digest,
            "variables": ITINERARY,
        },
        headers=app,
    )
    assert intent.status_code == 201, intent.text
    never = await http.post(
        "/v1/intents",
        json={**order(unique("m")), "artifact_sha256": "ab" * 32},
        headers=app,
    )
    assert never.status_code == 422
    assert ["body", "artifact_sha256"] in [i["loc"] for i in never.json()["detail"]]


@pytest.mark.parametrize(
    ("media_type", "filename"),
    [("text/html", "page.html"), ("application/zip", "a.zip"), ("", "a.bin")],
)
async def test_an_attachment_of_another_media_type_is_415_naming_the_allowed_ones(
    http: httpx.AsyncClient, committed: sessionmaker[Session], media_type: str, filename: str
) -> None:
    _, app = app_principal(committed)
    part = (filename, b"<p>hi</p>", media_type) if media_type else (filename, b"x")
    answer = await http.post("/v1/attachments", files={"file": part}, headers=app)
    assert answer.status_code == 415, answer.text
    assert "application/pdf" in answer.json()["detail"] and "image/png" in answer.json()["detail"]


async def test_an_attachment_over_the_limit_is_413_naming_the_limit(
    committed: sessionmaker[Session], cipher
) -> None:
    from tests.api.conftest import INTERNAL_BASE, StubTemporal, build_app

    app, ingress = build_app(committed, cipher, StubTemporal(), attachment_max_bytes=1000)
    _, token = app_principal(committed)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=INTERNAL_BASE) as http:
        fits = await http.post(
            "/v1/attachments", files={"file": ("a.txt", b"a" * 1000, "text/plain")}, headers=token
        )
        over = await http.post(
            "/v1/attachments", files={"file": ("a.txt", b"b" * 1001, "text/plain")}, headers=token
        )
        # Far over: refused by the body limit before the route reads it, in the same words.
        far = await http.post(
            "/v1/attachments",
            files={"file": ("a.txt", b"c" * 100_000, "text/plain")},
            headers=token,
        )
    assert fits.status_code == 201, fits.text
    for answer in (over, far):
        assert answer.status_code == 413, answer.text
        assert answer.json()["detail"] == (
            "an attachment is at most 1000 bytes (HERALD_ATTACHMENT_MAX_BYTES)"
        )
    assert ingress.attachment_max_bytes == 1000


async def test_a_viewer_cannot_upload_and_a_filename_is_required(
    http: httpx.AsyncClient, committed: sessionmaker[Session]
) -> None:
    with committed.begin() as session:
        viewer = principals.create(
            session, unique("v"), Role.VIEWER, by=principals.BOOTSTRAP_ACTOR, at=datetime.now(UTC)
        ).token
    refused = await http.post(
        "/v1/attachments",
        files={"file": ("a.txt", b"x", "text/plain")},
        headers={"Authorization": f"Bearer {viewer}"},
    )
    assert refused.status_code == 403
    _, app = app_principal(committed)
    nameless = await http.post(
        "/v1/attachments", files={"file": ("", b"x", "text/plain")}, headers=app
    )
    assert nameless.status_code == 422


@pytest.mark.parametrize(
    ("setting", "store"), [("folder", FolderArtifactStore), ("postgres", PostgresArtifactStore)]
)
def test_herald_api_stores_uploads_where_herald_artifact_store_says(
    committed: sessionmaker[Session], cipher, tmp_path, setting: str, store: type
) -> None:
    import settings
    from api.server import build_ingress
    from starter.client import HeraldClient
    from tests.api.conftest import StubTemporal

    cfg = settings.Settings(data_dir=tmp_path, artifact_store=setting, attachment_max_bytes=4096)
    ingress = build_ingress(cfg, HeraldClient(StubTemporal(), committed, cipher))
    assert isinstance(ingress.artifacts, store)
    assert ingress.attachment_max_bytes == 4096
