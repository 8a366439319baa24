"""Template versions declare their variables; template and policy versions name their author.

`template_version.variables_schema` is the JSON Schema of the variables a version declares
(domain.template_variables); NULL for a version recorded before versions declared them,
which intake then checks by rendering, as before. The packaged catalog's declarations are
filled in by the next seed (`herald migrate`, `herald dev`): a migration does not read the
catalog. `author` is the principal who imported the version; NULL for the packaged ones
and those recorded before. When a version was recorded stays `created_at`.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-08 00:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("template_version", sa.Column("variables_schema", sa.JSON(), nullable=True))
    op.add_column("template_version", sa.Column("author", sa.String(length=120), nullable=True))
    op.add_column("policy_version", sa.Column("author", sa.String(length=120), nullable=True))


def downgrade() -> None:
    op.drop_column("policy_version", "author")
    op.drop_column("template_version", "author")
    op.drop_column("template_version", "variables_schema")
