"""An intent pins the template version of each channel at intake: `intent.template_pins`.

Until now an intent that named no version rendered with whichever version was active at
each attempt, so a fallback or a resend after a rollback sent other text than the first
attempt. Intake now records, per channel of the plan, the locale and version it chose
(`{"sms": {"locale": "en", "version": 2}, ...}`); every attempt renders with it.

Intents recorded before keep null and today's rule (the version active at the attempt):
what was active when they were recorded is not known, and a guess would be evidence
Herald cannot stand behind (docs/domain.md, "Templates").

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-08 00:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("intent", sa.Column("template_pins", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("intent", "template_pins")
