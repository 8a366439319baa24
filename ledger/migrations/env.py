"""Alembic environment: the URL comes from the caller (ledger.migrate) or HERALD_DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from ledger.models import Base

config = context.config
url: str = config.get_main_option("sqlalchemy.url") or ""
if not url:
    import settings

    url = settings.load().resolved_database_url()

target_metadata = Base.metadata


def run() -> None:
    """Run the migrations on the given connection, else on the configured URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run()
