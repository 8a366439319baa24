"""The domain-owned ledger: SQLAlchemy tables, Alembic migrations, the repository, field crypto."""
