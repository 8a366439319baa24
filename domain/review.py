"""Review before activation: who may approve a version, and when it may become active.

A version an adopter imports names its author. Where the active policy's ``[review]``
table says so (every policy version by default; templates by key), the version becomes
active only once a second principal, not its author, has approved it; a reviewer may
refuse it instead, and a refusal stands. Versions recorded before review existed, and the
ones Herald packages, count as approved by `SYSTEM`. Pure rules, no I/O: the ledger
(ledger/version_review.py) reads the facts, asks here, and writes what comes back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

SYSTEM = "herald:system"
"""Who approved the packaged versions and every version recorded before review existed.
No principal can bear the name (a principal's name has no ':'), so no one can pass for it."""


class ReviewRefused(ValueError):
    """An approval, a refusal or an activation the review rules do not allow; says why."""


class ReviewPolicyError(ValueError):
    """A malformed ``[review]`` table; the message names the field."""


@dataclass(frozen=True)
class ReviewRule:
    """A policy's ``[review]`` table: which new versions need a second principal."""

    policies: bool = True
    """Whether a policy version needs approval before it becomes active (by default, yes)."""
    templates: frozenset[str] = frozenset()
    """The template keys whose versions need approval before they become active."""

    def covers_template(self, key: str) -> bool:
        """Whether a version of template `key` needs approval before it becomes active."""
        return key in self.templates


def parse(table: Mapping[str, object]) -> ReviewRule:
    """Read a policy document's ``[review]`` table.

    Shape::

        [review]
        policies = true                         # the default
        templates = ["order-created", "class-opening"]
    """
    unknown = set(table) - {"policies", "templates"}
    if unknown:
        raise ReviewPolicyError(f"review: unknown field {sorted(unknown)[0]!r}")
    policies = table.get("policies", True)
    if not isinstance(policies, bool):
        raise ReviewPolicyError("review.policies: must be true or false")
    templates = table.get("templates", [])
    if not isinstance(templates, list) or not all(
        isinstance(key, str) and key.strip() for key in templates
    ):
        raise ReviewPolicyError("review.templates: must be a list of template keys")
    return ReviewRule(policies=policies, templates=frozenset(templates))


class Verdict(StrEnum):
    """What a reviewer says of a version."""

    APPROVED = "approved"
    REFUSED = "refused"


@dataclass(frozen=True)
class VersionReview:
    """What the ledger knows of one version's review."""

    what: str
    """The version, as a refusal names it: ``template 'order-created' v3``."""
    author: str | None
    """The principal that recorded it; None for a version recorded without one."""
    approved_by: str | None = None
    refused_by: str | None = None

    @property
    def verdict(self) -> Verdict | None:
        """The reviewer's word on it, if any has been given."""
        if self.approved_by is not None:
            return Verdict.APPROVED
        return Verdict.REFUSED if self.refused_by is not None else None

    @property
    def decided_by(self) -> str | None:
        """Who gave the verdict."""
        return self.approved_by or self.refused_by


def review(current: VersionReview, verdict: Verdict, by: str) -> VersionReview:
    """The version's review after `by` gives `verdict`, or ReviewRefused saying why not.

    A version's author never reviews it (a second principal must); a version has one
    verdict, given once: the same principal giving it again changes nothing (the same
    value comes back), anyone giving another is refused naming who decided.
    """
    if by == SYSTEM:
        raise ReviewRefused(f"{SYSTEM!r} reviews no version; a principal must")
    if current.verdict is verdict and current.decided_by == by:
        return current
    if current.verdict is not None:
        raise ReviewRefused(f"{current.what} was already {current.verdict} by {current.decided_by}")
    if current.author is not None and by == current.author:
        raise ReviewRefused(
            f"{current.what} was recorded by {by}: its author cannot {_verb(verdict)} it, "
            "a second principal must"
        )
    if verdict is Verdict.APPROVED:
        return replace(current, approved_by=by)
    return replace(current, refused_by=by)


def _verb(verdict: Verdict) -> str:
    return "approve" if verdict is Verdict.APPROVED else "refuse"


def activation_refusal(current: VersionReview, *, required: bool, rule: str) -> str | None:
    """Why the version may not become active, or None when it may.

    A refused version never becomes active; where review is `required` (by the active
    policy's `rule`, e.g. ``[review] templates of policy 2026-12-01.1``), an unapproved one
    waits for a principal other than its author to approve it. Rolling back is activating
    an earlier version: it passes when that version was approved (or recorded before
    review existed).
    """
    if current.verdict is Verdict.REFUSED:
        return f"{current.what} was refused by {current.refused_by}; it never becomes active"
    if required and current.verdict is not Verdict.APPROVED:
        author = f" ({current.author})" if current.author else ""
        return (
            f"{current.what} is not approved: {rule} requires a principal other than its "
            f"author{author} to approve it before it becomes active"
        )
    return None
