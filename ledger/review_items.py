"""Review items an operator opens on demand, for one attempt of one intent.

The sweep and the horizon verdict open review items by themselves; an operator who sees
that an attempt needs a person sooner (a recipient says nothing came while the send is
still `submitted`, an unknown outcome to hand to the next shift) opens one from the
intent's page. The kind is the one the sweep would file for the attempt as it is now
(`ledger.reconcile`), so the item joins its reconciliation set and has that set's
lifecycle: a settlement or a later observation that settles the attempt closes it
(`ledger.settlements.close_items`, `close_settled_items`), or an operator's "no action".

=============================  ================================================================
the attempt is                 the item opened
=============================  ================================================================
unknown                        unknown_outcome
prepared                       prepared_without_remote_id
submitted, or an SMS `sent`    submitted_past_check
anything else                  none: the outcome is final (an email `sent` included: SMTP
                               reports nothing after the hand-off); the request is refused
=============================  ================================================================

One (kind, subject) is one review item (`uq_review_item_kind_subject`): an open one refuses
the request and names it; a closed one is opened again, its earlier resolution kept in the
item's `detail.history` (and in the audit rows of its resolution). Every request, accepted
or refused, is an operator action on the intent naming the principal; an accepted one
also writes an audit row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from domain import channels
from domain.clocks import iso_utc
from domain.principals import Access, Principal
from domain.states import AttemptState
from ledger import reconcile
from ledger import repository as repo
from ledger.errors import NotAllowed
from ledger.models import Attempt, ReviewItem
from ledger.principals import record_audit

OPEN_REVIEW = "open-review"
"""The operator action that records a request to open a review item."""
FILED_BY = "operator"
"""`detail.filed_by` of an item an operator opened (the sweep's say `reconciler`)."""


def kind_for(channel: str, state: str) -> str | None:
    """The review kind the sweep files for an attempt in `state`; None: its outcome is final."""
    if state == AttemptState.UNKNOWN.value:
        return reconcile.UNKNOWN_OUTCOME
    if state == AttemptState.PREPARED.value:
        return reconcile.PREPARED_WITHOUT_REMOTE_ID
    if state == AttemptState.SUBMITTED.value or (
        state == AttemptState.SENT.value and channel in channels.awaiting_delivery_report()
    ):
        return reconcile.SUBMITTED_PAST_CHECK
    return None


@dataclass(frozen=True)
class Option:
    """What opening a review item would do for one channel's latest attempt."""

    channel: str
    number: int
    state: str
    kind: str | None
    """The kind it would open (None: the outcome is final, nothing to open)."""
    open_item: int | None = None
    """The id of the open item of that kind for the attempt, if there is one."""

    @property
    def openable(self) -> bool:
        """Whether the page offers to open an item for it."""
        return self.kind is not None and self.open_item is None


def _latest(session: Session, intent_id: str, channel: str, *, lock: bool) -> Attempt | None:
    query = (
        select(Attempt)
        .where(Attempt.intent_id == intent_id, Attempt.channel == channel)
        .order_by(Attempt.number.desc(), Attempt.id.desc())
        .limit(1)
        # Observations write attempts with core statements: read the row as it is now.
        .execution_options(populate_existing=True)
    )
    return session.execute(query.with_for_update() if lock else query).scalar_one_or_none()


def _item(session: Session, kind: str, attempt_id: int, *, lock: bool) -> ReviewItem | None:
    query = select(ReviewItem).where(
        ReviewItem.kind == kind, ReviewItem.subject == f"attempt:{attempt_id}"
    )
    return session.execute(query.with_for_update() if lock else query).scalar_one_or_none()


def options(session: Session, intent_id: str) -> list[Option]:
    """Per channel with an attempt, its latest attempt and what opening an item would do."""
    found = []
    for channel in channels.NAMES:
        attempt = _latest(session, intent_id, channel, lock=False)
        if attempt is None:
            continue
        kind = kind_for(channel, attempt.state)
        item = _item(session, kind, attempt.id, lock=False) if kind else None
        found.append(
            Option(
                channel,
                attempt.number,
                attempt.state,
                kind,
                item.id if item is not None and item.resolved_at is None else None,
            )
        )
    return found


@dataclass(frozen=True)
class Opened:
    """What came of one request to open a review item."""

    refused: str = ""
    """Why nothing was opened, in a sentence (empty: opened)."""
    item_id: int | None = None
    kind: str = ""
    attempt_token: str = ""
    reopened: bool = False
    """An item of that kind for the attempt had been closed: it is open again."""


def open_review_item(
    session: Session,
    *,
    intent_id: str,
    channel: str,
    reason: str,
    by: Principal,
    at: datetime,
) -> Opened:
    """Open a review item for the channel's latest attempt of the intent.

    In the caller's transaction, recorded under `by` (an operator or admin; NotAllowed
    otherwise). Raises `NotFound` for no such intent. A refusal is recorded (an operator
    action `open-review`, refused, with why) and returned.
    """
    if not by.may(Access.OPERATE):
        raise NotAllowed(f"opening a review item needs the operator role; {by.name} is {by.role}")
    intent = repo.get_intent(session, intent_id)
    attempt = _latest(session, intent.id, channel, lock=True)
    kind = kind_for(channel, attempt.state) if attempt is not None else None
    item = _item(session, kind, attempt.id, lock=True) if attempt is not None and kind else None
    what = f"the {channel} attempt #{attempt.number}" if attempt is not None else ""
    why = ""
    if attempt is None:
        why = f"the intent has no {channel} attempt: there is nothing to review"
    elif kind is None:
        why = (
            f"{what} is {attempt.state}: its outcome is final, so no review item of the "
            "reconciliation sets applies to it"
        )
    elif item is not None and item.resolved_at is None:
        why = f"review item #{item.id} ({kind}) is already open for {what}"
    base: dict[str, Any] = {"channel": channel}
    if attempt is not None:
        base |= {"attempt": attempt.token, "state": attempt.state}

    def recorded(outcome: str, detail: dict[str, Any]) -> None:
        repo.record_operator_action(
            session,
            intent_id=intent.id,
            action=OPEN_REVIEW,
            operator=by.name,
            operator_role=by.role.value,
            reason=reason,
            outcome=outcome,
            at=at,
            detail={**base, **detail},
        )

    if why:
        recorded("refused", {**({"kind": kind} if kind else {}), "why": why})
        return Opened(refused=why, kind=kind or "", attempt_token=attempt.token if attempt else "")
    assert attempt is not None and kind is not None
    opened = {
        "attempt_token": attempt.token,
        "channel": channel,
        "number": attempt.number,
        "state": attempt.state,
        "filed_by": FILED_BY,
        "opened_by": by.name,
        "reason": reason,
    }
    reopened = item is not None
    if item is not None:
        # Closed before: open it again, keeping what closed it.
        earlier = {
            "found_at": iso_utc(item.found_at),
            "resolved_at": iso_utc(item.resolved_at),
            "resolved_by": item.resolved_by,
            "resolution_note": item.resolution_note,
        }
        detail = dict(item.detail or {})
        item.detail = {
            **detail,
            **opened,
            "since": iso_utc(at),
            "history": [*detail.get("history", []), earlier],
        }
        item.found_at, item.resolved_at = at, None
        item.resolved_by = item.resolution_note = None
        session.flush()
        item_id = item.id
    else:
        reconcile.record_review_items(
            session,
            [
                reconcile.ReviewRow(
                    kind=kind,
                    subject=f"attempt:{attempt.id}",
                    since=at,
                    age=at - at,
                    intent_id=intent.id,
                    business_key=intent.business_key,
                    detail=opened,
                )
            ],
            at,
        )
        # The attempt's row lock (above) makes a second request for it wait for this one
        # and then find the item open.
        new = _item(session, kind, attempt.id, lock=False)
        assert new is not None
        item_id = new.id
    recorded("accepted", {"kind": kind, "item": item_id, "reopened": str(reopened).lower()})
    record_audit(
        session,
        by=by,
        action="review_item.reopened" if reopened else "review_item.opened",
        subject=f"review_item:{item_id}",
        at=at,
        detail={
            "kind": kind,
            "attempt": f"attempt:{attempt.id}",
            "intent_id": intent.id,
            "reason": reason,
        },
    )
    return Opened(item_id=item_id, kind=kind, attempt_token=attempt.token, reopened=reopened)
