"""Where the ledger keeps contact data: one registry of (table, column) entries.

Every column that holds readable contact data once decrypted (a phone number, an email
address, template variables, a rendered body or subject) is encrypted (`*_ct`,
ledger/crypto.py) and named in `ENCRYPTED_COLUMNS`. Erasure (ledger/erasure.py) nulls
exactly these; the archive (ledger/archive.py) never exports them. A test walks the
models and fails when a `*_ct` column is missing here, so a new store of contact data
cannot be forgotten by either.

The key rotation's own list of encrypted columns (ledger/keys.py, written in parallel)
is meant to become this one: both are plain (table, column) pairs.
"""

from __future__ import annotations

ENCRYPTED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("intent", "sms_destination_ct"),
    ("intent", "email_destination_ct"),
    ("intent", "variables_ct"),
    ("attempt", "destination_ct"),
    ("attempt", "body_ct"),
    ("attempt", "subject_ct"),
)
"""Every encrypted column of contact data, as (table, column)."""

SEARCH_ONLY_LOOKUPS: tuple[tuple[str, str], ...] = (("intent", "email_search_hmac"),)
"""Lookups that serve the console's search only (not evidence: consent and suppressions
match the destination HMACs). Erasure nulls them with the ciphertexts; the destination
HMACs stay, as the evidence of who was contacted and so that a suppression keeps holding."""

ERASED_COLUMNS: tuple[tuple[str, str], ...] = ENCRYPTED_COLUMNS + SEARCH_ONLY_LOOKUPS
"""What an erasure nulls, and what an archive export leaves out."""


def columns_of(table: str) -> tuple[str, ...]:
    """The erased columns of one table, in registry order."""
    return tuple(column for t, column in ERASED_COLUMNS if t == table)


def tables() -> tuple[str, ...]:
    """The tables with erased columns, in registry order."""
    return tuple(dict.fromkeys(t for t, _ in ERASED_COLUMNS))
