"""What the console answers a posted sign-in form: the form's one-use CSRF token, the
throttle (domain.sign_in_throttle, counted in the ledger), the credentials, and the audit
row, log line and metric of each answer.

Order matters: a throttled name or address is refused before its token is even looked at
(a right token then is refused too, so the throttle cannot be used to test tokens), and an
app principal's right token is refused inside the lookup, before anything is written.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.console import sessions
from domain.principals import BREAK_GLASS_NAME, Principal, Role
from domain.sign_in_throttle import CounterKind
from ledger import sign_in_throttle as throttle
from ledger.models import AuditEvent, PrincipalRecord

if TYPE_CHECKING:
    from api.deps import Ingress

log = logging.getLogger("herald.console")

REFUSED = "console.sign_in.refused"
SIGNED_IN = "console.sign_in"
WRONG = "That name and token do not match a principal who may use the console."


@dataclass(frozen=True)
class Answer:
    """What the sign-in form's post comes to."""

    principal: Principal | None
    """Signed in as this principal; None: refused."""
    status: int = 200
    message: str = ""
    retry_after: int | None = None
    """Seconds, with 429."""


def form_token(now: datetime) -> str:
    """A sign-in form's CSRF token: when it was issued, and 32 random bytes."""
    return f"{int(now.timestamp())}.{secrets.token_urlsafe(32)}"


def _issued_at(token: str) -> datetime | None:
    stamp, _, rest = token.partition(".")
    if not stamp.isdigit() or len(rest) < 32:
        return None
    return datetime.fromtimestamp(int(stamp), UTC)


def as_claimed(name: str, *, known: bool, keyed: Callable[[str], str]) -> str:
    """A claimed name as the throttle's counter, the audit row and the log line keep it:
    the name itself when it is a principal's (`known`) or the break-glass name, otherwise
    a keyed hash of it (`keyed`, the ledger's lookup HMAC), so a token, a phone number or
    an address typed into the name box is kept nowhere readable."""
    if name == BREAK_GLASS_NAME or known:
        return name
    return "not-a-name:" + keyed(name)[:16]


def claimed_name(ingress: Ingress, name: str) -> Callable[[Session], str]:
    """The transaction work that says how `name` is kept (as_claimed)."""

    def work(session: Session) -> str:
        known = session.execute(
            select(PrincipalRecord.id).where(PrincipalRecord.name == name)
        ).first()
        return as_claimed(name, known=known is not None, keyed=ingress.client.lookup_hmac)

    return work


def wait_in_words(seconds: int) -> str:
    minutes = math.ceil(seconds / 60)
    return f"{minutes} minute{'' if minutes == 1 else 's'}"


async def authenticate(ingress: Ingress, name: str, token: str) -> Principal | None:
    """A ledger principal who may use the console, by name and token; HERALD_OPERATOR_TOKEN
    signs in as the break-glass admin under its reserved name. An app's right token is
    refused inside the lookup, before its last-used time is written: the answer is a wrong
    token's, in a wrong token's time."""
    if name == BREAK_GLASS_NAME:
        return (
            Principal(BREAK_GLASS_NAME, Role.ADMIN) if ingress.auth.is_break_glass(token) else None
        )
    return await ingress.auth.principal_of_name(name, token, allowed=sessions.may_sign_in)


def _audit(
    session: Session, *, actor: str, role: str, action: str, name: str, **detail: str
) -> None:
    # A refused sign-in has no principal: the name is what was claimed, in `subject`.
    session.add(
        AuditEvent(
            at=datetime.now(UTC),
            actor=actor[:80],
            actor_role=role,
            action=action,
            subject=f"principal:{name}"[:240],
            detail=detail,
        )
    )


async def answer(
    ingress: Ingress,
    *,
    name: str,
    token: str,
    address: str,
    cookie_csrf: str | None,
    form_csrf: str | None,
) -> Answer:
    """The answer to one posted sign-in form from client `address`."""
    now = sessions.now()
    claimed = await ingress.tx(claimed_name(ingress, name))
    keys = [(CounterKind.NAME, claimed), (CounterKind.ADDRESS, address)]

    async def refuse(reason: str, answer: Answer, *, count: bool) -> Answer:
        def work(session: Session) -> int | None:
            wait = throttle.record_refusal(session, keys, now) if count else None
            _audit(
                session,
                actor="(not signed in)",
                role="none",
                action=REFUSED,
                name=claimed,
                reason=reason,
                address=address,
            )
            return wait

        wait = await ingress.tx(work)
        ingress.counters.sign_ins_refused.labels(reason).inc()
        log.info("console sign-in refused: name %r from %s (%s)", claimed, address, reason)
        if wait is not None:
            return Answer(None, 429, _too_many(wait), wait)
        return answer

    # Before sign-in the CSRF token is a double-submit pair (the form's hidden field must
    # equal the cookie its page set: a cross-site form can neither read nor set it), and
    # good for one post.
    issued = _issued_at(form_csrf or "")
    fresh = (
        issued is not None
        and sessions.csrf_ok(cookie_csrf or "", form_csrf)
        and await ingress.tx(lambda s: throttle.use_form(s, form_csrf or "", issued, now))
    )
    if not fresh:
        return await refuse(
            "form",
            Answer(None, 403, "The form expired or was already used; sign in again."),
            count=False,
        )
    wait = await ingress.tx(lambda s: throttle.retry_after(s, keys, now))
    if wait is not None:
        return await refuse("throttled", Answer(None, 429, _too_many(wait), wait), count=False)
    principal = await authenticate(ingress, name, token)
    if principal is None:
        return await refuse("credentials", Answer(None, 401, WRONG), count=True)

    def signed_in(session: Session) -> None:
        throttle.forget(session, (CounterKind.NAME, claimed))
        _audit(
            session,
            actor=principal.name,
            role=principal.role.value,
            action=SIGNED_IN,
            name=principal.name,
            address=address,
        )

    await ingress.tx(signed_in)
    log.info("console sign-in: %s (%s) from %s", principal.name, principal.role.value, address)
    return Answer(principal, 303)


def _too_many(wait: int) -> str:
    return (
        "Too many refused sign-ins for this name or from this address. Try again in "
        f"{wait_in_words(wait)}; if you have lost your token, ask an admin to rotate it "
        "(herald principals rotate NAME)."
    )
