"""Settling ambiguity: the settlement standing on an attempt, what a workflow waits for.

Which operator's settlement stands on an attempt, what an intent's workflow waits for and
until when, and a review item's event type and category as columns.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 00:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("attempt", sa.Column("settled_rule", sa.String(length=60), nullable=True))
    op.add_column("attempt", sa.Column("settled_resend_allowed", sa.Boolean(), nullable=True))
    op.add_column("intent", sa.Column("awaiting", sa.String(length=20), nullable=True))
    op.add_column("intent", sa.Column("awaiting_until", sa.DateTime(timezone=True), nullable=True))
    # A review item's exposure as columns (it was only in the JSON detail): the overview
    # groups every open item by them on each view.
    op.add_column("review_item", sa.Column("event_type", sa.String(length=80), nullable=True))
    op.add_column("review_item", sa.Column("category", sa.String(length=20), nullable=True))
    op.execute(
        "UPDATE review_item SET event_type = detail->>'event_type', "
        "category = detail->>'category' WHERE detail IS NOT NULL"
    )
    # The console's "needs attention": intents waiting for an operator, soonest first.
    op.create_index(
        "ix_intent_awaiting_until",
        "intent",
        ["awaiting_until"],
        postgresql_where=sa.text("awaiting IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_intent_awaiting_until", table_name="intent")
    op.drop_column("review_item", "category")
    op.drop_column("review_item", "event_type")
    op.drop_column("intent", "awaiting_until")
    op.drop_column("intent", "awaiting")
    op.drop_column("attempt", "settled_resend_allowed")
    op.drop_column("attempt", "settled_rule")
