"""Attachment bytes in the ledger: `artifact_content` (HERALD_ARTIFACT_STORE=postgres).

Until now an artifact's bytes lived only in one host's folder (`<data dir>/artifacts`), so
a worker on another host could not send it. With the Postgres store they live here, which
every worker and API process already reaches (ledger/artifacts.py); the `artifact` table
keeps registering them by SHA-256 either way.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07 20:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "artifact_content",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_artifact_content")),
    )


def downgrade() -> None:
    op.drop_table("artifact_content")
