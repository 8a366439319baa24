"""Inbound opt-out and opt-in keywords, one row per provider message.

A STOP replayed after a START opted the number out again: an inbound webhook was applied
on every arrival. Each inbound keyword is now kept once by the provider's own id (Twilio's
MessageSid, Telnyx's event id), for as long as a replay could come (Twilio's signature
carries no time), with the provider's time where it gives one, so a keyword older than the
destination's latest is kept and not applied.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 17:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inbound_keyword",
        sa.Column("provider", sa.String(length=20), primary_key=True),
        sa.Column("provider_id", sa.String(length=120), primary_key=True),
        sa.Column("destination_hmac", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("word", sa.String(length=20), nullable=False),
        sa.Column("provider_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("applied", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_inbound_keyword_destination_hmac", "inbound_keyword", ["destination_hmac"])


def downgrade() -> None:
    op.drop_index("ix_inbound_keyword_destination_hmac", table_name="inbound_keyword")
    op.drop_table("inbound_keyword")
