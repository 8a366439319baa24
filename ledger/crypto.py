"""Field encryption for PII (AES-GCM under a key id) and keyed lookups (HMAC-SHA256).

The key ring is `kid:base64key[,kid:base64key...]`; the first key encrypts, every key
decrypts, so keys rotate by prepending a new one. A ring is checked whole when it is read
(the form of each entry, its base64, its length, a kid used twice): a bad ring is one
`KeyRingError` naming the entry, never a `binascii.Error` from deep inside a start-up.

Lookups and the operators' action proofs use two keys of their own (`DerivedKeys`), which
the ledger keeps encrypted under the ring (`ledger.keys.check_key_ring` installs them).
They are not derived from "the ring's last key" any more, so every data key can leave: a
rotation re-encrypts the ledger's copy of them like any other field. A cipher that was
never checked against a ledger (a test, `herald bench`) derives them from the ring's last
key, which is also how the ledger's copy was first made (ledger.keys.legacy_derived_keys).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

KID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
"""A key id: short, and free of the `:` and `,` the ring and the ciphertexts use."""
CHECK_LABEL = b"herald-data-key-check-v1"
"""What a key's check value is the HMAC of: the ledger keeps it per kid, so a process whose
key under a recorded kid is a different key is refused before it writes anything."""


class KeyRingError(ValueError):
    """A data key ring that cannot be used, or a ciphertext whose key is not in it."""

    pass


@dataclass(frozen=True)
class DerivedKeys:
    """The two keys that are not data keys: both outlive any one data key."""

    lookup: bytes
    """HMAC-SHA256 key of every `*_hmac` lookup column (ledger.contact_data.LOOKUP_COLUMNS)."""
    action: bytes
    """Signs and checks the proof of the acting principal (domain.proof)."""


def _hkdf(material: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(material)


def derive_from(material: bytes) -> DerivedKeys:
    """The lookup and action-proof keys HKDF derives from one data key's bytes."""
    return DerivedKeys(_hkdf(material, b"herald-lookup"), _hkdf(material, b"herald-action-proof"))


def parse_key_ring(keyring: str) -> dict[str, bytes]:
    """`kid:base64,kid:base64` as {kid: 32 bytes}, in ring order.

    A wrong entry is a KeyRingError naming it (its kid, never its material).
    """
    keys: dict[str, bytes] = {}
    for position, item in enumerate((p.strip() for p in keyring.split(",") if p.strip()), 1):
        kid, sep, material = item.partition(":")
        if not sep or not kid:
            raise KeyRingError(f"HERALD_DATA_KEY entry {position} must look like 'kid:base64key'")
        if not KID.match(kid):
            raise KeyRingError(
                f"data key id {kid[:40]!r}: use letters, digits, '-' or '_' (at most 40)"
            )
        if kid in keys:
            raise KeyRingError(f"data key {kid!r} appears twice in HERALD_DATA_KEY")
        try:
            key = base64.b64decode(material.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise KeyRingError(f"data key {kid!r} is not valid base64") from None
        if len(key) != 32:
            raise KeyRingError(f"data key {kid!r} must be 32 bytes (AES-256), not {len(key)}")
        keys[kid] = key
    if not keys:
        raise KeyRingError("the data key ring is empty")
    return keys


def kid_of(ciphertext: str) -> str:
    """The key id a ciphertext made by FieldCipher.encrypt names in its prefix."""
    return ciphertext.partition(":")[0]


class FieldCipher:
    """AES-GCM encryption of PII fields under a key ring, and HMACs for lookups."""

    def __init__(self, keyring: str) -> None:
        """Parse `kid:base64,kid:base64`; the first key encrypts, all of them decrypt."""
        raw = parse_key_ring(keyring)
        self._keys = {kid: AESGCM(key) for kid, key in raw.items()}
        self._checks = {
            kid: hmac.new(key, CHECK_LABEL, hashlib.sha256).hexdigest() for kid, key in raw.items()
        }
        self.kids: tuple[str, ...] = tuple(raw)
        """The ring's key ids, in its order."""
        self.primary = self.kids[0]
        """The key id new ciphertexts are made under."""
        self._legacy = derive_from(raw[self.kids[-1]])
        self._derived = self._legacy
        self.derived_from_ledger = False
        """True once ledger.keys.check_key_ring installed the ledger's derived keys."""

    def check_value(self, kid: str) -> str:
        """The HMAC of CHECK_LABEL under `kid`'s key: proves the key without showing it."""
        return self._checks[kid]

    def legacy_derived(self) -> DerivedKeys:
        """The derived keys of a ring read alone: from its last key, as before."""
        return self._legacy

    def install(self, derived: DerivedKeys) -> None:
        """Use the ledger's lookup and action-proof keys from now on."""
        self._derived = derived
        self.derived_from_ledger = True

    @property
    def action_key(self) -> bytes:
        """Signs and checks the proof of the acting principal (domain.proof).

        Every surface and worker that holds the data key ring holds it, nothing else does.
        """
        return self._derived.action

    def encrypt(self, plaintext: str, *, context: str) -> str:
        """Encrypt; `context` (e.g. the attempt token) is bound as associated data."""
        nonce = os.urandom(12)
        sealed = self._keys[self.primary].encrypt(nonce, plaintext.encode(), context.encode())
        return f"{self.primary}:{base64.b64encode(nonce + sealed).decode()}"

    def decrypt(self, ciphertext: str, *, context: str) -> str:
        """Decrypt a ciphertext made by :meth:`encrypt` under the same `context`.

        A kid the ring lacks is a KeyRingError naming it; a ciphertext that does not open
        (another key under the same kid, another context) is AES-GCM's InvalidTag.
        """
        kid, _, blob = ciphertext.partition(":")
        if kid not in self._keys:
            raise KeyRingError(f"no data key {kid!r} in the ring")
        data = base64.b64decode(blob)
        return self._keys[kid].decrypt(data[:12], data[12:], context.encode()).decode()

    def lookup_hmac(self, normalized: str) -> str:
        """The keyed HMAC of a normalized destination, to look rows up without decrypting."""
        return hmac.new(self._derived.lookup, normalized.encode(), hashlib.sha256).hexdigest()
