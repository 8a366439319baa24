"""Why an operator's request to a running intent is refused, from what the run holds.

The notification workflow answers an approve-resend and a settle with these (its update
validators refuse with the sentence, its signal records it): pure, so every refusal is a
unit test, and no decision reads a reason's prose; it reads states, error codes and the
settlement that stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from domain import channels, provider_errors, settlement
from domain.states import AttemptState


@dataclass(frozen=True)
class Latest:
    """The latest attempt on a channel as the workflow holds it."""

    token: str
    state: str
    """An attempt state, or the channel's end without one (`denied`, `expired`, ...)."""
    error_code: str | None = None


def resend_refusal(
    channel: str,
    latest: Latest | None,
    *,
    cancelled: bool,
    in_flight: bool,
    standing: settlement.Standing | None,
) -> str | None:
    """Why a resend on `channel` may not be approved now, or None when it may.

    `latest` is the channel's latest attempt (None: none was made), `in_flight` whether an
    attempt on the channel is still being submitted, `standing` the operator's settlement
    that stands on the latest attempt. A permanent failure the provider reported refuses,
    unless a settlement whose rule allows a resend stands.
    """
    if cancelled:
        return "the intent is cancelled"
    try:
        channels.get(channel)
    except channels.UnknownChannel as err:
        return str(err)
    if latest is None:
        return f"no finished {channel} attempt to resend"
    if in_flight:
        return f"a {channel} attempt is still in flight"
    permanent = None
    if latest.error_code and standing is None:
        kind = provider_errors.classify(latest.error_code)
        if kind.kind == provider_errors.ErrorKind.PERMANENT:
            permanent = (
                f"the {channel} failure {latest.error_code} is permanent "
                f"({kind.reason}); a resend would fail the same way"
            )
    if latest.state not in {s.value for s in AttemptState}:
        return f"latest {channel} attempt is {latest.state}; nothing to resend"
    return settlement.resend_refusal(
        AttemptState(latest.state), standing, permanent_error=permanent
    )


def settle_refusal(
    channel: str,
    claim: settlement.SettlementClaim,
    *,
    token: str | None,
    offered: Sequence[settlement.SettlementRule],
    current: AttemptState,
    current_by_operator: bool,
    busy: bool,
    now: datetime,
    window_until: datetime | None,
) -> str | None:
    """Why a settlement of `channel`'s latest attempt (`token`) may not be made now.

    None when it may. `offered` are the rules the ledger offered for the attempt (rules
    needing a provider lookup are not offered where there is none); `busy` says another
    settlement of the intent is being recorded.
    """
    if window_until is None:
        return "the intent is not waiting for a settlement"
    if busy:
        return "another settlement of this intent is being recorded; try again"
    if token is None:
        return f"no {channel} attempt to settle"
    if not any(r.name == claim.rule for r in offered):
        names = ", ".join(r.name for r in offered) or "none"
        return f"no settlement rule {claim.rule!r} offered for this attempt ({names})"
    return settlement.refusal(
        settlement.SettlementPolicy(rules=tuple(offered)),
        claim,
        current=current,
        current_by_operator=current_by_operator,
        provider_has_lookup=True,
        now=now,
        window_until=window_until,
    )
