"""What apps and operators use: record an intent and start its workflow, cancel, resend.

    herald = await HeraldClient.connect()
    ref = await herald.notify(NotificationRequest(business_key="class-opening:c-9081:m-1842",
                                                  recipient_ref="m-1842", phone="+1...",
                                                  template_key="class-opening"))

`record(session, request)` joins the app's own SQLAlchemy transaction instead, so the
notification commits or rolls back with the business change; the outbox relay starts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy.orm import Session, sessionmaker
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError
from temporalio.exceptions import TimeoutError as ActivityTimeout
from temporalio.service import RPCError, RPCStatusCode

import settings as settings_module
from activities.contracts import (
    CancelRequest,
    CancelResult,
    LookupRequest,
    LookupResult,
    NotificationInput,
    Projection,
    ResendRequest,
    ResendResult,
    SettleRequest,
    SettleResult,
)
from domain import key_privacy, keys, proof
from domain.principals import Principal
from domain.requests import NotificationRequest
from ledger import intake, operator_actions, settlements, timeline
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.engine import ledger_engine
from ledger.errors import NO_INTENT, NotFound
from ledger.keys import check_key_ring
from ledger.models import Intent
from starter import temporal as temporal_connection
from workflows.notification import (
    APPROVE_RESEND,
    CANCEL,
    CHANNEL,
    EVENT_TYPE,
    LOOKUP,
    REGION,
    SETTLE,
    STATE,
    NotificationWorkflow,
)

log = logging.getLogger("herald.client")
T = TypeVar("T")

BULK_CONCURRENCY = 8
"""Settlements of one bulk settle in flight at once (each is a workflow update)."""
DESCRIBE_TIMEOUT = timedelta(seconds=5)
"""How long an operator action waits to learn whether the workflow runs: a Temporal that
does not answer is then DEADLINE_EXCEEDED (the API's 503), not a request that hangs."""


@dataclass
class BulkSettlement:
    """What a bulk settle did: every member settled, or refused with its reason."""

    members: int
    settled: list[str] = field(default_factory=list)
    """Business keys settled."""
    refused: dict[str, str] = field(default_factory=dict)
    """Business key -> why its settlement was refused."""
    refused_all: str = ""
    """Why nothing was attempted (the count to confirm no longer matched)."""


@dataclass(frozen=True)
class IntentRef:
    intent_id: str
    workflow_id: str
    business_key: str
    existed: bool
    """True when the business key was already recorded: the existing intent is returned."""
    created_by: str | None = None
    """The principal that recorded the intent (the existing one's, when it `existed`)."""


@dataclass(frozen=True)
class StartOptions:
    """What a workflow start carries besides its input: filters and words for the Web UI."""

    attributes: TypedSearchAttributes
    summary: str
    """One line in the workflow list (static summary)."""
    details: str
    """Markdown on the workflow's page (static details)."""


def start_summary(
    *,
    event_type: str,
    business_key: str,
    channels: list[str],
    mode: str,
    category: str,
    region: str,
) -> str:
    """`class-opening · class-opening:c-9081:m-1842 · sms then email · transactional · US`."""
    joiner = " then " if mode == "fallback" else " and "
    return f"{event_type} · {business_key} · {joiner.join(channels)} · {category} · {region}"


def start_details(
    *,
    intent_id: str,
    policy_name: str,
    template_key: str,
    template_version: int | None,
    locale: str,
) -> str:
    version = f"v{template_version}" if template_version else "the active version"
    return (
        f"**Intent** `{intent_id}`  \n"
        f"**Policy** `{policy_name}` (the version active at each decision)  \n"
        f"**Template** `{template_key}` {version}, locale `{locale}`  \n"
        f"**Timeline** `herald show {intent_id}`"
    )


class HeraldClient:
    def __init__(
        self,
        temporal: Client,
        sessions: sessionmaker[Session],
        cipher: FieldCipher,
        *,
        task_queue: str = "herald",
        retention_days: int = 30,
        policy_name: str = "default",
        namespace: str = keys.DEFAULT_NAMESPACE,
    ) -> None:
        """`namespace`: where the keys this client records with no principal live
        (HERALD_KEY_NAMESPACE; an intent recorded `by` a principal is in the principal's)."""
        self.temporal = temporal
        self.namespace = keys.validate_namespace(namespace)
        self.sessions = sessions
        self._cipher = cipher
        self._task_queue = task_queue
        self._retention_days = retention_days
        self._policy_name = policy_name
        self._unmarked: list[str] = []
        """Started intents whose outbox rows are not written started yet."""
        self._marking = asyncio.Lock()

    @classmethod
    async def connect(cls, cfg: settings_module.Settings | None = None) -> HeraldClient:
        cfg = cfg or settings_module.load()
        temporal = await temporal_connection.connect(cfg)
        # Idle connections are pinged at checkout, so a Postgres restart does not surface
        # to the app (ledger.engine).
        engine = ledger_engine(cfg.resolved_database_url())
        cipher = FieldCipher(cfg.resolved_data_keys())
        # A ring that cannot read the ledger is refused here, naming the key id, before
        # anything is recorded (ledger.keys).
        await asyncio.to_thread(check_key_ring, engine, cipher)
        return cls(
            temporal,
            sessionmaker(engine, expire_on_commit=False),
            cipher,
            task_queue=cfg.task_queue,
            retention_days=cfg.pii_retention_days,
            policy_name=cfg.policy_name,
            namespace=cfg.key_namespace,
        )

    # --- apps ------------------------------------------------------------------------

    def record(
        self, session: Session, request: NotificationRequest, *, by: Principal | None = None
    ) -> IntentRef:
        """Add the intent and its outbox row to the caller's transaction (no commit here).

        `by` is the authenticated principal recording it (the API passes it): the intent
        names it, and its key lives in the principal's namespace. Without one (a Python
        app in-process), the key lives in this client's `namespace`."""
        return self._record(session, request, by=by)[0]

    def _record(
        self, session: Session, request: NotificationRequest, *, by: Principal | None = None
    ) -> tuple[IntentRef, repo.IntentFields]:
        fields = intake.validate(
            session,
            request,
            self._cipher,
            now=datetime.now(UTC),
            retention_days=self._retention_days,
            namespace=by.key_namespace if by is not None else self.namespace,
        )
        fields = replace(fields, created_by=by.name if by is not None else None)
        recorded = repo.record_intent(session, fields)
        ref = IntentRef(
            recorded.intent_id,
            recorded.workflow_id,
            recorded.business_key,
            existed=not recorded.created,
            created_by=recorded.created_by,
        )
        return ref, fields

    async def notify(
        self, request: NotificationRequest, *, by: Principal | None = None
    ) -> IntentRef:
        """Record the intent in its own transaction, then start its workflow at once.

        A crash between the two is healed by the outbox relay; a second call with the same
        business key (in the same namespace) returns the existing intent and starts
        nothing new. `by` is the principal recording it, when one signed in (`herald
        send` passes it), as for `record`.
        """

        def work() -> tuple[IntentRef, StartOptions]:
            with self.sessions.begin() as session:
                # An existing intent with this key has the same payload (or record raised).
                ref, fields = self._record(session, request, by=by)
                return ref, self._start_options_of(ref.intent_id, fields)

        ref, start = await asyncio.to_thread(work)
        try:
            await self.start(ref.intent_id, ref.workflow_id, start=start)
        except RPCError as err:
            # Recorded and committed: the outbox relay will start it; do not report a failure.
            log.warning(
                "intent %s recorded; workflow start deferred to the relay: %s",
                ref.intent_id,
                err.status.name if err.status else "error",
            )
        return ref

    async def start(
        self,
        intent_id: str,
        workflow_id: str,
        *,
        start: StartOptions | None = None,
    ) -> None:
        """Start (or find) the intent's workflow and mark its outbox row started."""
        await self.start_workflow(intent_id, workflow_id, start=start)
        await self._mark_started(intent_id)

    async def _mark_started(self, intent_id: str) -> None:
        """Write the intent's outbox row started, together with the rows of every other
        start that finished while the previous write was running: one transaction for
        them all instead of one each (under load most starts share a write).

        It returns once a committed write covered this row, or after that write failed:
        a failure is logged, not raised. The intent is recorded and its workflow runs; a
        row left unmarked only means the relay starts it once more after FAST_PATH_GRACE
        and Temporal hands back the run that exists (USE_EXISTING / REJECT_DUPLICATE).
        """
        self._unmarked.append(intent_id)
        async with self._marking:
            if not self._unmarked:
                return  # the write that just finished carried this row
            batch, self._unmarked = self._unmarked, []
            try:
                await asyncio.to_thread(self._write_started, batch)
            except Exception as err:  # noqa: BLE001 - the relay heals an unmarked row
                log.warning(
                    "%d outbox row(s) not marked started (the relay will): %s",
                    len(batch),
                    type(err).__name__,
                )

    def _write_started(self, intent_ids: list[str]) -> None:
        with self.sessions.begin() as session:
            repo.mark_outbox_started(session, intent_ids, datetime.now(UTC))

    async def start_workflow(
        self,
        intent_id: str,
        workflow_id: str,
        *,
        rpc_timeout: timedelta | None = None,
        start: StartOptions | None = None,
    ) -> None:
        """Start the intent's workflow, or find the run that already has its id.

        `start` holds the start's search attributes and Web UI summary when the caller
        read them already (in the transaction that recorded the intent); otherwise they
        are read here. The outbox row is left to the caller: the relay marks it in the
        transaction that holds the row's lock."""
        if start is None:
            start = await asyncio.to_thread(self._read_start_options, intent_id)
        try:
            await self.temporal.start_workflow(
                NotificationWorkflow.run,
                NotificationInput(intent_id),
                id=workflow_id,
                task_queue=self._task_queue,
                search_attributes=start.attributes,
                static_summary=start.summary,
                static_details=start.details,
                # The running one is returned; a closed one is never run again, so the
                # ledger's one-intent-per-key and Temporal's one-run-per-id agree.
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                rpc_timeout=rpc_timeout,
            )
        except WorkflowAlreadyStartedError:
            pass  # a closed run of this id exists: it is never run twice

    def lookup_hmac(self, normalized_destination: str) -> str:
        return self._cipher.lookup_hmac(normalized_destination)

    def decrypt_field(self, ciphertext: str, *, context: str) -> str:
        """A ledger field in clear (the console's recorded reveal of a destination)."""
        return self._cipher.decrypt(ciphertext, context=context)

    @property
    def cipher(self) -> FieldCipher:
        """The ledger's field cipher, for read models that show a destination masked
        (`ledger.timeline.timeline(..., cipher=)`), as `timeline` below does."""
        return self._cipher

    def _read_start_options(self, intent_id: str) -> StartOptions:
        with self.sessions() as session:
            intent = session.get(Intent, intent_id)
            assert intent is not None
            return self._start_options_of(intent_id, intent)

    def _start_options_of(self, intent_id: str, intent: Intent | repo.IntentFields) -> StartOptions:
        """Set at start so the Web UI can filter and read at once (ids and codes only,
        never PII: the key itself is refused at intake when it holds contact data)."""
        state = "scheduled" if intent.send_at and intent.send_at > datetime.now(UTC) else "sending"
        plan = intent.channel_plan
        return StartOptions(
            attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(STATE, state),
                    SearchAttributePair(CHANNEL, plan["channels"][0]),
                    SearchAttributePair(REGION, intent.region),
                    SearchAttributePair(EVENT_TYPE, intent.event_type),
                ]
            ),
            summary=start_summary(
                event_type=intent.event_type,
                business_key=intent.business_key,
                channels=plan["channels"],
                mode=plan["mode"],
                category=intent.category,
                region=intent.region,
            ),
            details=start_details(
                intent_id=intent_id,
                policy_name=self._policy_name,
                template_key=intent.template_key,
                template_version=intent.template_version,
                locale=intent.locale,
            ),
        )

    # --- operators -------------------------------------------------------------------

    def _cancelled(self, intent_id: str) -> bool:
        with self.sessions() as session:
            return repo.get_intent(session, intent_id).cancelled_at is not None

    def _resolve(self, id_or_key: str, by: Principal | None) -> tuple[str, str, str]:
        with self.sessions() as session:
            intent = repo.get_intent(session, id_or_key, repo.KeyScope.of(by))
            if by is not None and not by.reads_intent_of(intent.created_by):
                # Another app's intent (named by its id) is as unknown as a missing one.
                raise NotFound(NO_INTENT, answer=NO_INTENT)
            return intent.id, intent.workflow_id, intent.country

    async def _handle(
        self, id_or_key: str, *, by: Principal | None = None, **notes: str
    ) -> tuple[str, WorkflowHandle[Any, Any], bool]:
        """The intent's id, its workflow's handle and whether it runs, once each of the
        operator's `notes` (field -> text) is known to hold no contact data: they go into
        the workflow's history and every timeline (NoteRefused otherwise). A business key
        is looked up in `by`'s scope (repository.KeyScope), and only an intent `by` may
        read is found: an app acts on its own intents alone."""
        intent_id, workflow_id, country = await asyncio.to_thread(self._resolve, id_or_key, by)
        key_privacy.refuse_unfit_notes(notes, country=country)
        handle = self.temporal.get_workflow_handle(workflow_id)
        try:
            desc = await handle.describe(rpc_timeout=DESCRIBE_TIMEOUT)
            running = desc.status == WorkflowExecutionStatus.RUNNING
        except RPCError as err:
            # Only "no such workflow" says it does not run. Temporal unreachable says
            # nothing: raised (the API answers 503), never recorded as "had finished".
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            running = False
        return intent_id, handle, running

    async def _update(
        self, handle: WorkflowHandle[Any, Any], name: str, request: Any, result_type: type[T]
    ) -> T:
        """The workflow's update `name`; FinishedMeanwhile when the workflow closed between
        the look that found it running and the update ("already completed", "aborted by
        closing workflow"), so the caller answers as for a finished workflow."""
        try:
            return await handle.execute_update(name, request, result_type=result_type)
        except RPCError as err:
            try:
                desc = await handle.describe(rpc_timeout=DESCRIBE_TIMEOUT)
                still = desc.status == WorkflowExecutionStatus.RUNNING
            except RPCError as gone:
                if gone.status != RPCStatusCode.NOT_FOUND:
                    raise
                still = False
            if still:
                raise
            raise FinishedMeanwhile from err

    async def cancel(self, id_or_key: str, *, by: Principal, reason: str) -> CancelResult:
        """Close the intent's future work; recorded under `by` (name and role). The one
        cancel path of the API, the CLI and the console."""
        intent_id, handle, running = await self._handle(id_or_key, by=by, reason=reason)
        if running:
            with contextlib.suppress(FinishedMeanwhile):
                return await self._update(
                    handle,
                    CANCEL,
                    CancelRequest(
                        by.name,
                        reason,
                        operator_role=by.role.value,
                        proof=self._prove("cancel", intent_id, by, reason),
                    ),
                    CancelResult,
                )
        # The workflow has finished. Cancelled already: said so, and nothing new recorded
        # (a form posted twice, a retry), as the running workflow answers a second cancel.
        if await asyncio.to_thread(self._cancelled, intent_id):
            return CancelResult(True, [], [], "already cancelled")
        # Otherwise nothing is pending, and nothing already sent is recalled.
        message = "the intent had already finished; nothing pending to close, nothing recalled"
        await self._record_action(intent_id, "cancel", by, reason, "accepted", {"note": message})
        return CancelResult(True, [], [], message)

    async def approve_resend(
        self, id_or_key: str, *, channel: str, by: Principal, reason: str
    ) -> ResendResult:
        """Approve a new attempt (or record why not); recorded under `by`. The one
        approve-resend path of the API, the CLI and the console."""
        intent_id, handle, running = await self._handle(id_or_key, by=by, reason=reason)
        refusal = "the intent's workflow has finished; record a new intent instead"
        if running:
            try:
                return await self._update(
                    handle,
                    APPROVE_RESEND,
                    ResendRequest(
                        channel,
                        by.name,
                        reason,
                        operator_role=by.role.value,
                        proof=self._prove("approve-resend", intent_id, by, reason, channel),
                    ),
                    ResendResult,
                )
            except WorkflowUpdateFailedError as err:
                refusal = _update_refusal(err)
            except FinishedMeanwhile:
                pass
        await self._record_action(
            intent_id,
            "approve-resend",
            by,
            reason,
            "refused",
            {"why": refusal, "channel": channel},
        )
        return ResendResult(False, refusal)

    async def settle(
        self,
        id_or_key: str,
        *,
        channel: str,
        rule: str,
        reason: str,
        reference: str = "",
        by: Principal,
    ) -> SettleResult:
        """Settle the channel's unknown attempt under a named rule of the active policy
        (or record why not); recorded under `by`. The one settle path of the API, the CLI
        and the console: the workflow's `settle` update, with the proof of `by`."""
        intent_id, handle, running = await self._handle(
            id_or_key, by=by, reason=reason, reference=reference
        )
        refusal = "the intent's workflow has finished; its settlement window is closed"
        if running:
            try:
                return await self._update(
                    handle,
                    SETTLE,
                    SettleRequest(
                        channel,
                        rule,
                        reason,
                        reference,
                        operator=by.name,
                        operator_role=by.role.value,
                        proof=self._prove(
                            "settle", intent_id, by, reason, f"{channel}|{rule}|{reference}"
                        ),
                    ),
                    SettleResult,
                )
            except WorkflowUpdateFailedError as err:
                refusal = _update_refusal(err)
            except FinishedMeanwhile:
                pass
        await self._record_action(
            intent_id,
            "settle",
            by,
            reason,
            "refused",
            {"why": refusal, "channel": channel, "rule": rule},
        )
        return SettleResult(False, refusal, rule=rule)

    async def settle_set(
        self,
        *,
        rule: str,
        reason: str,
        reference: str = "",
        by: Principal,
        confirm: int,
        event_type: str | None = None,
        category: str | None = None,
        lookup: bool = False,
    ) -> BulkSettlement:
        """Settle every member of the open `unknown_outcome` set (filtered by event type
        and category) under one rule, each through its workflow's `settle` update, as
        `settle` would one by one. `confirm` is the count the operator saw: when the set
        has changed size since, nothing is settled and the answer says so. With `lookup`,
        each member is looked up at the provider first (rules that need it)."""

        # Before anything is settled: one refusal for the set, not one per member.
        key_privacy.refuse_unfit_notes({"reason": reason, "reference": reference}, country=None)

        def members() -> list[settlements.SetMember]:
            with self.sessions() as session:
                return settlements.unknown_members(
                    session, event_type=event_type, category=category
                )

        found = await asyncio.to_thread(members)
        if len(found) != confirm:
            return BulkSettlement(
                len(found),
                refused_all=f"the set has {len(found)} member(s) now, not {confirm}: look "
                "again and confirm the new count",
            )
        done = BulkSettlement(len(found))
        gate = asyncio.Semaphore(BULK_CONCURRENCY)

        async def one(member: settlements.SetMember) -> None:
            async with gate:
                if lookup:
                    await self.lookup(member.intent_id, channel=member.channel, by=by)
                try:
                    result = await self.settle(
                        member.intent_id,
                        channel=member.channel,
                        rule=rule,
                        reason=reason,
                        reference=reference,
                        by=by,
                    )
                except key_privacy.NoteRefused as err:
                    # A number in the member's own national form: refused for it alone.
                    done.refused[member.business_key] = str(err)
                    return
            if result.accepted:
                done.settled.append(member.business_key)
            else:
                done.refused[member.business_key] = result.message

        await asyncio.gather(*(one(m) for m in found))
        return done

    async def lookup(self, id_or_key: str, *, channel: str, by: Principal) -> LookupResult:
        """Ask the provider what it holds for the channel's latest attempt, through the
        intent's workflow (the lookup runs where the transports live, and is recorded)."""
        intent_id, handle, running = await self._handle(id_or_key, by=by)
        refusal = "the intent's workflow has finished; there is nothing left to settle"
        if running:
            try:
                return await self._update(
                    handle,
                    LOOKUP,
                    LookupRequest(
                        channel,
                        by.name,
                        by.role.value,
                        proof=self._prove("lookup", intent_id, by, "", channel),
                    ),
                    LookupResult,
                )
            except WorkflowUpdateFailedError as err:
                refusal = _update_refusal(err)
            except FinishedMeanwhile:
                pass
        await self._record_action(
            intent_id, "lookup", by, "", "refused", {"why": refusal, "channel": channel}
        )
        return LookupResult(False, message=refusal)

    def _prove(
        self, action: str, intent_id: str, by: Principal, reason: str, subject: str = ""
    ) -> str:
        """The MAC that lets the workflow's activity record `by` as the acting principal."""
        claim = proof.ActingClaim(action, intent_id, by.name, by.role.value, reason, subject)
        return proof.sign(self._cipher.action_key, claim, now=datetime.now(UTC))

    def workflow_handle(self, workflow_id: str) -> WorkflowHandle[NotificationWorkflow, Any]:
        """The typed handle of an intent's workflow, for callers that await its result or
        read its history (the scenarios do)."""
        return self.temporal.get_workflow_handle_for(NotificationWorkflow.run, workflow_id)

    async def projection(self, workflow_id: str) -> Projection:
        """What the running workflow says of itself (its `projection` query)."""
        return await self.workflow_handle(workflow_id).query(NotificationWorkflow.projection)

    async def status(self, id_or_key: str) -> Projection | dict[str, Any]:
        _, handle, running = await self._handle(id_or_key)
        if running:
            return await handle.query(NotificationWorkflow.projection)
        return (await asyncio.to_thread(self.timeline, id_or_key))["intent"]

    def timeline(self, id_or_key: str, *, by: Principal | None = None) -> dict[str, Any]:
        """The intent's timeline; a business key is looked up in `by`'s scope (an app's:
        its namespace alone; docs/api.md "How keys are scoped")."""
        with self.sessions() as session:
            return timeline.timeline(
                session, id_or_key, cipher=self._cipher, scope=repo.KeyScope.of(by)
            )

    async def _record_action(
        self,
        intent_id: str,
        action: str,
        by: Principal,
        reason: str,
        outcome: str,
        detail: dict[str, str],
    ) -> None:
        def work() -> None:
            with self.sessions.begin() as session:
                operator_actions.record_operator_action(
                    session,
                    intent_id=intent_id,
                    action=action,
                    operator=by.name,
                    operator_role=by.role.value,
                    reason=reason,
                    outcome=outcome,
                    at=datetime.now(UTC),
                    detail=detail,
                )

        await asyncio.to_thread(work)


class FinishedMeanwhile(Exception):
    """The workflow closed between the look that found it running and an update to it."""


def _update_refusal(err: WorkflowUpdateFailedError) -> str:
    """The reason a validator or handler gave, without the exception's type name; for an
    activity the handler waited on (a lookup), what became of it."""
    cause = err.cause
    if isinstance(cause, ActivityError):
        inner = cause.cause
        last = inner.cause if isinstance(inner, ActivityTimeout) else inner
        said = getattr(last, "message", "") or "no answer"
        if isinstance(inner, ActivityTimeout):
            return f"the provider did not answer in time (last: {said}); try again later"
        return f"the provider could not be asked: {said}"
    return str(cause.message if hasattr(cause, "message") else cause)
