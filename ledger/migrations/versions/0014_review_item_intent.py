"""A review item's intent as an indexed column.

The intent page lists the review items of its intent. They were found by the intent id
inside the item's JSON detail, a scan of every review item ever filed (the table is never
purged: it is the reconciliation's record) on each page view. The id is now a column with
an index, filled from the detail for the items filed before.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07 06:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("review_item", sa.Column("intent_id", sa.String(length=36), nullable=True))
    op.execute(
        "UPDATE review_item SET intent_id = detail->>'intent_id' "
        "WHERE detail IS NOT NULL AND detail->>'intent_id' IS NOT NULL"
    )
    op.create_index("ix_review_item_intent_id", "review_item", ["intent_id"])


def downgrade() -> None:
    op.drop_index("ix_review_item_intent_id", table_name="review_item")
    op.drop_column("review_item", "intent_id")
