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
