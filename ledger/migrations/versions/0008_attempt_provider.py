"""The provider alias that took an attempt.

The policy's first provider for the attempt's channel and region.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07 00:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Null on attempts prepared before providers were data: those went through the
    # channel's only adapter of the time (twilio, smtp), which is what readers show.
    op.add_column("attempt", sa.Column("provider", sa.String(length=40), nullable=True))


def downgrade() -> None:
    op.drop_column("attempt", "provider")
