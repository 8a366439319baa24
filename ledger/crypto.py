"""Field encryption for PII (AES-GCM under a key id) and keyed lookups (HMAC-SHA256).

The key ring is `kid:base64key[,kid:base64key...]`; the first key encrypts, every key
decrypts, so keys rotate by prepending a new one. Lookups use an HMAC key derived (HKDF)
from the *last* key of the ring, so adding a new encryption key does not re-index lookups.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


class KeyRingError(ValueError):
    """A data key ring that cannot be used, or a ciphertext whose key is not in it."""

    pass


class FieldCipher:
    """AES-GCM encryption of PII fields under a key ring, and HMACs for lookups."""

    def __init__(self, keyring: str) -> None:
        """Parse `kid:base64,kid:base64`; the first key encrypts, all of them decrypt."""
        self._keys: dict[str, AESGCM] = {}
        self._primary = ""
        raw_last = b""
        for item in [part.strip() for part in keyring.split(",") if part.strip()]:
            kid, sep, material = item.partition(":")
            if not sep or not kid:
                raise KeyRingError("each data key must look like 'kid:base64key'")
            key = base64.b64decode(material)
            if len(key) != 32:
                raise KeyRingError(f"data key {kid!r} must be 32 bytes (AES-256)")
            self._keys[kid] = AESGCM(key)
            self._primary = self._primary or kid
            raw_last = key
        if not self._keys:
            raise KeyRingError("the data key ring is empty")
        self._lookup_key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"herald-lookup"
        ).derive(raw_last)
        self.action_key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"herald-action-proof"
        ).derive(raw_last)
        """Signs and checks the proof of the acting principal (domain.proof): every surface
        and worker that holds the data key ring holds it, nothing else does."""

    def encrypt(self, plaintext: str, *, context: str) -> str:
        """Encrypt; `context` (e.g. the attempt token) is bound as associated data."""
        nonce = os.urandom(12)
        sealed = self._keys[self._primary].encrypt(nonce, plaintext.encode(), context.encode())
        return f"{self._primary}:{base64.b64encode(nonce + sealed).decode()}"

    def decrypt(self, ciphertext: str, *, context: str) -> str:
        """Decrypt a ciphertext made by :meth:`encrypt` under the same `context`."""
        kid, _, blob = ciphertext.partition(":")
        if kid not in self._keys:
            raise KeyRingError(f"no data key {kid!r} in the ring")
        data = base64.b64decode(blob)
        return self._keys[kid].decrypt(data[:12], data[12:], context.encode()).decode()

    def lookup_hmac(self, normalized: str) -> str:
        """The keyed HMAC of a normalized destination, to look rows up without decrypting."""
        return hmac.new(self._lookup_key, normalized.encode(), hashlib.sha256).hexdigest()
