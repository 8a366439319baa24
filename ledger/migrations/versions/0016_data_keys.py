"""The data keys the ledger has met, and the keys it keeps under them.

A process started with a ring that lacked the ledger's key ran until its first activity,
which then retried for ever; and the lookup HMAC and action-proof keys were derived from
the ring's last key, so that key could never leave. `data_key` records every key id with
a check value (a process whose ring cannot read the ledger is refused at start), and
`ledger_secret` keeps the lookup and action-proof keys encrypted under the ring, so a
rotation re-encrypts them like any other field (ledger.keys).

The key ids already in use are found here, once, from the ciphertexts' prefixes (their
check values are filled by the first process whose ring holds them).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07 18:45:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# The encrypted columns as of this revision (ledger.contact_data.ENCRYPTED_COLUMNS holds the
# current list; a migration keeps its own, as it ran).
_ENCRYPTED = (
    ("intent", "sms_destination_ct"),
    ("intent", "email_destination_ct"),
    ("intent", "variables_ct"),
    ("attempt", "destination_ct"),
    ("attempt", "body_ct"),
    ("attempt", "subject_ct"),
)


def upgrade() -> None:
    op.create_table(
        "data_key",
        sa.Column("kid", sa.String(length=40), primary_key=True),
        sa.Column("check_value", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "ledger_secret",
        sa.Column("name", sa.String(length=40), primary_key=True),
        sa.Column("value_ct", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    in_use = " UNION ".join(
        f"SELECT DISTINCT split_part({column}, ':', 1) AS kid FROM {table} "
        f"WHERE {column} IS NOT NULL"
        for table, column in _ENCRYPTED
    )
    op.execute(
        f"INSERT INTO data_key (kid, check_value, created_at) "
        f"SELECT kid, NULL, now() FROM ({in_use}) AS found"
    )


def downgrade() -> None:
    op.drop_table("ledger_secret")
    op.drop_table("data_key")
