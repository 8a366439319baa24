"""Business keys belong to a namespace: two apps may use one key without meeting.

A principal gets the namespace of the keys it records (its name, for every principal made
before); an intent and a tombstone get their key's namespace, and the one-key-one-intent
constraint becomes one key per namespace. An intent recorded before keeps its workflow id
and attempt tokens (both stored; new attempts read their scheme from the workflow id) and
is placed in its recorder's namespace, so the app that recorded it still replays, reads
and cancels it by key: `created_by`, else the starter client's default namespace.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 20:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

STARTER = "starter"
"""domain.keys.DEFAULT_NAMESPACE when this was written (a migration does not import it)."""


def upgrade() -> None:
    op.add_column("principal", sa.Column("namespace", sa.String(length=80), nullable=True))
    op.execute("UPDATE principal SET namespace = name")
    op.alter_column("principal", "namespace", nullable=False)
    op.create_unique_constraint("uq_principal_namespace", "principal", ["namespace"])

    op.add_column("intent", sa.Column("namespace", sa.String(length=80), nullable=True))
    op.execute(f"UPDATE intent SET namespace = coalesce(created_by, '{STARTER}')")
    op.alter_column("intent", "namespace", nullable=False)
    op.drop_constraint("uq_intent_business_key", "intent", type_="unique")
    op.create_unique_constraint(
        "uq_intent_namespace_business_key", "intent", ["namespace", "business_key"]
    )

    op.add_column("archived_intent", sa.Column("namespace", sa.String(length=80), nullable=True))
    op.add_column("archived_intent", sa.Column("workflow_id", sa.String(length=240), nullable=True))
    # The recorder is in the document (moved to cold storage: the starter's namespace).
    op.execute(
        "UPDATE archived_intent SET "
        "workflow_id = 'notification:' || business_key, "
        "namespace = coalesce("
        "(CASE WHEN document IS NULL THEN NULL "
        "ELSE (document::json -> 'intent' ->> 'created_by') END), "
        f"'{STARTER}')"
    )
    op.alter_column("archived_intent", "namespace", nullable=False)
    op.alter_column("archived_intent", "workflow_id", nullable=False)
    op.drop_constraint("uq_archived_intent_business_key", "archived_intent", type_="unique")
    op.create_unique_constraint(
        "uq_archived_intent_namespace_business_key",
        "archived_intent",
        ["namespace", "business_key"],
    )


def downgrade() -> None:
    # Only while no key is recorded in two namespaces (the old constraint would refuse).
    op.drop_constraint(
        "uq_archived_intent_namespace_business_key", "archived_intent", type_="unique"
    )
    op.create_unique_constraint(
        "uq_archived_intent_business_key", "archived_intent", ["business_key"]
    )
    op.drop_column("archived_intent", "workflow_id")
    op.drop_column("archived_intent", "namespace")
    op.drop_constraint("uq_intent_namespace_business_key", "intent", type_="unique")
    op.create_unique_constraint("uq_intent_business_key", "intent", ["business_key"])
    op.drop_column("intent", "namespace")
    op.drop_constraint("uq_principal_namespace", "principal", type_="unique")
    op.drop_column("principal", "namespace")
