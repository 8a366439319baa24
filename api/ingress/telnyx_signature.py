"""Telnyx's webhook signature: Ed25519 over ``f"{telnyx-timestamp}|{raw body}"``, with the
account's public key, inside a tolerance of the server's clock (the official package's
fixed 300 s). Checked on the raw bytes, before anything is parsed (api.ingress.telnyx)."""

from __future__ import annotations

import base64
import binascii

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

TOLERANCE_SECONDS = 300
"""How far `telnyx-timestamp` may be from this server's clock: a captured event cannot be
replayed later than this."""


class TelnyxVerifier:
    """Checks Telnyx's Ed25519 webhook signature with the account's public key."""

    def __init__(self, public_key_b64: str) -> None:
        raw = base64.b64decode(public_key_b64, validate=True)
        if len(raw) != 32:
            raise ValueError(f"a Telnyx public key is 32 bytes, got {len(raw)}")
        self._key = Ed25519PublicKey.from_public_bytes(raw)

    def verify(self, body: bytes, signature: str, timestamp: str, *, now: float) -> str | None:
        """None if the event is authentic and fresh, else why not (safe to return)."""
        # ASCII digits only ("²".isdigit() holds), and no more than a clock can read
        # (int() refuses over 4,300 digits).
        if not (timestamp.isascii() and timestamp.isdigit()) or len(timestamp) > 12:
            return "telnyx-timestamp is not unix seconds"
        if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
            return f"telnyx-timestamp is more than {TOLERANCE_SECONDS} s from this server's clock"
        try:
            raw_signature = base64.b64decode(signature, validate=True)
        except (binascii.Error, ValueError):
            return "telnyx-signature-ed25519 is not base64"
        if len(raw_signature) != 64:
            return "telnyx-signature-ed25519 is not 64 bytes"
        try:
            self._key.verify(raw_signature, timestamp.encode() + b"|" + body)
        except InvalidSignature:
            return "signature does not match"
        return None


__all__ = ["TOLERANCE_SECONDS", "TelnyxVerifier"]
