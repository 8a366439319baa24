"""Who approved or refused a template or policy version.

Review before activation (domain.review). (Who recorded a version, `author`, came with
0020.)

`approved_by`/`approved_at` and `refused_by`/`refused_at` the reviewer's word. Every
version already on record counts as approved by the system principal at the time it was
recorded: it was in use, or could be, before review existed, so a rollback to it needs no
new approval.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-08 00:50:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

SYSTEM = "herald:system"
"""domain.review.SYSTEM when this was written (a migration does not import it)."""
TABLES = ("template_version", "policy_version")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("approved_by", sa.String(length=80), nullable=True))
        op.add_column(table, sa.Column("approved_at", sa.DateTime(timezone=True), nullable=True))
        op.add_column(table, sa.Column("refused_by", sa.String(length=80), nullable=True))
        op.add_column(table, sa.Column("refused_at", sa.DateTime(timezone=True), nullable=True))
        op.execute(f"UPDATE {table} SET approved_by = '{SYSTEM}', approved_at = created_at")


def downgrade() -> None:
    for table in TABLES:
        for column in ("refused_at", "refused_by", "approved_at", "approved_by"):
            op.drop_column(table, column)
