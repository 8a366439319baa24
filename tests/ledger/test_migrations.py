"""Migrations on a fresh database: a full downgrade-then-upgrade round trip, and the
schema they build is exactly the one the models describe."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from ledger import migrate
from ledger.models import Base
from tests.conftest import fresh_database

pytestmark = pytest.mark.ledger


def _schema_diff(url: str) -> list:  # type: ignore[type-arg]
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_the_migrated_schema_equals_the_models(pg_url):
    url = fresh_database(pg_url, "herald_migrations")
    migrate.upgrade(url)
    assert _schema_diff(url) == []


def test_downgrading_to_base_and_upgrading_again_round_trips(pg_url):
    url = fresh_database(pg_url, "herald_migrations")
    migrate.upgrade(url)
    models = set(Base.metadata.tables)
    assert models <= _tables(url)

    migrate.downgrade(url, "base")
    assert _tables(url) - {"alembic_version"} == set()

    migrate.upgrade(url)
    assert _tables(url) - {"alembic_version"} == models
    assert _schema_diff(url) == []


def test_0019_places_each_intent_in_its_recorders_namespace_and_keeps_its_ids(pg_url):
    """An intent recorded before key namespaces keeps its workflow id; its recorder (or,
    recorded in-process, the starter client's default) owns its key from then on."""
    from sqlalchemy import text

    url = fresh_database(pg_url, "herald_migrations")
    migrate.upgrade(url, "0017")
    engine = create_engine(url)
    intent = (
        "INSERT INTO intent (id, business_key, event_type, category, region, country, "
        "timezone, recipient_ref, channel_plan, template_key, locale, payload_sha256, "
        "workflow_id, legal_hold, created_by) VALUES (:id, :key, 'order-created', "
        "'transactional', 'default', 'GB', 'UTC', 'm-1', '{}', 'order-created', 'en', "
        "'x', :workflow, false, :by)"
    )
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO principal (name, role, token_sha256, created_by, created_at) "
                    "VALUES ('shop', 'app', 'h1', 'root', now())"
                )
            )
            for id_, key, by in (
                ("i-1", "order-created:o-1", "shop"),
                ("i-2", "order-created:o-2", None),
            ):
                conn.execute(
                    text(intent),
                    {"id": id_, "key": key, "workflow": f"notification:{key}", "by": by},
                )
        migrate.upgrade(url)
        with engine.begin() as conn:
            rows = conn.execute(
                text("SELECT id, namespace, workflow_id FROM intent ORDER BY id")
            ).all()
            assert [tuple(r) for r in rows] == [
                ("i-1", "shop", "notification:order-created:o-1"),
                ("i-2", "starter", "notification:order-created:o-2"),
            ]
            assert conn.scalar(text("SELECT namespace FROM principal")) == "shop"
            # The key is one namespace's now: another may record it.
            conn.execute(
                text(
                    intent.replace("created_by)", "created_by, namespace)").replace(
                        ":by)", ":by, 'gym')"
                    )
                ),
                {"id": "i-3", "key": "order-created:o-1", "workflow": "w", "by": "gym"},
            )
    finally:
        engine.dispose()


def test_0022_counts_every_version_on_record_as_approved_by_the_system(pg_url):
    """Versions recorded before review existed need no new approval: a rollback to one
    passes where the active policy reviews every version."""
    from sqlalchemy import text

    url = fresh_database(pg_url, "herald_migrations")
    migrate.upgrade(url, "0021")
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO template_version (key, channel, locale, version, body, sha256, "
                    "active) VALUES ('k', 'sms', 'en', 1, 'b', 'h', true)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO policy_version (version, name, document, sha256, owner, "
                    "effective_from, active) VALUES ('p-1', 'p', 'd', 'h', 'o', now(), true)"
                )
            )
        migrate.upgrade(url)
        with engine.begin() as conn:
            for table in ("template_version", "policy_version"):
                row = conn.execute(
                    text(f"SELECT author, approved_by, approved_at = created_at FROM {table}")
                ).one()
                assert tuple(row) == (None, "herald:system", True)
    finally:
        engine.dispose()
