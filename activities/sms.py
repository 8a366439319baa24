"""SMS activities: submit with the attempt's stable token, poll a status, reconcile ambiguity.

Each returns a fact in Herald's vocabulary after recording it in the ledger. None of them
loops: retries belong to the workflow's RetryPolicy, so they show up in Temporal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn, cast
from urllib.parse import quote

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from activities import ProviderTransports, heartbeating, now_utc, refusals
from activities.contracts import (
    ErrorType,
    LookupInput,
    LookupResult,
    PollInput,
    PollOutcome,
    SubmitInput,
    SubmitOutcome,
)
from activities.key_errors import stopping_on_key_errors
from domain import channels, circuit, failover, provider_errors
from domain.circuit import BreakerSettings
from domain.provider_errors import ErrorKind
from domain.senders import SenderBook
from domain.states import AttemptState
from ledger import circuits, metrics, observations
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.models import Attempt, Suppression
from ledger.observations import ObservationFacts
from ledger.transactions import Transactions
from transports.errors import SmsAmbiguousError, SmsNotFound, SmsPermanentError, SmsTransientError
from transports.sms import ProviderStatus, SmsMessage, SmsTransport

# A timed-out create may take a moment to show in the provider's list; before this grace
# has passed, "not found" is not evidence that nothing was sent.
RECONCILE_GRACE = timedelta(seconds=5)

NO_LOOKUP_REASON = (
    "the provider has no lookup for a lost create: unknown until a person settles it; "
    "never sent again, never failed over"
)

NOT_SEEN_REASON = (
    "reconciled: not listed at the provider, whose lookup cannot see a message still queued "
    "or scheduled: unknown until a person settles it; never failed over"
)

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
_RELEASE = (
    update(_ATTEMPTS)
    .where(_ATTEMPT.token == bindparam("released_token"))
    .values(send_started_at=None)
)
"""Clears a send claim: nothing left this process, so a retry may send (built once)."""


def _observed(
    status: ProviderStatus,
    *,
    source: str,
    observed_at: datetime,
    dedupe_key: str,
    detail: dict[str, Any] | None = None,
) -> ObservationFacts:
    """What the provider said of a message, as one observation: the same reading for a
    reconcile, a poll and a lookup."""
    return ObservationFacts(
        source=source,
        raw_status=status.raw_status,
        normalized=status.state,
        observed_at=observed_at,
        dedupe_key=dedupe_key,
        provider_code=status.error_code,
        provider_at=status.provider_at,
        remote_id=status.remote_id,
        detail=detail or {},
    )


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

    @property
    def sending_provider(self) -> str:
        """The provider the attempt goes to (attempts recorded without one: the default)."""
        return self.provider or channels.SMS.default_providers[0]


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
        breaker: BreakerSettings | None = None,
    ) -> None:
        """`transport` is the default provider's (attempts with no provider recorded);
        `providers` every configured SMS provider by alias (worker.py builds both);
        `breaker` the per-provider circuit breaker's thresholds (None: no breaker)."""
        self._transports = ProviderTransports(transport, providers)
        self._breaker = breaker
        self._senders = senders or SenderBook.build()
        self._sessions = sessions
        self._tx = Transactions(sessions)
        self._cipher = cipher
        self._callback_base = callback_base_url.rstrip("/")

    def status_callback(self, token: str, transport: SmsTransport) -> str:
        # The token in the callback URL lets the ingress settle an attempt whose send
        # response was lost (the receipt then carries a remote id we never saw). Each
        # provider's receipts come to its own route (`webhook_path`).
        return f"{self._callback_base}{transport.webhook_path}?token={quote(token, safe='')}"

    async def _health(self, provider: str, outcome: circuit.Outcome) -> None:
        """Tell the provider's circuit breaker what this call said about it."""
        if self._breaker is None or outcome == circuit.Outcome.NEUTRAL:
            return
        breaker = self._breaker
        await self._tx(lambda s: circuits.note_outcome(s, provider, outcome, now_utc(), breaker))

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

    def _claim_admitted(
        self, session: Session, token: str
    ) -> tuple[_AttemptView, bool, SmsTransport | None, circuit.Admission | None]:
        """`_claim_send`, and for a sendable attempt its transport and the provider's
        circuit admission, in the claim's transaction (one instead of two before each
        send): (view, sendable, transport, admission). A provider this worker has no
        account for raises, rolling the claim back; a circuit that refuses releases the
        claim in the same transaction (nothing will be sent, as if never claimed)."""
        view, sendable = self._claim_send(session, token)
        if not sendable:
            return view, False, None, None
        transport = self._transports.for_alias(view.provider)
        if self._breaker is None:
            return view, True, transport, None
        admission = circuits.admit_send(session, view.sending_provider, now_utc(), self._breaker)
        if not admission.allowed:
            session.execute(_RELEASE, {"released_token": token})
        return view, True, transport, admission

    def _noted_and_recorded(
        self,
        session: Session,
        provider: str,
        outcome: circuit.Outcome,
        token: str,
        facts: ObservationFacts,
    ) -> observations.ObservationResult:
        """What a send's answer says about the provider's health and about the attempt,
        in one transaction (`_health` then `_record`)."""
        if self._breaker is not None and outcome != circuit.Outcome.NEUTRAL:
            circuits.note_outcome(session, provider, outcome, now_utc(), self._breaker)
        return observations.record_observation(session, facts, token=token)

    async def _release_claim(self, token: str) -> None:
        """Nothing left for the attempt: a retry may send it (clears `send_started_at`)."""
        await self._tx(lambda s: s.execute(_RELEASE, {"released_token": token}))

    async def _record(self, token: str, facts: ObservationFacts) -> observations.ObservationResult:
        return await self._tx(lambda s: observations.record_observation(s, facts, token=token))

    @activity.defn(name=channels.SMS.send_activity)
    @heartbeating
    async def submit_sms(self, input: SubmitInput) -> SubmitOutcome:
        token = input.attempt_token
        async with stopping_on_key_errors(self._tx, "submit_sms", attempt_token=token):
            view, sendable, transport, admission = await self._tx(
                lambda s: self._claim_admitted(s, token)
            )
        provider = view.sending_provider
        if not sendable:
            if view.remote_id is not None or view.state not in (
                AttemptState.PREPARED.value,
                AttemptState.UNKNOWN.value,
            ):
                # A retried activity whose attempt is already submitted never sends again.
                return SubmitOutcome(view.state, view.remote_id, provider=provider)
            return await self._reconcile(view, provider)
        assert transport is not None
        if admission is not None and not admission.allowed:
            assert self._breaker is not None
            await self._refused_by_circuit(
                token, provider, admission.circuit.next_probe_at(self._breaker)
            )
        message = SmsMessage(
            token=token,
            to=view.to,
            body=view.body,
            sender=view.sender,
            status_callback=self.status_callback(token, transport),
        )
        try:
            submitted = await transport.submit(message)
        except SmsPermanentError as err:
            if err.about_the_account:
                await self._refused_for_the_account(token, provider, err)
            # About the destination (or not said): the provider is up, the number is not.
            await self._health(provider, circuit.Outcome.SUCCESS)
            await self._record_refusal(token, provider, err.code, err.reason)
            if err.code in provider_errors.OPT_OUT_CODES:
                await self._suppress(token, reason="opted_out", source=f"provider:{err.code}")
            # details: (code, what the refusal is about): failover reads the second.
            raise ApplicationError(
                err.reason,
                err.code,
                err.about.value,
                type=ErrorType.PERMANENT_PROVIDER_ERROR,
                non_retryable=True,
            ) from err
        except SmsTransientError as err:
            answer = failover.classify_answer(
                ErrorKind.TRANSIENT, err.about, code=err.code, http_status=err.http_status
            )
            busy_for_rate = err.http_status == 429
            await self._health(
                provider, circuit.Outcome.NEUTRAL if busy_for_rate else circuit.Outcome.FAILURE
            )
            if input.failover and answer == failover.Answer.REFUSED_BY_PROVIDER:
                # Refused before any byte left: definitive, and another provider may try.
                await self._record_refusal(token, provider, err.code, err.reason)
                raise refusals.provider_refused(err.reason, err.code, None) from err
            # Never processed (429, 5xx before acceptance, connect failure): safe to send again.
            await self._release_claim(token)
            delay = timedelta(seconds=err.retry_after) if err.retry_after else None
            raise ApplicationError(
                err.reason,
                err.code,
                err.about.value,
                type=ErrorType.TRANSIENT_PROVIDER_ERROR,
                next_retry_delay=delay,
            ) from err
        except SmsAmbiguousError as err:
            ambiguous = ObservationFacts(
                source="send",
                raw_status="timeout",
                normalized=AttemptState.UNKNOWN,
                observed_at=now_utc(),
                dedupe_key=f"send:{token}:ambiguous",
                detail={"reason": err.reason, "provider": provider},
            )
            await self._tx(
                lambda s: self._noted_and_recorded(
                    s, provider, circuit.Outcome.FAILURE, token, ambiguous
                )
            )
            # Retried by the RetryPolicy; the next try reconciles before anything is sent.
            raise ApplicationError(
                "the submission may have reached the provider; reconciling before any new request",
                type=ErrorType.AMBIGUOUS_SUBMISSION,
            ) from err
        accepted = ObservationFacts(
            source="send",
            raw_status=submitted.raw_status,
            normalized=submitted.state or AttemptState.SUBMITTED,
            observed_at=now_utc(),
            dedupe_key=f"send:{token}:submitted",
            provider_at=submitted.provider_at,
            remote_id=submitted.remote_id,
            detail={"provider": provider},
        )
        result = await self._tx(
            lambda s: self._noted_and_recorded(
                s, provider, circuit.Outcome.SUCCESS, token, accepted
            )
        )
        return SubmitOutcome(
            result.state or AttemptState.SUBMITTED.value,
            submitted.remote_id,
            answer=failover.Answer.ACCEPTED.value,
            provider=provider,
        )

    async def _record_refusal(
        self, token: str, provider: str, code: str | None, reason: str
    ) -> None:
        await self._record(
            token,
            ObservationFacts(
                source="send",
                raw_status="rejected",
                normalized=AttemptState.FAILED,
                observed_at=now_utc(),
                dedupe_key=f"send:{token}:rejected",
                provider_code=code,
                detail={"reason": reason, "provider": provider},
            ),
        )

    async def _refused_by_circuit(
        self, token: str, provider: str, retry_at: datetime | None
    ) -> NoReturn:
        """The provider's circuit is open: nothing is sent (one fast refusal, no timeout).

        Handed back to the workflow at once, with the time a probe may try: it fails over
        or defers until then (nothing left this process: the claim was released with the
        refusal)."""
        reason = f"{provider} circuit open: refused without sending"
        if retry_at is not None:
            reason += f" (a probe may try at {retry_at.isoformat(timespec='seconds')})"
        await self._tx(
            lambda s: refusals.record_deferred(s, token, provider, "circuit_open", reason, retry_at)
        )
        raise refusals.provider_refused(reason, "circuit_open", retry_at)

    async def _refused_for_the_account(
        self, token: str, provider: str, err: SmsPermanentError
    ) -> NoReturn:
        """The provider refused our account (credentials, suspension, permissions, its
        sender; ``domain.provider_errors.about_the_account``): nothing was created and
        nothing is wrong with the message.

        It counts against the provider's circuit, and is handed back to the workflow at
        once, failover or not, with the time the provider may take work again (the
        circuit's next probe; one cool-down from now while it is still closed): the
        workflow moves to another provider or defers until then, as a new attempt
        authorized again, and never ends the intent for it (docs/transports.md, "Account
        refusals")."""

        def work(session: Session) -> datetime | None:
            now = now_utc()
            retry_at = None
            if self._breaker is not None:
                after = circuits.note_outcome(
                    session, provider, circuit.Outcome.FAILURE, now, self._breaker
                )
                retry_at = after.next_probe_at(self._breaker) or now + self._breaker.cool_down
            refusals.record_deferred(session, token, provider, err.code, err.reason, retry_at)
            return retry_at

        retry_at = await self._tx(work)
        raise refusals.provider_refused(err.reason, err.code, retry_at) from err

    async def _reconcile(self, view: _AttemptView, provider: str) -> SubmitOutcome:
        """A request may have left: look it up by destination, time window and content hash."""
        assert view.send_started_at is not None
        now = now_utc()
        transport = self._transports.for_alias(view.provider)
        if not transport.finds_lost_creates:
            # Nothing can say "not there" (Telnyx has no lookup by destination): the
            # attempt stays unknown for a person to settle, and is never sent again.
            return await self._stays_unknown(
                view, provider, now, failover.Lookup.UNAVAILABLE, NO_LOOKUP_REASON
            )
        found = await transport.find(
            to=view.to,
            sent_after=view.send_started_at - timedelta(minutes=1),
            sent_before=now + timedelta(minutes=1),
            body_sha256=view.content_sha256,
        )
        if found:
            match = found[0]
            result = await self._record(
                view.token,
                _observed(
                    match,
                    source="reconcile",
                    observed_at=now,
                    dedupe_key=f"reconcile:{view.token}:{match.raw_status}",
                    detail={"matches": len(found)},
                ),
            )
            return SubmitOutcome(
                result.state or view.state,
                match.remote_id,
                reconciled=True,
                reason="reconciled: found at the provider",
                lookup=failover.Lookup.FOUND.value,
                answer=failover.Answer.AMBIGUOUS.value,
                provider=provider,
            )
        if now - view.send_started_at < RECONCILE_GRACE:
            # Expected while the provider's list catches up: benign, so the retry does not
            # read as a failure in the Web UI (nor log at warning level).
            raise ApplicationError(
                "not visible at the provider yet; looking again",
                type=ErrorType.RECONCILE_PENDING,
                category=ApplicationErrorCategory.BENIGN,
            )
        lookup = failover.found_nothing(sees_every_state=transport.lookup_sees_every_state)
        return await self._stays_unknown(
            view,
            provider,
            now,
            lookup,
            "reconciled: not found at the provider; an operator may approve a resend"
            if lookup == failover.Lookup.NOT_FOUND
            else NOT_SEEN_REASON,
        )

    async def _stays_unknown(
        self,
        view: _AttemptView,
        provider: str,
        now: datetime,
        lookup: failover.Lookup,
        reason: str,
    ) -> SubmitOutcome:
        """Reconciling placed nothing: the attempt stays unknown, with why as evidence
        (``no_lookup`` when the provider cannot look, ``not_found`` or ``not_seen`` when it
        looked)."""
        raw = "no_lookup" if lookup == failover.Lookup.UNAVAILABLE else lookup.value
        await self._record(
            view.token,
            ObservationFacts(
                source="reconcile",
                raw_status=raw,
                normalized=AttemptState.UNKNOWN,
                observed_at=now,
                dedupe_key=f"reconcile:{view.token}:{raw}",
            ),
        )
        return SubmitOutcome(
            AttemptState.UNKNOWN.value,
            None,
            reconciled=lookup != failover.Lookup.UNAVAILABLE,
            reason=reason,
            lookup=lookup.value,
            answer=failover.Answer.AMBIGUOUS.value,
            provider=provider,
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
            _observed(
                status,
                source="poll",
                observed_at=now_utc(),
                dedupe_key=f"poll:{token}:{status.raw_status}:{status.error_code or ''}",
            ),
        )
        return PollOutcome(result.state or attempt.state, status.raw_status, status.error_code)

    @activity.defn(name=channels.SMS.lookup_activity)
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
            try:
                status = await self._transports.for_alias(attempt.provider).status(
                    attempt.remote_id
                )
                matches = 1
            except SmsNotFound:
                status = None  # the provider's own answer: it holds no such message
        elif attempt.destination_ct is not None:
            async with stopping_on_key_errors(self._tx, "lookup_sms", attempt_token=token):
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
        key = f"lookup:{token}:{now.isoformat()}"
        detail = {"matches": matches, "requested_by": input.requested_by[:120]}
        result = await self._record(
            token,
            _observed(status, source="lookup", observed_at=now, dedupe_key=key, detail=detail)
            if status
            else ObservationFacts(
                source="lookup",
                raw_status=raw,
                normalized=None,
                observed_at=now,
                dedupe_key=key,
                detail=detail,
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
