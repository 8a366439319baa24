"""What every scenario shares: the context it runs in (client, addresses, data folder, SMTP
sink), the failure type, and small helpers that only use public interfaces: the Herald
client, the ledger timeline, the simulator's `/_sim` endpoints and the SMTP sink's files."""

from __future__ import annotations

import asyncio
import email
import email.policy
import hashlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import WorkflowHandle

from devstack.stack import Addresses
from domain.requests import NotificationRequest
from ledger import repository as repo
from ledger.artifacts import StoreKind
from ledger.models import Consent
from ledger.templates import activate_policy, seed_policy
from runtime.tables import Clock, timeline_text
from simulators.smtp import SmtpSink
from starter.client import HeraldClient, IntentRef

EMAIL_REACHED = ("sent", "delivered")
"""An email that reached the person: `sent` through SMTP (the relay's 250 is the last word),
`delivered` through a provider that reports events (SendGrid, `herald dev`'s default)."""


class ScenarioFailed(AssertionError):
    """The outcome differs from the story (or something the story needs is missing)."""


def expect(condition: object, message: str) -> None:
    if not condition:
        raise ScenarioFailed(message)


def suffix() -> str:
    """A per-run suffix so every run records new intents (business keys are unique forever)."""
    return secrets.token_hex(4)


def demo_policy_variant(
    version: str, description: str, *, replace: Mapping[str, str], append: str = ""
) -> str:
    """The packaged demo policy as another version: `replace` maps a line of
    policies/demo.toml to the line that stands in its place, `append` adds TOML at the end.
    A story that needs other numbers than the demo's names them and changes nothing else.

    Raises:
        ValueError: a line to replace is not in the demo policy (it changed: say it again).
    """
    import policies

    lines = policies.load_packaged("demo").splitlines()
    missing = [old for old in replace if old not in lines]
    if missing:
        raise ValueError(f"not a line of the demo policy: {missing[0]!r}")
    # The policy's own version and description are its first such lines (each settlement
    # rule has a description of its own, kept).
    at = {
        key: next(i for i, line in enumerate(lines) if line.startswith(key))
        for key in ("version = ", "description = ")
    }
    out = [replace.get(line, line) for line in lines]
    out[at["version = "]] = f'version = "{version}"'
    out[at["description = "]] = f'description = "{description}"'
    return "\n".join(out) + "\n" + append


@contextmanager
def policy_active(client: HeraldClient, document: str, *, name: str) -> Iterator[str]:
    """Record `document` (once: policy versions are immutable) and make it the active policy
    for the story (yielding the version that was active before), then re-activate that one.
    An intent keeps the numbers it loaded at its start (`IntentFacts`), so one recorded
    meanwhile keeps this version's timers after the switch back; other users of a shared
    `herald dev` see this version meanwhile."""
    with client.sessions.begin() as session:
        before = repo.active_policy(session).version
        seed_policy(session, document, name=name, activate=True)
    try:
        yield before
    finally:
        with client.sessions.begin() as session:
            activate_policy(session, before)


def random_uk_mobile() -> str:
    """A valid UK mobile number outside the simulator's fault table (it delivers normally)."""
    from simulators.twilio import FAULT_NUMBERS

    while True:
        number = f"+447400{secrets.randbelow(800_000) + 100_000:06d}"
        if number not in FAULT_NUMBERS:
            return number


