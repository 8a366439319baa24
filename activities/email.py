"""Email activity: one submission per attempt token, attachments verified first.

Over SMTP the relay's 250 is the last word (`sent`), and a lost answer is sent again with
the same Message-ID. Through a provider that reports events (SendGrid) the 202 leaves the
attempt `submitted` until its events arrive, and a send whose answer was lost is never
sent again: the attempt is recorded `unknown` for a person to settle (docs/transports.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import NoReturn

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import ProviderTransports, now_utc, refusals
from activities.contracts import ErrorType, SubmitInput, SubmitOutcome
from activities.key_errors import stopping_on_key_errors
from domain import channels
from domain.email_events import without_addresses
from domain.senders import SenderBook
from domain.states import AttemptState
from domain.unsubscribe import SUBSCRIPTION_LIKE, unsubscribe_token
from ledger import metrics, observations
from ledger import repository as repo
from ledger.artifacts import ArtifactError, ArtifactStore, ref_of
from ledger.crypto import FieldCipher
from ledger.models import Artifact, Attempt, Intent
from ledger.observations import ObservationFacts
from ledger.transactions import Transactions
from transports.email import EmailAttachment, EmailMessageSpec, EmailSubmitted, EmailTransport
from transports.errors import EmailAmbiguousError, EmailPermanentError, EmailTransientError


class EmailActivities:
    def __init__(
        self,
        transport: EmailTransport,
        sessions: sessionmaker[Session],
        cipher: FieldCipher,
        artifacts: ArtifactStore,
        *,
        public_base_url: str,
        unsubscribe_secret: str,
        senders: SenderBook | None = None,
        providers: Mapping[str, EmailTransport] | None = None,
    ) -> None:
        """`transport` is the default provider's (attempts with no provider recorded);
        `providers` every configured email provider by alias (worker.py builds both)."""
        self._transports = ProviderTransports(transport, providers)
        self._senders = senders or SenderBook.build()
        self._sessions = sessions
        self._tx = Transactions(sessions)
        self._cipher = cipher
        self._artifacts = artifacts
        self._base = public_base_url.rstrip("/")
        self._unsubscribe_secret = unsubscribe_secret

    @activity.defn(name=channels.EMAIL.send_activity)
    async def send_email(self, input: SubmitInput) -> SubmitOutcome:
        token = input.attempt_token

        def load(session: Session) -> tuple[Attempt, Intent, Artifact | None]:
            attempt = repo.attempt_by_token(session, token)
            intent = session.get(Intent, attempt.intent_id)
            assert intent is not None
            artifact = (
                session.get(Artifact, intent.artifact_sha256) if intent.artifact_sha256 else None
            )
            session.expunge_all()
            return attempt, intent, artifact

        attempt, intent, artifact = await self._tx(load)
        # The provider the attempt was prepared for (its alias); it decides what a lost
        # answer means and what the acceptance is.
        transport = self._transports.for_alias(attempt.provider)
        resends = transport.resend_after_ambiguity
        sendable = (
            (AttemptState.PREPARED.value, AttemptState.UNKNOWN.value)
            if resends
            else (AttemptState.PREPARED.value,)
        )
        if attempt.state not in sendable:
            metrics.count_duplicate("send_already_submitted", channels.EMAIL.name)
            return SubmitOutcome(attempt.state, attempt.remote_id or attempt.message_id)
        if attempt.destination_ct is None or attempt.body_ct is None:
            raise ApplicationError(
                "the attempt's destination or body was purged",
                type=ErrorType.NOT_FOUND,
                non_retryable=True,
            )
        attachments: list[EmailAttachment] = []
        if intent.artifact_sha256:
            if artifact is None:
                await self._fail(token, "artifact_missing", "the artifact is not registered")
            ref = ref_of(artifact)
            try:
                # Read through the configured store (HERALD_ARTIFACT_STORE) and verified
                # before any connection to the provider: a different file is never sent.
                content = await asyncio.to_thread(self._artifacts.get, ref)
                attachments.append(EmailAttachment(ref.filename, ref.media_type, content))
            except ArtifactError as err:
                await self._fail(
                    token, "artifact_mismatch", str(err), type=ErrorType.ARTIFACT_MISMATCH
                )
        unsubscribe = unsubscribe_token(self._unsubscribe_secret, token)
        async with stopping_on_key_errors(self._tx, "send_email", attempt_token=token):
            spec = EmailMessageSpec(
                token=token,
                to=self._cipher.decrypt(attempt.destination_ct, context=token),
                # Attempts prepared before the resolved sender was kept resolve it now.
                sender=attempt.sender_address or self._senders.email_for(attempt.sender),
                subject=(
                    self._cipher.decrypt(attempt.subject_ct, context=token)
                    if attempt.subject_ct
                    else intent.event_type
                ),
                text=self._cipher.decrypt(attempt.body_ct, context=token),
                attachments=attachments,
                unsubscribe_url=(
                    f"{self._base}/v1/unsubscribe/{unsubscribe}"
                    if intent.category in SUBSCRIPTION_LIKE
                    else None
                ),
                categories=(intent.category,),
            )
        if not resends and not await self._tx(lambda s: self._claim(s, token)):
            # An earlier try of this activity started the send and its answer was lost
            # (a worker died mid-request): the provider may have it, and cannot be asked.
            return await self._unknown(
                transport,
                token,
                "send_outcome_lost",
                "an earlier try started the send; its answer was lost",
            )
        try:
            sent = await transport.send(spec)
        except EmailPermanentError as err:
            reason = without_addresses(err.reason)
            code = str(err.code or "")
            if err.about_the_account:
                # Nothing was accepted and nothing is wrong with the message: the workflow
                # defers (a new attempt later), never ends the intent for it.
                await self._tx(
                    lambda s: refusals.record_deferred(
                        s, token, transport.provider, code, reason, None
                    )
                )
                raise refusals.provider_refused(reason, code, None) from err
            await self._fail(token, "rejected", reason, code=code)
        except EmailTransientError as err:
            if not resends:
                # Nothing was accepted (429, connection refused): the claim is released.
                await self._tx(lambda s: self._release(s, token))
            raise ApplicationError(
                without_addresses(err.reason),
                type=ErrorType.TRANSIENT_PROVIDER_ERROR,
                next_retry_delay=(
                    timedelta(seconds=err.retry_after) if err.retry_after is not None else None
                ),
            ) from err
        except EmailAmbiguousError as err:
            if not resends:
                # No idempotency key and no lookup: a second request would be a second
                # message in the inbox. A person settles it (docs/architecture.md).
                return await self._unknown(
                    transport, token, "ambiguous", without_addresses(err.reason)
                )
            # SMTP has no lookup; a resend reuses the same Message-ID, which receivers dedupe.
            raise ApplicationError(
                without_addresses(err.reason), type=ErrorType.AMBIGUOUS_SUBMISSION
            ) from err

        state = await self._tx(lambda s: self._record_accepted(s, transport, token, sent))
        default = AttemptState.SUBMITTED if transport.reports_events else AttemptState.SENT
        return SubmitOutcome(state or default.value, sent.remote_id or sent.message_id)

    @staticmethod
    def _record_accepted(
        session: Session, transport: EmailTransport, token: str, sent: EmailSubmitted
    ) -> str | None:
        session.query(Attempt).filter(Attempt.token == token).update(
            {Attempt.message_id: sent.message_id}
        )
        if transport.reports_events:
            # Accepted by a provider that will report delivery: open until its events.
            raw, normalized = f"{transport.provider}_{sent.response}", AttemptState.SUBMITTED
        else:
            raw, normalized = "smtp_250", AttemptState.SENT
        result = observations.record_observation(
            session,
            ObservationFacts(
                source="send",
                raw_status=raw[:40],
                normalized=normalized,
                observed_at=sent.accepted_at,
                dedupe_key=f"send:{token}:{raw}",
                remote_id=sent.remote_id,
                detail={"message_id": sent.message_id, "provider": transport.provider},
            ),
            token=token,
        )
        return result.state

    @staticmethod
    def _claim(session: Session, token: str) -> bool:
        """Mark the send started, unless an earlier try did (then its outcome is unknown)."""
        claimed = session.execute(
            update(Attempt)
            .where(
                Attempt.token == token,
                Attempt.state == AttemptState.PREPARED.value,
                Attempt.send_started_at.is_(None),
            )
            .values(send_started_at=now_utc())
            .returning(Attempt.id)
        ).scalar_one_or_none()
        return claimed is not None

    @staticmethod
    def _release(session: Session, token: str) -> None:
        session.execute(
            update(Attempt)
            .where(Attempt.token == token, Attempt.state == AttemptState.PREPARED.value)
            .values(send_started_at=None)
        )

    async def _unknown(
        self, transport: EmailTransport, token: str, raw: str, reason: str
    ) -> SubmitOutcome:
        why = (
            f"{reason}; {transport.provider} has no lookup, so it is not sent again: "
            "a person settles it"
        )
        state = await self._tx(
            lambda s: (
                observations.record_observation(
                    s,
                    ObservationFacts(
                        source="send",
                        raw_status=raw,
                        normalized=AttemptState.UNKNOWN,
                        observed_at=now_utc(),
                        dedupe_key=f"send:{token}:{raw}",
                        detail={"reason": why, "provider": transport.provider},
                    ),
                    token=token,
                ).state
            )
        )
        return SubmitOutcome(state or AttemptState.UNKNOWN.value, reason=why)

    async def _fail(
        self,
        token: str,
        raw: str,
        reason: str,
        *,
        code: str = "",
        type: ErrorType = ErrorType.PERMANENT_PROVIDER_ERROR,
    ) -> NoReturn:
        """Record the send as failed and end the activity with a non-retryable error."""
        await self._tx(
            lambda s: observations.record_observation(
                s,
                ObservationFacts(
                    source="send",
                    raw_status=raw,
                    normalized=AttemptState.FAILED,
                    observed_at=now_utc(),
                    dedupe_key=f"send:{token}:{raw}",
                    provider_code=code or None,
                    detail={"reason": reason},
                ),
                token=token,
            )
        )
        raise ApplicationError(reason, code or None, type=type, non_retryable=True)
