"""Ledger baseline.

Revision ID: 0001
Revises:
Create Date: 2026-12-02 15:52:53.629498
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "artifact",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("media_type", sa.String(length=120), nullable=False),
        sa.Column("filename", sa.String(length=200), nullable=False),
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_artifact")),
    )
    op.create_table(
        "consent",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("recipient_ref", sa.String(length=120), nullable=False),
        sa.Column("channel", sa.String(length=10), nullable=False),
        sa.Column("purpose", sa.String(length=40), nullable=False),
        sa.Column("source", sa.String(length=120), nullable=False),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("evidence", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_consent")),
    )
    op.create_index(op.f("ix_consent_recipient_ref"), "consent", ["recipient_ref"], unique=False)
    op.create_table(
        "idempotency_record",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("response", sa.JSON(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_idempotency_record")),
    )
    op.create_table(
        "intent",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("business_key", sa.String(length=200), nullable=False),
        sa.Column("event_type", sa.String(length=80), nullable=False),
        sa.Column("category", sa.String(length=20), nullable=False),
        sa.Column("region", sa.String(length=10), nullable=False),
        sa.Column("country", sa.String(length=2), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("recipient_ref", sa.String(length=120), nullable=False),
        sa.Column("channel_plan", sa.JSON(), nullable=False),
        sa.Column("template_key", sa.String(length=80), nullable=False),
        sa.Column("template_version", sa.Integer(), nullable=True),
        sa.Column("locale", sa.String(length=16), nullable=False),
        sa.Column("payload_sha256", sa.String(length=64), nullable=False),
        sa.Column("sms_destination_ct", sa.Text(), nullable=True),
        sa.Column("sms_destination_hmac", sa.String(length=64), nullable=True),
        sa.Column("email_destination_ct", sa.Text(), nullable=True),
        sa.Column("email_destination_hmac", sa.String(length=64), nullable=True),
        sa.Column("variables_ct", sa.Text(), nullable=True),
        sa.Column("artifact_sha256", sa.String(length=64), nullable=True),
        sa.Column("send_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("workflow_id", sa.String(length=240), nullable=False),
        sa.Column("legal_hold", sa.Boolean(), nullable=False),
        sa.Column("purge_after", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pii_purged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_intent")),
        sa.UniqueConstraint("business_key", name="uq_intent_business_key"),
    )
    op.create_index(
        op.f("ix_intent_email_destination_hmac"), "intent", ["email_destination_hmac"], unique=False
    )
    op.create_index(op.f("ix_intent_event_type"), "intent", ["event_type"], unique=False)
    op.create_index(op.f("ix_intent_recipient_ref"), "intent", ["recipient_ref"], unique=False)
    op.create_index(op.f("ix_intent_region"), "intent", ["region"], unique=False)
    op.create_index(
        op.f("ix_intent_sms_destination_hmac"), "intent", ["sms_destination_hmac"], unique=False
    )
    op.create_table(
        "policy_version",
        sa.Column("version", sa.String(length=60), nullable=False),
        sa.Column("name", sa.String(length=60), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=120), nullable=False),
        sa.Column("effective_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("version", name=op.f("pk_policy_version")),
    )
    op.create_table(
        "review_item",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("subject", sa.String(length=240), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.Column("found_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_review_item")),
        sa.UniqueConstraint("kind", "subject", name="uq_review_item_kind_subject"),
    )
    op.create_table(
        "suppression",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("destination_hmac", sa.String(length=64), nullable=False),
        sa.Column("channel", sa.String(length=10), nullable=False),
        sa.Column("reason", sa.String(length=60), nullable=False),
        sa.Column("source", sa.String(length=60), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lifted_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_suppression")),
    )
    op.create_index(
        "ix_suppression_lookup", "suppression", ["destination_hmac", "channel"], unique=False
    )
    op.create_table(
        "template_version",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=80), nullable=False),
        sa.Column("channel", sa.String(length=10), nullable=False),
        sa.Column("locale", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_template_version")),
        sa.UniqueConstraint(
            "key", "channel", "locale", "version", name="uq_template_version_identity"
        ),
    )
    op.create_table(
        "operator_action",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("intent_id", sa.String(length=36), nullable=False),
        sa.Column("action", sa.String(length=30), nullable=False),
        sa.Column("operator", sa.String(length=120), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["intent_id"], ["intent.id"], name=op.f("fk_operator_action_intent_id_intent")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operator_action")),
    )
    op.create_index(
        op.f("ix_operator_action_intent_id"), "operator_action", ["intent_id"], unique=False
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("intent_id", sa.String(length=36), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["intent_id"], ["intent.id"], name=op.f("fk_outbox_intent_id_intent")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        sa.UniqueConstraint("intent_id", name=op.f("uq_outbox_intent_id")),
    )
    op.create_table(
        "policy_decision",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("intent_id", sa.String(length=36), nullable=False),
        sa.Column("channel", sa.String(length=10), nullable=False),
        sa.Column("policy_version", sa.String(length=60), nullable=False),
        sa.Column("outcome", sa.String(length=10), nullable=False),
        sa.Column("rule", sa.String(length=60), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("next_eligible_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["intent_id"], ["intent.id"], name=op.f("fk_policy_decision_intent_id_intent")
        ),
        sa.ForeignKeyConstraint(
            ["policy_version"],
            ["policy_version.version"],
            name=op.f("fk_policy_decision_policy_version_policy_version"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policy_decision")),
    )
    op.create_index(
        op.f("ix_policy_decision_intent_id"), "policy_decision", ["intent_id"], unique=False
    )
    op.create_table(
        "attempt",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("intent_id", sa.String(length=36), nullable=False),
        sa.Column("channel", sa.String(length=10), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("token", sa.String(length=240), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("remote_id", sa.String(length=80), nullable=True),
        sa.Column("decision_id", sa.BigInteger(), nullable=False),
        sa.Column("destination_ct", sa.Text(), nullable=True),
        sa.Column("destination_hmac", sa.String(length=64), nullable=False),
        sa.Column("body_ct", sa.Text(), nullable=True),
        sa.Column("subject_ct", sa.Text(), nullable=True),
        sa.Column("content_sha256", sa.String(length=64), nullable=False),
        sa.Column("template_key", sa.String(length=80), nullable=False),
        sa.Column("template_version", sa.Integer(), nullable=False),
        sa.Column("sender", sa.String(length=200), nullable=False),
        sa.Column("segments", sa.Integer(), nullable=True),
        sa.Column("error_code", sa.String(length=20), nullable=True),
        sa.Column("message_id", sa.String(length=200), nullable=True),
        sa.Column(
            "prepared_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("send_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("terminal_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("purge_after", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["decision_id"],
            ["policy_decision.id"],
            name=op.f("fk_attempt_decision_id_policy_decision"),
        ),
        sa.ForeignKeyConstraint(
            ["intent_id"], ["intent.id"], name=op.f("fk_attempt_intent_id_intent")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempt")),
        sa.UniqueConstraint(
            "intent_id", "channel", "number", name="uq_attempt_intent_channel_number"
        ),
        sa.UniqueConstraint("token", name="uq_attempt_token"),
    )
    op.create_index(
        op.f("ix_attempt_destination_hmac"), "attempt", ["destination_hmac"], unique=False
    )
    op.create_index(op.f("ix_attempt_intent_id"), "attempt", ["intent_id"], unique=False)
    op.create_index(op.f("ix_attempt_remote_id"), "attempt", ["remote_id"], unique=False)
    op.create_table(
        "observation",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("attempt_id", sa.BigInteger(), nullable=True),
        sa.Column("remote_id", sa.String(length=80), nullable=True),
        sa.Column("source", sa.String(length=20), nullable=False),
        sa.Column("raw_status", sa.String(length=40), nullable=False),
        sa.Column("normalized_status", sa.String(length=20), nullable=True),
        sa.Column("provider_code", sa.String(length=20), nullable=True),
        sa.Column("provider_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dedupe_key", sa.String(length=300), nullable=False),
        sa.Column("verdict", sa.String(length=20), nullable=True),
        sa.Column("applied", sa.Boolean(), nullable=False),
        sa.Column("conflict", sa.Boolean(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempt.id"], name=op.f("fk_observation_attempt_id_attempt")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_observation")),
        sa.UniqueConstraint("dedupe_key", name="uq_observation_dedupe"),
    )
    op.create_index(op.f("ix_observation_attempt_id"), "observation", ["attempt_id"], unique=False)
    op.create_index(op.f("ix_observation_remote_id"), "observation", ["remote_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_observation_remote_id"), table_name="observation")
    op.drop_index(op.f("ix_observation_attempt_id"), table_name="observation")
    op.drop_table("observation")
    op.drop_index(op.f("ix_attempt_remote_id"), table_name="attempt")
    op.drop_index(op.f("ix_attempt_intent_id"), table_name="attempt")
    op.drop_index(op.f("ix_attempt_destination_hmac"), table_name="attempt")
    op.drop_table("attempt")
    op.drop_index(op.f("ix_policy_decision_intent_id"), table_name="policy_decision")
    op.drop_table("policy_decision")
    op.drop_table("outbox")
    op.drop_index(op.f("ix_operator_action_intent_id"), table_name="operator_action")
    op.drop_table("operator_action")
    op.drop_table("template_version")
    op.drop_index("ix_suppression_lookup", table_name="suppression")
    op.drop_table("suppression")
    op.drop_table("review_item")
    op.drop_table("policy_version")
    op.drop_index(op.f("ix_intent_sms_destination_hmac"), table_name="intent")
    op.drop_index(op.f("ix_intent_region"), table_name="intent")
    op.drop_index(op.f("ix_intent_recipient_ref"), table_name="intent")
    op.drop_index(op.f("ix_intent_event_type"), table_name="intent")
    op.drop_index(op.f("ix_intent_email_destination_hmac"), table_name="intent")
    op.drop_table("intent")
    op.drop_table("idempotency_record")
    op.drop_index(op.f("ix_consent_recipient_ref"), table_name="consent")
    op.drop_table("consent")
    op.drop_table("artifact")
