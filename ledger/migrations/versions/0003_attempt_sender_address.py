"""the real sender an attempt's policy alias resolved to.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-04 02:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("attempt", sa.Column("sender_address", sa.String(length=200), nullable=True))


def downgrade() -> None:
    op.drop_column("attempt", "sender_address")
