"""The policy and template versions on record, for the console and the API.

As the console's Templates and Policies pages list them, and as `/v1/templates` and
`/v1/policies` serve them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ledger.errors import NotFound
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


@dataclass(frozen=True)
class TemplateSummary:
    """A template key: its channels, locales and the version active in each."""

    key: str
    channels: list[str]
    locales: list[str]
    active: list[dict[str, Any]]
    """``{"channel", "locale", "version"}`` for each channel/locale with an active version."""


def template_summaries(session: Session) -> list[TemplateSummary]:
    """Every template key, sorted, with its channels, locales and active versions."""
    rows = session.execute(
        select(
            TemplateVersionRow.key,
            TemplateVersionRow.channel,
            TemplateVersionRow.locale,
            TemplateVersionRow.version,
            TemplateVersionRow.active,
        ).order_by(
            TemplateVersionRow.key,
            TemplateVersionRow.channel,
            TemplateVersionRow.locale,
            TemplateVersionRow.version,
        )
    ).all()
    by_key: dict[str, list[Any]] = {}
    for row in rows:
        by_key.setdefault(row.key, []).append(row)
    return [
        TemplateSummary(
            key=key,
            channels=sorted({r.channel for r in versions}),
            locales=sorted({r.locale for r in versions}),
            active=[
                {"channel": r.channel, "locale": r.locale, "version": r.version}
                for r in versions
                if r.active
            ],
        )
        for key, versions in by_key.items()
    ]


def template_versions(session: Session, key: str) -> list[TemplateVersionRow]:
    """Every version of `key` (channel, locale, version order).

    Raises:
        NotFound: No template has that key (a 404 naming it).
    """
    rows = list(
        session.execute(
            select(TemplateVersionRow)
            .where(TemplateVersionRow.key == key)
            .order_by(
                TemplateVersionRow.channel, TemplateVersionRow.locale, TemplateVersionRow.version
            )
        ).scalars()
    )
    if not rows:
        raise NotFound(f"no template {key!r}", answer=f"no template {key!r}")
    return rows


def policy_versions(session: Session) -> list[PolicyVersion]:
    """Every policy version, oldest effective first."""
    return list(
        session.execute(
            select(PolicyVersion).order_by(PolicyVersion.effective_from, PolicyVersion.version)
        ).scalars()
    )


def policy_version(session: Session, version: str) -> PolicyVersion:
    """One policy version.

    Raises:
        NotFound: No such version (a 404 naming it).
    """
    row = session.get(PolicyVersion, version)
    if row is None:
        raise NotFound(f"no policy version {version!r}", answer=f"no policy version {version!r}")
    return row
