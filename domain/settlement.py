"""Settling ambiguity: the policy's settlement rules and who may resend after them.

An `unknown` attempt is a question, not an answer. A person answers it under a named
settlement rule of the policy version active when they do: the rule says what outcome it
records, what evidence it needs and whether a resend may follow. Pure rules, no I/O: the
workflow's `settle` validator, the ledger's settlement and the surfaces that offer the
rules all ask this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from domain.states import AttemptState


class SettlementOutcome(StrEnum):
    """What a settlement records about the attempt."""

    DELIVERED = "delivered"
    NOT_DELIVERED = "not_delivered"
    """It did not reach the person; trying again may."""
    UNDELIVERABLE = "undeliverable"
    """It cannot reach the person at this destination."""

    @property
    def state(self) -> AttemptState:
        """The attempt state the settlement's observation carries."""
        return _OUTCOME_STATE[self]


_OUTCOME_STATE: dict[SettlementOutcome, AttemptState] = {
    SettlementOutcome.DELIVERED: AttemptState.DELIVERED,
    SettlementOutcome.NOT_DELIVERED: AttemptState.UNDELIVERED,
    SettlementOutcome.UNDELIVERABLE: AttemptState.FAILED,
}


class Evidence(StrEnum):
    """What a rule needs before a person may settle under it."""

    PROVIDER_LOOKUP = "provider_lookup"
    """A provider lookup of the attempt, recorded within `LOOKUP_FRESH_FOR`."""
    REFERENCE = "reference"
    """A reference the operator gives, such as a carrier ticket number."""
    RECIPIENT_WORD = "recipient_word"
    """The recipient's own word; the reference says how and when it was given."""


class Awaiting(StrEnum):
    """What an intent's workflow waits for from an operator (the ledger's `intent.awaiting`)."""

    SETTLEMENT = "settlement"
    """A settlement of its unknown attempt, until the policy's settlement window closes."""
    RESEND = "resend"
    """An approve-resend, after a settlement or failure that allows one."""


AWAITING_ANY = "any"
"""The lists' filter value for an intent that waits for an operator, whatever for."""
AWAITING_FILTERS = (AWAITING_ANY, *(a.value for a in Awaiting))
"""The values the intents lists' `awaiting` filter takes."""


LOOKUP_FRESH_FOR = timedelta(minutes=30)
"""How long a provider lookup stands as evidence for a settlement."""

LOOKUP_WINDOW = timedelta(minutes=2)
"""How long an operator's lookup keeps asking a provider that fails (timeouts, 5xx)
before the `lookup` update fails with the reason."""

DEFAULT_WINDOW_SECONDS = 86_400
"""The settlement window when a policy names none: a day after the unknown verdict."""


@dataclass(frozen=True)
class SettlementRule:
    """One named way to settle an unknown attempt."""

    name: str
    """E.g. ``carrier-confirmed-not-delivered``: recorded with every settlement."""
    outcome: SettlementOutcome
    evidence: Evidence
    resend_allowed: bool
    """Whether an operator may approve a resend after a settlement under this rule."""
    description: str = ""

    def offered(self, *, provider_has_lookup: bool) -> bool:
        """A rule that needs a lookup is not offered where the provider has none (SMTP)."""
        return provider_has_lookup or self.evidence != Evidence.PROVIDER_LOOKUP

    def as_dict(self) -> dict[str, object]:
        """The rule as the API, the CLI and the console show it."""
        return {
            "name": self.name,
            "outcome": self.outcome.value,
            "evidence": self.evidence.value,
            "resend_allowed": self.resend_allowed,
            "description": self.description,
        }


@dataclass(frozen=True)
class SettlementPolicy:
    """The settlement part of one policy version."""

    window_seconds: int = DEFAULT_WINDOW_SECONDS
    """How long after an unknown verdict the workflow stays open for a settlement."""
    rules: tuple[SettlementRule, ...] = ()

    def rule(self, name: str) -> SettlementRule | None:
        """The rule of that name, or None."""
        return next((r for r in self.rules if r.name == name), None)

    def offered(self, *, provider_has_lookup: bool) -> tuple[SettlementRule, ...]:
        """The rules an operator may choose for an attempt with or without a lookup."""
        return tuple(r for r in self.rules if r.offered(provider_has_lookup=provider_has_lookup))


class SettlementPolicyError(ValueError):
    """The [settlement] table of a policy document is malformed; the message names the field."""


