"""The console's sign-in throttle and the search's email lookup.

the console's sign-in throttle: refused sign-ins per name and per client address, and
the sign-in forms already used (their CSRF token is good for one post); the console
search's lookup of an email address in any letter case (`herald migrate` fills it for the
intents recorded before)

Revision ID: 0011
Revises: 0010 (0010_provider_circuit)
Create Date: 2026-12-07 00:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sign_in_counter",
        sa.Column("kind", sa.String(length=10), primary_key=True),
        sa.Column("key", sa.String(length=120), primary_key=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_failure_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("blocks", sa.Integer(), nullable=False),
        sa.Column("blocked_until", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "used_sign_in_form",
        sa.Column("token_sha256", sa.String(length=64), primary_key=True),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_used_sign_in_form_used_at", "used_sign_in_form", ["used_at"])
    op.add_column("intent", sa.Column("email_search_hmac", sa.String(length=64), nullable=True))
    op.create_index("ix_intent_email_search_hmac", "intent", ["email_search_hmac"])
    # The console search finds an email attempt by its Message-ID.
    op.create_index("ix_attempt_message_id", "attempt", ["message_id"])


def downgrade() -> None:
    op.drop_index("ix_attempt_message_id", table_name="attempt")
    op.drop_index("ix_intent_email_search_hmac", table_name="intent")
    op.drop_column("intent", "email_search_hmac")
    op.drop_index("ix_used_sign_in_form_used_at", table_name="used_sign_in_form")
    op.drop_table("used_sign_in_form")
    op.drop_table("sign_in_counter")
