"""Where the ledger keeps what it encrypts and what it hashes: the one registry.

Every column that holds a FieldCipher ciphertext (`*_ct`, ledger/crypto.py) is named in
`ENCRYPTED_COLUMNS` with the associated data it was sealed with, and every lookup HMAC
column (`*_hmac`) in `LOOKUP_COLUMNS`. Three things read this list and nothing else:

- the key rotation (ledger/keys.py) re-encrypts exactly `ENCRYPTED_COLUMNS`, and `herald
  keys retire` counts exactly these;
- erasure (ledger/erasure.py) nulls the contact columns (`ERASED_COLUMNS`: every encrypted
  column that holds contact data, and the search-only lookups);
- the archive (ledger/archive.py) never exports them.

Tests walk the models and fail when a `*_ct` or `*_hmac` column is missing here
(tests/ledger/test_keys.py, tests/ledger/test_erasure.py), so a new store of contact data
cannot be forgotten by any of the three.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EncryptedColumn:
    """A column whose values are `kid:...` ciphertexts of ledger.crypto.FieldCipher."""

    table: str
    column: str
    context_column: str
    """The column whose value is the associated data the ciphertext was made with."""
    context_prefix: str = ""
    """Put before the context column's value (the ledger's own secrets)."""
    contact: bool = True
    """Contact data of a recipient (erased, never archived); False for the ledger's own
    secrets, which only the rotation touches."""

    def context(self, value: str) -> str:
        """The associated data of a row whose context column holds `value`."""
        return self.context_prefix + value

    @property
    def name(self) -> str:
        """`table.column`."""
        return f"{self.table}.{self.column}"


ENCRYPTED_COLUMNS: tuple[EncryptedColumn, ...] = (
    EncryptedColumn("intent", "sms_destination_ct", "business_key"),
    EncryptedColumn("intent", "email_destination_ct", "business_key"),
    EncryptedColumn("intent", "variables_ct", "business_key"),
    EncryptedColumn("attempt", "destination_ct", "token"),
    EncryptedColumn("attempt", "body_ct", "token"),
    EncryptedColumn("attempt", "subject_ct", "token"),
    EncryptedColumn("ledger_secret", "value_ct", "name", "ledger-secret:", contact=False),
)
"""Every ciphertext column of the ledger, with its associated data."""

LOOKUP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("intent", "sms_destination_hmac"),
    ("intent", "email_destination_hmac"),
    ("intent", "email_search_hmac"),
    ("attempt", "destination_hmac"),
    ("suppression", "destination_hmac"),
    ("inbound_keyword", "destination_hmac"),
)
"""Every column of lookup HMACs (under the ledger's lookup key, which no rotation changes).
The console's sign-in throttle also keeps `not-a-name:` + 16 hex of one for a mistyped
name (api/console/sign_in_answer.py), in `sign_in_counter.key` and audit rows."""

CONTACT_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (c.table, c.column) for c in ENCRYPTED_COLUMNS if c.contact
)
"""Every encrypted column of contact data, as (table, column)."""

SEARCH_ONLY_LOOKUPS: tuple[tuple[str, str], ...] = (("intent", "email_search_hmac"),)
"""Lookups that serve the console's search only (not evidence: consent and suppressions
match the destination HMACs). Erasure nulls them with the ciphertexts; the destination
HMACs stay, as the evidence of who was contacted and so that a suppression keeps holding."""

ERASED_COLUMNS: tuple[tuple[str, str], ...] = CONTACT_COLUMNS + SEARCH_ONLY_LOOKUPS
"""What an erasure nulls, and what an archive export leaves out."""


def columns_of(table: str) -> tuple[str, ...]:
    """The erased columns of one table, in registry order."""
    return tuple(column for t, column in ERASED_COLUMNS if t == table)


def tables() -> tuple[str, ...]:
    """The tables with erased columns, in registry order."""
    return tuple(dict.fromkeys(t for t, _ in ERASED_COLUMNS))
