"""The archive's tombstones: closed intents past the policy's evidence retention.

Ledger rows were never deleted: purge nulls the contact data and keeps the rest for
ever. A closed intent older than `[retention] evidence_days` is now exported as canonical
JSON into `archived_intent` (with its SHA-256 and a hash chain over every tombstone) in
the transaction that deletes its rows from the hot tables (ledger/archive.py).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 19:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "archived_intent",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("intent_id", sa.String(length=36), nullable=False),
        sa.Column("business_key", sa.String(length=200), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_activity_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("policy_version", sa.String(length=60), nullable=False),
        sa.Column("evidence_days", sa.Integer(), nullable=False),
        sa.Column("row_counts", sa.JSON(), nullable=False),
        sa.Column("document", sa.Text(), nullable=True),
        sa.Column("document_sha256", sa.String(length=64), nullable=False),
        sa.Column("chain_sha256", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_archived_intent"),
        sa.UniqueConstraint("intent_id", name="uq_archived_intent_intent_id"),
        sa.UniqueConstraint("business_key", name="uq_archived_intent_business_key"),
    )


def downgrade() -> None:
    op.drop_table("archived_intent")
