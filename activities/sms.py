"""SMS activities: submit with the attempt's stable token, poll a status, reconcile ambiguity.

Each returns a fact in Herald's vocabulary after recording it in the ledger. None of them
loops: retries belong to the workflow's RetryPolicy, so they show up in Temporal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast
from urllib.parse import quote

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities import ProviderTransports, heartbeating, now_utc
from activities.contracts import (
    ErrorType,
    LookupInput,
    LookupResult,
    PollInput,
    PollOutcome,
    SubmitInput,
    SubmitOutcome,
)
from domain import channels, provider_errors
from domain.senders import SenderBook
from domain.states import AttemptState, normalize_provider_status
from ledger import metrics
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.models import Attempt, Suppression
from ledger.repository import ObservationFacts
from ledger.transactions import Transactions
from transports.sms import (
    SmsAmbiguousError,
    SmsMessage,
    SmsPermanentError,
    SmsTransientError,
    SmsTransport,
)

# A timed-out create may take a moment to show in the provider's list; before this grace
# has passed, "not found" is not evidence that nothing was sent.
RECONCILE_GRACE = timedelta(seconds=5)

_ATTEMPTS = cast(Table, Attempt.__table__)
_ATTEMPT = _ATTEMPTS.c
_SENDABLE = (AttemptState.PREPARED.value, AttemptState.UNKNOWN.value)
"""States from which a send may start (when no remote id is known and none started)."""
_VIEW_COLUMNS = (
    _ATTEMPT.token,
    _ATTEMPT.state,
    _ATTEMPT.remote_id,
    _ATTEMPT.send_started_at,
    _ATTEMPT.destination_ct,
    _ATTEMPT.body_ct,
    _ATTEMPT.sender,
    _ATTEMPT.sender_address,
    _ATTEMPT.content_sha256,
    _ATTEMPT.provider,
)
_CLAIM = (
    update(_ATTEMPTS)
    .where(
        _ATTEMPT.token == bindparam("claimed_token"),
        _ATTEMPT.remote_id.is_(None),
        _ATTEMPT.state.in_(_SENDABLE),
        _ATTEMPT.send_started_at.is_(None),
    )
    .values(send_started_at=bindparam("started"))
    .returning(*_VIEW_COLUMNS)
)
"""Marks the send started if nothing was sent for the attempt (built once)."""
_LOCKED_VIEW = select(*_VIEW_COLUMNS).where(_ATTEMPT.token == bindparam("token")).with_for_update()


@dataclass(frozen=True)
class _AttemptView:
    token: str
    state: str
    remote_id: str | None
    send_started_at: datetime | None
    to: str
    body: str
    sender: str
    content_sha256: str
    provider: str | None = None


class SmsActivities:
    def __init__(
        self,
        transport: SmsTransport,
        sessions: sessionmaker[Session],
        cipher: FieldCipher,
        *,
        callback_base_url: str,
        senders: SenderBook | None = None,
        providers: Mapping[str, SmsTransport] | None = None,
    ) -> None:
        """`transport` is the default provider's (attempts with no provider recorded);
        `providers` every configured SMS provider by alias (worker.py builds both)."""
        self._transports = ProviderTransports(transport, providers)
        self._senders = senders or SenderBook.build()
        self._sessions = sessions
        self._tx = Transactions(sessions)
        self._cipher = cipher
        self._callback_base = callback_base_url.rstrip("/")

    def status_callback(self, token: str) -> str:
        # The token in the callback URL lets the ingress settle an attempt whose send
        # response was lost (the receipt then carries a remote id we never saw).
        return f"{self._callback_base}/v1/receipts/sms?token={quote(token, safe='')}"

    def _claim_send(self, session: Session, token: str) -> tuple[_AttemptView, bool]:
        """Read the attempt under a row lock and, if nothing has been sent for it, mark its
        send started in the same transaction: (view, True) means this caller may send.

        A retry whose attempt already has a remote id, is past `prepared`, or whose send
        had started (the request may have left) gets (view, False) and never sends.
        """
        # The common case in one statement: the UPDATE takes the row lock, and its WHERE
        # (evaluated again on the latest row if it had to wait) is the "nothing sent yet"
        # test. Only when it matches nothing is the row read, under the same lock.
        a = session.execute(_CLAIM, {"claimed_token": token, "started": now_utc()}).one_or_none()
        sendable = a is not None
        if a is None:
            a = session.execute(_LOCKED_VIEW, {"token": token}).one_or_none()
        if a is None:
            raise ApplicationError(
                f"no attempt with token {token!r}", type=ErrorType.NOT_FOUND, non_retryable=True
            )
        if a.destination_ct is None or a.body_ct is None:
            # (A claim made above is rolled back with this transaction.)
            raise ApplicationError(
                "the attempt's destination or body was purged",
                type=ErrorType.NOT_FOUND,
                non_retryable=True,
            )
        view = _AttemptView(
            a.token,
            a.state,
            a.remote_id,
            None if sendable else a.send_started_at,
            self._cipher.decrypt(a.destination_ct, context=token),
            self._cipher.decrypt(a.body_ct, context=token),
            # Attempts prepared before the resolved sender was kept resolve it now.
            a.sender_address or self._senders.sms_for(a.sender).value,
            a.content_sha256,
            a.provider,
        )
        if sendable and a.sender_address is None:
            # Prepared before the resolved sender was kept: keep the one this send uses.
            session.execute(
                update(_ATTEMPTS).where(_ATTEMPT.token == token).values(sender_address=view.sender)
            )
        if not sendable and (view.remote_id is not None or view.state not in _SENDABLE):
            metrics.note_duplicate(session, "send_already_submitted", channels.SMS.name)
        return view, sendable

    async def _release_claim(self, token: str) -> None:
        """Nothing left for the attempt: a retry may send it (clears `send_started_at`)."""
        await self._tx(
            lambda s: s.execute(
                update(_ATTEMPTS).where(_ATTEMPT.token == token).values(send_started_at=None)
            )
        )

    async def _record(self, token: str, facts: ObservationFacts) -> repo.ObservationResult:
        return await self._tx(lambda s: repo.record_observation(s, facts, token=token))

    @activity.defn(name=channels.SMS.send_activity)
    @heartbeating
    async def submit_sms(self, input: SubmitInput) -> SubmitOutcome:
        token = input.attempt_token
        view, sendable = await self._tx(lambda s: self._claim_send(s, token))
        if not sendable:
            if view.remote_id is not None or view.state not in (
                AttemptState.PREPARED.value,
                AttemptState.UNKNOWN.value,
            ):
                # A retried activity whose attempt is already submitted never sends again.
                return SubmitOutcome(view.state, view.remote_id)
            return await self._reconcile(view)
        try:
            transport = self._transports.for_alias(view.provider)
        except ApplicationError:
            # Nothing left: release the claim, so the retry that finds the account sends.
            await self._release_claim(token)
            raise
        message = SmsMessage(
            token=token,
            to=view.to,
            body=view.body,
            sender=view.sender,
            status_callback=self.status_callback(token),
        )
        try:
            submitted = await transport.submit(message)
        except SmsPermanentError as err:
            await self._record(
                token,
                ObservationFacts(
                    source="send",
                    raw_status="rejected",
                    normalized=AttemptState.FAILED,
                    observed_at=now_utc(),
                    dedupe_key=f"send:{token}:rejected",
                    provider_code=err.code,
                    detail={"reason": err.reason},
                ),
            )
            if err.code in provider_errors.OPT_OUT_CODES:
                await self._suppress(token, reason="opted_out", source=f"provider:{err.code}")
            raise ApplicationError(
                err.reason, err.code, type=ErrorType.PERMANENT_PROVIDER_ERROR, non_retryable=True
            ) from err
        except SmsTransientError as err:
            # Never processed (429, 5xx before acceptance, connect failure): safe to send again.
            await self._release_claim(token)
            delay = timedelta(seconds=err.retry_after) if err.retry_after else None
            raise ApplicationError(
                err.reason, type=ErrorType.TRANSIENT_PROVIDER_ERROR, next_retry_delay=delay
            ) from err
        except SmsAmbiguousError as err:
            await self._record(
                token,
                ObservationFacts(
                    source="send",
                    raw_status="timeout",
                    normalized=AttemptState.UNKNOWN,
                    observed_at=now_utc(),
                    dedupe_key=f"send:{token}:ambiguous",
                    detail={"reason": err.reason},
                ),
            )
            # Retried by the RetryPolicy; the next try reconciles before anything is sent.
            raise ApplicationError(
                "the submission may have reached the provider; reconciling before any new request",
                type=ErrorType.AMBIGUOUS_SUBMISSION,
            ) from err
        result = await self._record(
            token,
            ObservationFacts(
                source="send",
                raw_status=submitted.raw_status,
                normalized=normalize_provider_status(submitted.raw_status)
                or AttemptState.SUBMITTED,
                observed_at=now_utc(),
                dedupe_key=f"send:{token}:submitted",
                provider_at=submitted.provider_at,
                remote_id=submitted.remote_id,
            ),
        )
        return SubmitOutcome(result.state or AttemptState.SUBMITTED.value, submitted.remote_id)

    async def _reconcile(self, view: _AttemptView) -> SubmitOutcome:
        """A request may have left: look it up by destination, time window and content hash."""
        assert view.send_started_at is not None
        now = now_utc()
        found = await self._transports.for_alias(view.provider).find(
            to=view.to,
            sent_after=view.send_started_at - timedelta(minutes=1),
            sent_before=now + timedelta(minutes=1),
            body_sha256=view.content_sha256,
        )
        if found:
            match = found[0]
            result = await self._record(
                view.token,
                ObservationFacts(
                    source="reconcile",
                    raw_status=match.raw_status,
                    normalized=normalize_provider_status(match.raw_status),
                    observed_at=now,
                    dedupe_key=f"reconcile:{view.token}:{match.raw_status}",
                    provider_code=match.error_code,
                    provider_at=match.provider_at,
                    remote_id=match.remote_id,
                    detail={"matches": len(found)},
                ),
            )
            return SubmitOutcome(
                result.state or view.state,
                match.remote_id,
                reconciled=True,
                reason="reconciled: found at the provider",
            )
        if now - view.send_started_at < RECONCILE_GRACE:
            # Expected while the provider's list catches up: benign, so the retry does not
            # read as a failure in the Web UI (nor log at warning level).
            raise ApplicationError(
                "not visible at the provider yet; looking again",
                type=ErrorType.RECONCILE_PENDING,
                category=ApplicationErrorCategory.BENIGN,
            )
        await self._record(
            view.token,
            ObservationFacts(
                source="reconcile",
                raw_status="not_found",
                normalized=AttemptState.UNKNOWN,
                observed_at=now,
                dedupe_key=f"reconcile:{view.token}:not_found",
            ),
        )
        return SubmitOutcome(
            AttemptState.UNKNOWN.value,
            None,
            reconciled=True,
            reason="reconciled: not found at the provider; an operator may approve a resend",
        )

    @activity.defn(name=channels.SMS.poll_activity)
    async def poll_sms(self, input: PollInput) -> PollOutcome:
        token = input.attempt_token
        attempt = await self._tx(lambda s: repo.attempt_by_token(s, token))
        if attempt.remote_id is None:
            return PollOutcome(attempt.state)
        status = await self._transports.for_alias(attempt.provider).status(attempt.remote_id)
        result = await self._record(
            token,
            ObservationFacts(
                source="poll",
                raw_status=status.raw_status,
                normalized=normalize_provider_status(status.raw_status),
                observed_at=now_utc(),
                dedupe_key=f"poll:{token}:{status.raw_status}:{status.error_code or ''}",
                provider_code=status.error_code,
                provider_at=status.provider_at,
                remote_id=status.remote_id,
            ),
        )
        return PollOutcome(result.state or attempt.state, status.raw_status, status.error_code)

    @activity.defn(name="lookup_sms")
    async def lookup_sms(self, input: LookupInput) -> LookupResult:
        """Ask the provider what it holds for an attempt, for an operator about to settle
        it. By remote id when we have one, else by destination, time window and content
        hash. The answer is recorded as an observation (source `lookup`) through the one
        transition function, so a lookup that finds a final status settles the attempt
        by itself; `not_found` is kept as evidence without a state."""
        token = input.attempt_token
        now = now_utc()
        status = None
        matches = 0
        attempt = await self._tx(lambda s: repo.attempt_by_token(s, token))
        if attempt.remote_id is not None:
            status = await self._transports.for_alias(attempt.provider).status(attempt.remote_id)
            matches = 1
        elif attempt.destination_ct is not None:
            to = self._cipher.decrypt(attempt.destination_ct, context=token)
            started = attempt.send_started_at or attempt.prepared_at
            found = await self._transports.for_alias(attempt.provider).find(
                to=to,
                sent_after=started - timedelta(minutes=1),
                sent_before=now + timedelta(minutes=1),
                body_sha256=attempt.content_sha256,
            )
            matches = len(found)
            status = found[0] if found else None
        raw = status.raw_status if status else "not_found"
        result = await self._record(
            token,
            ObservationFacts(
                source="lookup",
                raw_status=raw,
                normalized=normalize_provider_status(raw) if status else None,
                observed_at=now,
                dedupe_key=f"lookup:{token}:{now.isoformat()}",
                provider_code=status.error_code if status else None,
                provider_at=status.provider_at if status else None,
                remote_id=status.remote_id if status else None,
                detail={"matches": matches, "requested_by": input.requested_by[:120]},
            ),
        )
        state = result.state or attempt.state
        message = (
            f"the provider holds it as {raw}" if status else "the provider holds nothing for it"
        )
        if state != attempt.state:
            message += f"; the attempt is now {state}"
        return LookupResult(
            found=status is not None,
            raw_status=raw,
            state=state,
            provider_at=status.provider_at if status else None,
            observed_at=now,
            message=message,
        )

    async def _suppress(self, token: str, *, reason: str, source: str) -> None:
        def work(session: Session) -> None:
            attempt = repo.attempt_by_token(session, token)
            session.add(
                Suppression(
                    destination_hmac=attempt.destination_hmac,
                    channel=channels.SMS.name,
                    reason=reason,
                    source=source,
                    at=now_utc(),
                )
            )

        await self._tx(work)
