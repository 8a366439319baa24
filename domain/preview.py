"""Preview and diff of template and policy versions: what a reviewer reads before approving.

A preview renders one template version with sample variables exactly as an attempt would
(the same sandbox, footer and limits: domain.templates.render), and shows what Herald adds
itself at send, with placeholder values: those are never variables an app must give.
Nothing is sent and nothing is stored here; the ledger records that a preview happened
(ledger.version_review.record_preview), never the sample values. A diff is a unified diff
(difflib) of two versions' sources, so a reviewer sees exactly what changes.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from domain import channels, template_variables
from domain.channels import DestinationKind
from domain.templates import TemplateError, TemplateVersion, missing_variables, render
from domain.unsubscribe import SUBSCRIPTION_LIKE

UNSUBSCRIBE_PLACEHOLDER = "https://<herald api>/v1/unsubscribe/<signed for each attempt>"
"""What the one-click unsubscribe link reads as in a preview: the real one is signed for
each attempt's token (domain.unsubscribe), which a preview has none of."""


@dataclass(frozen=True)
class AddedLink:
    """A link Herald adds to a message itself, as a preview shows it."""

    name: str
    """E.g. ``unsubscribe``."""
    where: str
    """Where it goes in the message (a header, the body)."""
    value: str
    """A placeholder: the real value is made for each attempt at send."""


@dataclass(frozen=True)
class Preview:
    """A template version rendered with sample variables, as it would be sent."""

    template_key: str
    template_version: int
    channel: str
    locale: str
    subject: str | None
    text: str
    """The body as sent, the policy's footer included."""
    sha256: str
    """The content hash an attempt with these variables would record."""
    encoding: str
    """``GSM-7`` or ``UCS-2`` for SMS, ``UTF-8`` for email."""
    segments: int
    """SMS segments billed; 0 for email."""
    links: tuple[AddedLink, ...] = ()
    """What Herald adds at send (not variables: an app never sends them)."""


def added_links(channel: str, category: str) -> tuple[AddedLink, ...]:
    """The links Herald adds to a message of `channel` and `category` at send.

    An email of a subscription-like category carries the RFC 8058 one-click unsubscribe
    headers (the email activity adds them); an SMS carries the policy's footer in its text
    instead, which the preview's text already holds.
    """
    if channels.get(channel).destination is DestinationKind.EMAIL and category in SUBSCRIPTION_LIKE:
        return (
            AddedLink(
                "unsubscribe",
                "List-Unsubscribe header, one-click (RFC 8058)",
                UNSUBSCRIBE_PLACEHOLDER,
            ),
        )
    return ()


def preview(
    template: TemplateVersion,
    variables: Mapping[str, object],
    *,
    category: str,
    footer: str | None = None,
    max_sms_segments: int = 10,
) -> Preview:
    """Render `template` with sample `variables` as an attempt of `category` would be.

    Raises:
        TemplateError: Variables are missing or of the wrong shape, each named with the
            shape it must have, as intake refuses them (domain.template_variables), or
            anything rendering an attempt refuses (domain.templates.render).
    """
    if template.schema is not None:
        # The refusals intake gives: each names the variable and the shape it must have.
        refused = template_variables.refusals(template.schema, variables)
        if refused:
            raise TemplateError(f"template {template.key!r}: {'; '.join(refused)}")
    else:  # recorded before versions declared their variables: what rendering needs
        missing = missing_variables(template, variables)
        if missing:
            raise TemplateError(
                f"template {template.key!r} v{template.version} needs {', '.join(missing)}, "
                "missing from the sample variables"
            )
    rendered = render(template, variables, footer=footer, max_sms_segments=max_sms_segments)
    return Preview(
        template_key=template.key,
        template_version=template.version,
        channel=template.channel,
        locale=template.locale,
        subject=rendered.subject,
        text=rendered.body,
        sha256=rendered.sha256,
        encoding=rendered.encoding,
        segments=rendered.segments,
        links=added_links(template.channel, category),
    )


# --------------------------------------------------------------------------- diff


def _source_lines(template: TemplateVersion | None) -> list[str]:
    if template is None:
        return []
    lines = [f"subject: {template.subject}", ""] if template.subject is not None else []
    return lines + template.body.splitlines()


def _label(key: str, version: int, channel: str, locale: str) -> str:
    return f"{key} v{version} ({channel}/{locale})"


def diff_template(old: TemplateVersion | None, new: TemplateVersion | None) -> str:
    """A unified diff of two versions of one template's channel and locale (subject first).

    Either side may be None: the version did not exist in that channel and locale, so the
    other side reads as wholly added or removed. An empty text: the sources are the same.
    """
    either = old or new
    if either is None:
        return ""
    identity = (either.key, either.channel, either.locale)
    if old is not None and new is not None and (new.key, new.channel, new.locale) != identity:
        raise TemplateError("a diff compares two versions of one template, channel and locale")
    key, channel, locale = identity
    return "\n".join(
        difflib.unified_diff(
            _source_lines(old),
            _source_lines(new),
            fromfile=_label(key, old.version, channel, locale) if old else "/dev/null",
            tofile=_label(key, new.version, channel, locale) if new else "/dev/null",
            lineterm="",
        )
    )


def diff_template_versions(
    versions: Sequence[TemplateVersion], key: str, old: int, new: int
) -> dict[tuple[str, str], str]:
    """The diff of template `key` from version `old` to `new`, per (channel, locale).

    Every channel and locale either version has; one only the newer version has reads as
    added. Identities whose sources are the same are left out.

    Raises:
        TemplateError: Neither version exists for `key`.
    """
    by_identity: dict[tuple[str, str], dict[int, TemplateVersion]] = {}
    for version in versions:
        if version.key == key and version.version in (old, new):
            by_identity.setdefault((version.channel, version.locale), {})[version.version] = version
    if not by_identity:
        raise TemplateError(f"template {key!r} has neither version {old} nor {new}")
    diffs = {
        identity: diff_template(pair.get(old), pair.get(new))
        for identity, pair in sorted(by_identity.items())
    }
    return {identity: text for identity, text in diffs.items() if text}


def diff_policies(old_version: str, old_document: str, new_version: str, new_document: str) -> str:
    """A unified diff of two policy documents (TOML text, as recorded); empty if the same."""
    return "\n".join(
        difflib.unified_diff(
            old_document.splitlines(),
            new_document.splitlines(),
            fromfile=f"policy {old_version}",
            tofile=f"policy {new_version}",
            lineterm="",
        )
    )
