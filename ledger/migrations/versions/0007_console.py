"""The operator console's tables and indexes.

the operator console: signed-in sessions, who resolved a review item and why, and the
indexes its pages read by

Revision ID: 0007
Revises: 0004
Create Date: 2026-12-06 20:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_session",
        sa.Column("id_sha256", sa.String(length=64), primary_key=True),
        sa.Column("principal", sa.String(length=120), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("csrf_token", sa.String(length=64), nullable=False),
        sa.Column("credential_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.add_column("review_item", sa.Column("resolved_by", sa.String(length=120), nullable=True))
    op.add_column("review_item", sa.Column("resolution_note", sa.Text(), nullable=True))
    # The console's list is newest first with keyset paging, filtered by any of these.
    op.create_index(
        "ix_intent_created_id", "intent", [sa.text("created_at DESC"), sa.text("id DESC")]
    )
    op.create_index(
        "ix_intent_business_key_prefix",
        "intent",
        ["business_key"],
        postgresql_ops={"business_key": "text_pattern_ops"},
    )
    op.create_index("ix_intent_category_created", "intent", ["category", "created_at"])
    op.create_index(
        "ix_intent_event_type_created",
        "intent",
        ["event_type", sa.text("created_at DESC"), sa.text("id DESC")],
    )
    op.create_index(
        "ix_intent_region_created",
        "intent",
        ["region", sa.text("created_at DESC"), sa.text("id DESC")],
    )
    op.create_index("ix_attempt_state_intent", "attempt", ["state", "intent_id"])
    op.create_index("ix_attempt_prepared_at", "attempt", ["prepared_at"])
    op.create_index(
        "ix_review_item_open",
        "review_item",
        ["kind"],
        postgresql_where=sa.text("resolved_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_review_item_open", table_name="review_item")
    op.drop_index("ix_attempt_prepared_at", table_name="attempt")
    op.drop_index("ix_attempt_state_intent", table_name="attempt")
    op.drop_index("ix_intent_region_created", table_name="intent")
    op.drop_index("ix_intent_event_type_created", table_name="intent")
    op.drop_index("ix_intent_category_created", table_name="intent")
    op.drop_index("ix_intent_business_key_prefix", table_name="intent")
    op.drop_index("ix_intent_created_id", table_name="intent")
    op.drop_column("review_item", "resolution_note")
    op.drop_column("review_item", "resolved_by")
    op.drop_table("console_session")
