"""A refusal about the provider, as every send activity records it and hands it back.

The provider refused for its own reasons (an open circuit, or a refusal about the account:
credentials, suspension, permissions, its sender; ``domain.provider_errors``): nothing was
created and nothing is wrong with the message. The attempt is recorded `failed` with the
code (a new attempt follows, with its own token), a `defer` decision says why and until
when, and the workflow gets ``ProviderRefused`` at once: it moves to another provider or
defers until the provider may take work again, and never ends the intent for it
(docs/transports.md, "Account refusals").
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import Table, bindparam, select
from sqlalchemy.orm import Session
from temporalio.exceptions import ApplicationError

from activities import now_utc
from activities.contracts import ErrorType
from domain.policy import Outcome
from domain.provider_errors import PROVIDER_REFUSED_RULE, Cause
from domain.states import AttemptState
from ledger import observations
from ledger import repository as repo
from ledger.models import Attempt, PolicyDecision
from ledger.observations import ObservationFacts

RULE = PROVIDER_REFUSED_RULE
"""The rule such a deferral is recorded under: not a policy rule, the provider's own word."""

_ATTEMPT = cast(Table, Attempt.__table__).c
_DEFERRED_BY = (
    select(_ATTEMPT.intent_id, _ATTEMPT.channel, PolicyDecision.policy_version)
    .join(PolicyDecision, PolicyDecision.id == _ATTEMPT.decision_id)
    .where(_ATTEMPT.token == bindparam("token"))
)
"""An attempt's intent, channel and policy version: what its deferral is recorded under."""


def record_deferred(
    session: Session,
    token: str,
    provider: str,
    code: str | None,
    reason: str,
    retry_at: datetime | None,
) -> None:
    """The refused attempt `failed` with the provider's code, and a `defer` decision with
    the reason and when the provider may take work again, in the caller's transaction: the
    intent reads `deferred`, not `failed`, while it waits (backpressure is data)."""
    at = now_utc()
    observations.record_observation(
        session,
        ObservationFacts(
            source="send",
            raw_status="rejected",
            normalized=AttemptState.FAILED,
            observed_at=at,
            dedupe_key=f"send:{token}:rejected",
            provider_code=code,
            detail={"reason": reason, "provider": provider},
        ),
        token=token,
    )
    attempt = session.execute(_DEFERRED_BY, {"token": token}).one()
    when = f" after {retry_at.isoformat(timespec='seconds')}" if retry_at is not None else ""
    repo.record_decision(
        session,
        intent_id=attempt.intent_id,
        channel=attempt.channel,
        policy_version=attempt.policy_version,
        outcome=Outcome.DEFER.value,
        rule=RULE,
        reason=(
            f"{provider} refused ({code or 'no code'}: {reason}); another provider takes it, "
            f"or {provider} again{when}"
        )[:1000],
        inputs={"provider": provider, "code": code, "attempt": token},
        next_eligible_at=retry_at,
        decided_at=at,
    )


def provider_refused(reason: str, code: str | None, retry_at: datetime | None) -> ApplicationError:
    """The hand-back: non-retryable (the workflow decides what follows); details are the
    code, ``provider`` (what the refusal is about) and when the provider may take work
    again (ISO 8601, or "" when it did not say)."""
    return ApplicationError(
        reason,
        code,
        Cause.PROVIDER.value,
        retry_at.isoformat() if retry_at is not None else "",
        type=ErrorType.PROVIDER_REFUSED,
        non_retryable=True,
    )


__all__ = ["RULE", "provider_refused", "record_deferred"]
