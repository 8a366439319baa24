"""Email activity: one SMTP submission per attempt token, attachments verified first."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import NoReturn

from sqlalchemy.orm import Session, sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import ProviderTransports, now_utc
from activities.contracts import ErrorType, SubmitInput, SubmitOutcome
from domain import channels
from domain.senders import SenderBook
from domain.states import AttemptState
from domain.unsubscribe import unsubscribe_token
from ledger import metrics
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.models import Artifact, Attempt, Intent
from ledger.repository import ObservationFacts
from ledger.transactions import Transactions
from transports.artifacts import ArtifactError, ArtifactRef, ArtifactStore
from transports.email import (
    EmailAmbiguousError,
    EmailAttachment,
    EmailMessageSpec,
    EmailPermanentError,
    EmailTransientError,
    SmtpEmail,
)

# Categories that are subscription-like and so carry RFC 8058 one-click unsubscribe headers.
SUBSCRIPTION_LIKE = {"promotional", "operational"}


_ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def _without_addresses(text: str) -> str:
    """SMTP replies often quote the recipient; errors reach Temporal history and logs."""
    return _ADDRESS.sub("<address>", text)


class EmailActivities:
    def __init__(
        self,
        transport: SmtpEmail,
        sessions: sessionmaker[Session],
        cipher: FieldCipher,
        artifacts: ArtifactStore,
        *,
        public_base_url: str,
        unsubscribe_secret: str,
        senders: SenderBook | None = None,
        providers: Mapping[str, SmtpEmail] | None = None,
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
        if attempt.state not in (AttemptState.PREPARED.value, AttemptState.UNKNOWN.value):
            metrics.count_duplicate("send_already_submitted", channels.EMAIL.name)
            return SubmitOutcome(attempt.state, attempt.message_id)
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
            ref = ArtifactRef(
                sha256=artifact.sha256,
                size=artifact.size,
                media_type=artifact.media_type,
                filename=artifact.filename,
                location=artifact.location,
            )
            try:
                # Verified before any SMTP connection: a different file is never sent.
                attachments.append(
                    await asyncio.to_thread(EmailAttachment.from_artifact, self._artifacts, ref)
                )
            except ArtifactError as err:
                await self._fail(
                    token, "artifact_mismatch", str(err), type=ErrorType.ARTIFACT_MISMATCH
                )
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
                f"{self._base}/v1/unsubscribe/{unsubscribe_token(self._unsubscribe_secret, token)}"
                if intent.category in SUBSCRIPTION_LIKE
                else None
            ),
        )
        try:
            sent = await self._transports.for_alias(attempt.provider).send(spec)
        except EmailPermanentError as err:
            await self._fail(
                token, "rejected", _without_addresses(err.reason), code=str(err.code or "")
            )
        except EmailTransientError as err:
            raise ApplicationError(
                _without_addresses(err.reason), type=ErrorType.TRANSIENT_PROVIDER_ERROR
            ) from err
        except EmailAmbiguousError as err:
            # SMTP has no lookup; a resend reuses the same Message-ID, which receivers dedupe.
            raise ApplicationError(
                _without_addresses(err.reason), type=ErrorType.AMBIGUOUS_SUBMISSION
            ) from err

        def record(session: Session) -> str | None:
            session.query(Attempt).filter(Attempt.token == token).update(
                {Attempt.message_id: sent.message_id}
            )
            result = repo.record_observation(
                session,
                ObservationFacts(
                    source="send",
                    raw_status="smtp_250",
                    normalized=AttemptState.SENT,
                    observed_at=sent.accepted_at,
                    dedupe_key=f"send:{token}:smtp_250",
                    remote_id=None,
                    detail={"message_id": sent.message_id},
                ),
                token=token,
            )
            return result.state

        state = await self._tx(record)
        return SubmitOutcome(state or AttemptState.SENT.value, sent.message_id)

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
            lambda s: repo.record_observation(
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
