"""who revoked a consent and who lifted a suppression.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-04 02:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("consent", sa.Column("revoked_source", sa.String(length=120), nullable=True))
    op.add_column("suppression", sa.Column("lifted_source", sa.String(length=60), nullable=True))


def downgrade() -> None:
    op.drop_column("suppression", "lifted_source")
    op.drop_column("consent", "revoked_source")
