"""who created each intent: an app principal reads only the intents it created.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07 01:35:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Null for intents recorded before, or in-process through `starter` (no principal).
    op.add_column("intent", sa.Column("created_by", sa.String(length=120), nullable=True))
    # An app's list: its own intents, newest first.
    op.create_index(
        "ix_intent_created_by_created",
        "intent",
        ["created_by", sa.text("created_at DESC"), sa.text("id DESC")],
    )


def downgrade() -> None:
    op.drop_index("ix_intent_created_by_created", table_name="intent")
    op.drop_column("intent", "created_by")
