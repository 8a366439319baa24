"""The policy and template versions on record, as the console's policy page lists them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ledger.models import PolicyVersion, TemplateVersionRow


def policies(session: Session) -> list[PolicyVersion]:
    """Every policy version, the active one first, then the newest first."""
    return list(
        session.execute(
            select(PolicyVersion).order_by(
                PolicyVersion.active.desc(), PolicyVersion.created_at.desc()
            )
        ).scalars()
    )


def templates(session: Session) -> list[TemplateVersionRow]:
    """Every template version, by key, channel and locale, the newest version first."""
    return list(
        session.execute(
            select(TemplateVersionRow).order_by(
                TemplateVersionRow.key,
                TemplateVersionRow.channel,
                TemplateVersionRow.locale,
                TemplateVersionRow.version.desc(),
            )
        ).scalars()
    )
