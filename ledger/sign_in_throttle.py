"""The console's sign-in throttle in the ledger.

One row per counter (a name, a client
address), read and written under a row lock so that every API process counts the same
refusals; and the sign-in forms already posted. The rule is domain.sign_in_throttle's.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import delete, select, tuple_
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from domain import sign_in_throttle as rule
from domain.sign_in_throttle import CounterKind
from ledger.models import SignInCounter, UsedSignInForm
from ledger.principals import token_hash

CounterKey = tuple[CounterKind, str]
FORM_LIFETIME = timedelta(hours=1)
"""A sign-in form older than this is refused (and its use forgotten)."""


def _as_counter(row: SignInCounter) -> rule.Counter:
    return rule.Counter(row.failures, row.last_failure_at, row.blocks, row.blocked_until)


def retry_after(session: Session, keys: Iterable[CounterKey], now: datetime) -> int | None:
    """Seconds until a sign-in for these counters is heard, or None: heard now."""
    pairs = [(kind.value, key) for kind, key in keys]
    rows = session.execute(
        select(SignInCounter).where(tuple_(SignInCounter.kind, SignInCounter.key).in_(pairs))
    ).scalars()
    waits = [rule.retry_after(rule.current(_as_counter(r), now), now) for r in rows]
    return max((w for w in waits if w is not None), default=None)


def record_refusal(session: Session, keys: Iterable[CounterKey], now: datetime) -> int | None:
    """Count one refused sign-in against each counter.

    The seconds to wait now, if one of them blocks. Rows are locked in key order, so two
    processes never deadlock.
    """
    wanted = sorted((kind.value, key[:120]) for kind, key in keys)
    session.execute(
        insert(SignInCounter)
        .values([{"kind": k, "key": v, "failures": 0, "blocks": 0} for k, v in wanted])
        .on_conflict_do_nothing()
    )
    rows = session.execute(
        select(SignInCounter)
        .where(tuple_(SignInCounter.kind, SignInCounter.key).in_(wanted))
        .order_by(SignInCounter.kind, SignInCounter.key)
        .with_for_update()
    ).scalars()
    waits = []
    for row in rows:
        after = rule.refused(_as_counter(row), CounterKind(row.kind), now)
        row.failures, row.last_failure_at = after.failures, after.last_failure_at
        row.blocks, row.blocked_until = after.blocks, after.blocked_until
        waits.append(rule.retry_after(after, now))
    session.flush()
    return max((w for w in waits if w is not None), default=None)


def forget(session: Session, key: CounterKey) -> None:
    """A successful sign-in clears its name's counter (not its address's)."""
    session.execute(
        delete(SignInCounter).where(
            SignInCounter.kind == key[0].value, SignInCounter.key == key[1][:120]
        )
    )


def use_form(session: Session, token: str, issued_at: datetime, now: datetime) -> bool:
    """Whether a sign-in form's token may be used now.

    Issued within FORM_LIFETIME and not posted before. Marks it used; forgets uses older
    than any form still accepted.
    """
    if not now - FORM_LIFETIME <= issued_at <= now + timedelta(minutes=1):
        return False
    session.execute(delete(UsedSignInForm).where(UsedSignInForm.used_at < now - FORM_LIFETIME))
    first = session.execute(
        insert(UsedSignInForm)
        .values(token_sha256=token_hash(token), used_at=now)
        .on_conflict_do_nothing()
        .returning(UsedSignInForm.token_sha256)
    ).first()
    return first is not None
