"""Proof of the acting principal for operator actions that travel through Temporal.

Herald's surfaces (the API, the CLI, the console) authenticate a principal and then ask
the intent's workflow to cancel, approve a resend or settle. The workflow's request is a
plain payload that anyone who can reach Temporal can also send, naming any operator. So
the surface attaches a MAC over the request, made with a server key; the workflow's ledger
activity checks it before it records the action under that principal. A request without a
valid proof is recorded as an unauthenticated Temporal caller, with the identity it
claimed shown as claimed, never as a principal.

Pure: the key is passed in. It is the ledger's action-proof key, kept encrypted under the
data key ring (ledger.keys): a rotation of the data key re-encrypts it and does not change
it, so a proof made before a rotation verifies after it and nothing is re-signed.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta

VERSION = "v1"
VALID_FOR = timedelta(hours=1)
"""How long after it was made a proof is accepted: the activity that checks it normally
runs within seconds; an hour covers a worker fleet that was down for a while."""

UNAUTHENTICATED = "unauthenticated-temporal-caller"
"""The operator an action without a valid proof is recorded under."""


@dataclass(frozen=True)
class ActingClaim:
    """What a proof vouches for: who asked which action on which intent, and why."""

    action: str
    """cancel, approve-resend or settle."""
    intent_id: str
    principal: str
    role: str
    reason: str
    subject: str = ""
    """What the action is about beyond the intent: the channel of a resend, `<token>|<rule>`
    of a settlement."""

    def message(self, issued_at: int) -> bytes:
        """The bytes the MAC covers: every field, length-prefixed, and the issue time."""
        parts = (VERSION, self.action, self.intent_id, self.principal, self.role,
                 self.reason, self.subject, str(issued_at))  # fmt: skip
        # Length-prefixed, so no field can borrow a separator from its neighbour.
        return b"".join(f"{len(p)}:{p}".encode() for p in parts)


def sign(key: bytes, claim: ActingClaim, *, now: datetime) -> str:
    """`v1:<issued-at epoch seconds>:<hex HMAC-SHA256>`."""
    issued = int(now.timestamp())
    mac = hmac.new(key, claim.message(issued), hashlib.sha256).hexdigest()
    return f"{VERSION}:{issued}:{mac}"


def verify(key: bytes, claim: ActingClaim, proof: str, *, now: datetime) -> bool:
    """True when `proof` was made with `key` for exactly this claim, within VALID_FOR."""
    version, _, rest = proof.partition(":")
    issued_text, _, mac = rest.partition(":")
    if version != VERSION or not issued_text.isdigit() or not mac:
        return False
    issued = int(issued_text)
    age = now.timestamp() - issued
    if age > VALID_FOR.total_seconds() or age < -300:  # five minutes of clock skew
        return False
    expected = hmac.new(key, claim.message(issued), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, mac)


def recorded_operator(claimed: str, *, proven: bool) -> str:
    """The operator column for an action: the principal when proven, else the marker."""
    return claimed if proven else UNAUTHENTICATED
