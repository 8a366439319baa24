"""Suppressions for one message category (complaints, unsubscribes), and their evidence.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 00:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Null: every category, as every suppression recorded before this one meant.
    op.add_column("suppression", sa.Column("category", sa.String(length=20), nullable=True))
    op.add_column("suppression", sa.Column("evidence", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("suppression", "evidence")
    op.drop_column("suppression", "category")