def parse(table: Mapping[str, object]) -> SettlementPolicy:
    """Read a policy document's ``[settlement]`` table.

    Shape::

        [settlement]
        window_seconds = 86400
        [settlement.rules.carrier-confirmed-not-delivered]
        outcome = "not_delivered"
        evidence = "provider_lookup"
        resend_allowed = true
        description = "..."
    """
    unknown = set(table) - {"window_seconds", "rules"}
    if unknown:
        raise SettlementPolicyError(f"settlement: unknown field {sorted(unknown)[0]!r}")
    window = table.get("window_seconds", DEFAULT_WINDOW_SECONDS)
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise SettlementPolicyError("settlement.window_seconds: must be a whole number >= 1")
    rules_table = table.get("rules", {})
    if not isinstance(rules_table, dict):
        raise SettlementPolicyError("settlement.rules: must be a table of named rules")
    rules: list[SettlementRule] = []
    for name, body in rules_table.items():
        where = f"settlement.rules.{name}"
        if not isinstance(body, dict):
            raise SettlementPolicyError(f"{where}: must be a table")
        extra = set(body) - {"outcome", "evidence", "resend_allowed", "description"}
        if extra:
            raise SettlementPolicyError(f"{where}: unknown field {sorted(extra)[0]!r}")
        try:
            outcome = SettlementOutcome(str(body.get("outcome")))
        except ValueError:
            raise SettlementPolicyError(
                f"{where}.outcome: one of {', '.join(SettlementOutcome)}"
            ) from None
        try:
            evidence = Evidence(str(body.get("evidence")))
        except ValueError:
            raise SettlementPolicyError(f"{where}.evidence: one of {', '.join(Evidence)}") from None
        resend = body.get("resend_allowed")
        if not isinstance(resend, bool):
            raise SettlementPolicyError(f"{where}.resend_allowed: must be true or false")
        if resend and outcome == SettlementOutcome.DELIVERED:
            raise SettlementPolicyError(
                f"{where}.resend_allowed: a rule that records delivered cannot allow a resend"
            )
        description = body.get("description", "")
        if not isinstance(description, str):
            raise SettlementPolicyError(f"{where}.description: must be a string")
        rules.append(SettlementRule(name, outcome, evidence, resend, description))
    return SettlementPolicy(window_seconds=window, rules=tuple(rules))


@dataclass(frozen=True)
class SettlementClaim:
    """What an operator puts forward when they settle an attempt."""

    rule: str
    reason: str
    reference: str = ""
    """The carrier ticket, or how the recipient gave their word."""
    lookup_at: datetime | None = None
    """When the latest provider lookup of this attempt was recorded (None: never)."""


def refusal(
    policy: SettlementPolicy,
    claim: SettlementClaim,
    *,
    current: AttemptState,
    current_by_operator: bool,
    provider_has_lookup: bool,
    now: datetime,
    window_until: datetime | None,
) -> str | None:
    """Why this settlement may not be made now, or None when it may."""
    rule = policy.rule(claim.rule)
    if rule is None:
        names = ", ".join(r.name for r in policy.offered(provider_has_lookup=provider_has_lookup))
        return f"no settlement rule {claim.rule!r} in the active policy (rules: {names or 'none'})"
    if not rule.offered(provider_has_lookup=provider_has_lookup):
        return f"rule {rule.name} needs a provider lookup and this attempt's provider has none"
    if current != AttemptState.UNKNOWN and not current_by_operator:
        return (
            f"the attempt is {current}, not unknown: only an ambiguous attempt (or an "
            "operator's earlier settlement) can be settled"
        )
    if current_by_operator and current == rule.outcome.state:
        return f"the attempt is already settled as {current}"
    if window_until is None:
        return "the intent is not waiting for a settlement"
    if now >= window_until:
        return f"the settlement window closed at {window_until.isoformat()}; it expired unsettled"
    if not claim.reason.strip():
        return "a settlement needs a reason"
    if rule.evidence in (Evidence.REFERENCE, Evidence.RECIPIENT_WORD) and not claim.reference:
        what = (
            "a reference (e.g. a carrier ticket)"
            if rule.evidence == Evidence.REFERENCE
            else ("a reference saying how the recipient gave their word")
        )
        return f"rule {rule.name} needs {what}"
    if rule.evidence == Evidence.PROVIDER_LOOKUP:
        if claim.lookup_at is None:
            return f"rule {rule.name} needs a provider lookup first (herald settle --lookup)"
        if now - claim.lookup_at > LOOKUP_FRESH_FOR:
            return (
                f"rule {rule.name} needs a provider lookup from the last "
                f"{int(LOOKUP_FRESH_FOR.total_seconds() // 60)} minutes"
            )
    return None


@dataclass(frozen=True)
class Standing:
    """An operator's settlement that still stands on an attempt."""

    rule: str
    resend_allowed: bool


def resend_refusal(
    state: AttemptState, settlement: Standing | None, *, permanent_error: str | None = None
) -> str | None:
    """Whether an approved resend may follow the attempt's latest state.

    After an operator's settlement: if and only if its rule allows a resend, whatever the
    state it recorded. Otherwise only a retryable failure the provider reported (not a
    permanent one, `permanent_error` says why). `unknown` alone never suffices.
    """
    if settlement is not None:
        if settlement.resend_allowed:
            return None
        return f"settled under rule {settlement.rule}, which does not allow a resend"
    if state == AttemptState.UNKNOWN:
        return "the attempt's outcome is unknown: settle it first under a settlement rule"
    if state in (AttemptState.FAILED, AttemptState.UNDELIVERED):
        return permanent_error
    return f"the attempt is {state}; a resend needs a retryable failure or a settlement"
