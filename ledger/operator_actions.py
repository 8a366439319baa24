"""Operator actions: the append-only record of what was done to an intent by hand.

A cancel, a settlement, a resend approved, a review item opened, a window that closed
undecided: what a person (or Herald on a person's behalf) did, by whom and why. An
accepted cancel also stamps the intent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from ledger.models import Intent, OperatorAction


def record_operator_action(
    session: Session,
    *,
    intent_id: str,
    action: str,
    operator: str,
    reason: str,
    outcome: str,
    at: datetime,
    detail: dict[str, Any] | None = None,
    operator_role: str | None = None,
) -> OperatorAction:
    """Append an operator's action on an intent."""
    row = OperatorAction(
        intent_id=intent_id,
        action=action,
        operator=operator,
        operator_role=operator_role,
        reason=reason,
        outcome=outcome,
        at=at,
        detail=detail,
    )
    session.add(row)
    if action == "cancel" and outcome == "accepted":
        session.execute(
            update(Intent)
            .where(Intent.id == intent_id, Intent.cancelled_at.is_(None))
            .values(cancelled_at=at)
        )
    session.flush()
    return row