@dataclass
class DemoContext:
    client: HeraldClient
    addresses: Addresses
    data_path: Path
    """The stack's data folder: the sink's mail is under `mail/` (and attachments under
    `artifacts/` with the folder store)."""
    sink: SmtpSink | None = None
    """The SMTP sink when the stack runs in this process; otherwise its maildir is read."""
    as_json: bool = False
    retention_days: int = 30
    artifact_store: StoreKind = "folder"
    """HERALD_ARTIFACT_STORE of the stack: where its worker reads attachments."""
    out: Callable[[str], None] = print
    notes: list[str] = field(default_factory=list)
    """Steps a scenario skipped, and why (printed, and returned to the caller)."""

    # --- ledger ----------------------------------------------------------------------

    def consent(
        self,
        recipient: str,
        channel: str,
        purpose: str = "service",
        *,
        revoked: bool = False,
    ) -> None:
        """Consent evidence as the app records it (`herald consent`); `revoked` records a
        month-old grant already ended a second ago, as a revoke leaves it."""
        now = datetime.now(UTC)
        with self.client.sessions.begin() as session:
            session.add(
                Consent(
                    recipient_ref=recipient,
                    channel=channel,
                    purpose=purpose,
                    source="demo",
                    granted_at=now - timedelta(days=30) if revoked else now,
                    revoked_at=now - timedelta(seconds=1) if revoked else None,
                )
            )

    async def send_demo_sms(self, key: str, recipient: str, phone: str, n: int = 1) -> IntentRef:
        """The recipient's SMS consent, then an intent with the `demo` template to `phone`
        under business key `key` (recorded and started)."""
        self.consent(recipient, "sms")
        return await self.client.notify(
            NotificationRequest(
                business_key=key,
                recipient_ref=recipient,
                template_key="demo",
                phone=phone,
                variables={"n": n, "intent_id": key},
            )
        )

    async def timeline(self, key: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.client.timeline, key)

    async def wait_for(
        self,
        key: str,
        what: str,
        predicate: Callable[[dict[str, Any]], bool],
        *,
        timeout: float = 60.0,
        every: float = 0.25,
    ) -> dict[str, Any]:
        """Read the intent's timeline until `predicate` holds; fail with the last state seen."""
        deadline = time.monotonic() + timeout
        while True:
            doc = await self.timeline(key)
            if predicate(doc):
                return doc
            if time.monotonic() > deadline:
                attempts = ", ".join(f"{a['token']}={a['state']}" for a in doc["attempts"])
                raise ScenarioFailed(
                    f"{key}: waited {timeout:.0f} s for {what}; the ledger says "
                    f"{doc['intent']['state']} (attempts: {attempts or 'none'})"
                )
            await asyncio.sleep(every)

    # --- Temporal --------------------------------------------------------------------

    def handle(self, workflow_id: str) -> WorkflowHandle[Any, Any]:
        return self.client.workflow_handle(workflow_id)

    async def result(self, workflow_id: str, timeout: float = 90.0) -> Any:
        try:
            return await asyncio.wait_for(self.handle(workflow_id).result(), timeout=timeout)
        except TimeoutError as err:
            raise ScenarioFailed(
                f"workflow {workflow_id} did not finish within {timeout:.0f} s"
            ) from err

    async def phase(self, workflow_id: str) -> str:
        return (await self.client.projection(workflow_id)).phase

    async def wait_phase(
        self, workflow_id: str, phases: tuple[str, ...], *, timeout: float = 30.0
    ) -> str:
        deadline = time.monotonic() + timeout
        while True:
            phase = await self.phase(workflow_id)
            if phase.split(":")[0] in phases:
                return phase
            if time.monotonic() > deadline:
                raise ScenarioFailed(
                    f"workflow {workflow_id} is in phase {phase!r}, expected one of {phases}"
                )
            await asyncio.sleep(0.2)

    # --- carrier simulator -----------------------------------------------------------

    async def _sim(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.addresses.simulator.rstrip('/')}{path}"
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                response = await http.request(method, url, json=body)
        except httpx.HTTPError as err:
            raise ScenarioFailed(
                f"the carrier simulator at {self.addresses.simulator} did not answer {path} "
                f"({type(err).__name__}); these scenarios need the simulator, not a real provider"
            ) from err
        if response.status_code == 404:
            raise ScenarioFailed(
                f"{url} is not the carrier simulator (404); these scenarios script its faults"
            )
        response.raise_for_status()
        return response.json()

    async def sim_stats(self) -> dict[str, Any]:
        return await self._sim("GET", "/_sim/stats")

    async def sim_script(self, to: str, fault: str, **options: Any) -> None:
        """Script a fault for one destination (`/_sim/script`), e.g. never_resolves, count=1."""
        await self._sim("POST", "/_sim/script", {"to": to, "fault": fault, **options})

    async def sim_inbound(self, from_: str, body: str) -> dict[str, Any]:
        """A recipient texts Herald (e.g. STOP): the simulator posts the signed webhook."""
        return await self._sim("POST", "/_sim/inbound", {"from": from_, "body": body})

    async def submissions(self, token: str) -> tuple[int, int]:
        """(messages created, create requests received) for one attempt token."""
        stats = await self.sim_stats()
        return stats["by_token"].get(token, 0), stats["requests_by_token"].get(token, 0)

    # --- SendGrid simulator ------------------------------------------------------------

    async def email_sim(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        base = self.addresses.email_simulator
        if not base:
            raise ScenarioFailed(
                "no SendGrid simulator in this stack (HERALD_SENDGRID_BASE_URL points at a "
                "real provider); this scenario scripts the simulator's addresses"
            )
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.request(method, f"{base.rstrip('/')}{path}", json=body)
        response.raise_for_status()
        return response.json()

    # --- SMTP sink -------------------------------------------------------------------

    def received_mail(self) -> list[EmailMessage]:
        """Every message the SMTP sink accepted (in-process list, else its maildir files)."""
        if self.sink is not None:
            return [m.message for m in self.sink.messages]
        maildir = self.data_path / "mail"
        found: list[EmailMessage] = []
        for path in sorted(maildir.glob("*.eml")) if maildir.exists() else []:
            parsed = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            assert isinstance(parsed, EmailMessage)
            found.append(parsed)
        return found

    async def mail_with_id(self, message_id: str, *, timeout: float = 10.0) -> EmailMessage | None:
        deadline = time.monotonic() + timeout
        while True:
            for message in await asyncio.to_thread(self.received_mail):
                if message.get("Message-ID", "").strip() == message_id:
                    return message
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.2)

    # --- output ----------------------------------------------------------------------

    def show(self, doc: dict[str, Any], title: str | None = None) -> None:
        if self.as_json:
            self.out(json.dumps(doc, indent=2, default=str))
            return
        if title:
            self.out(f"-- {title}")
        self.out(timeline_text(doc, Clock(None)))
        url = self.addresses.workflow_url(doc["intent"]["workflow_id"])
        if url:
            self.out(f"  Temporal Web UI: {url}")

    def say(self, text: str) -> None:
        if not self.as_json:
            self.out(f"   {text}")

    def skip(self, text: str) -> None:
        self.notes.append(text)
        self.out(f"   SKIPPED: {text}")


def attempts_on(doc: dict[str, Any], channel: str) -> list[dict[str, Any]]:
    return [a for a in doc["attempts"] if a["channel"] == channel]


def decisions_on(doc: dict[str, Any], channel: str) -> list[dict[str, Any]]:
    return [d for d in doc["decisions"] if d["channel"] == channel]


def parse_at(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


Scenario = Callable[[DemoContext], Awaitable[None]]
