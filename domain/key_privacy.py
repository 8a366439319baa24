"""No contact data in business keys, nor in an operator's notes.

A business key becomes the workflow id (`notification:<key>`), and so lands in Temporal's
visibility store, unencrypted and kept for the namespace's retention, in every log line
that names the workflow and in every URL of the Web UI. A key that holds a phone number
or an email address leaks exactly what the ledger encrypts. Keys are built from the
event type and the business's own ids (`class-opening:c-9081:m-1842`).

The error names the rule and never echoes the key (it holds the very data to keep out).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

import phonenumbers

from domain.keys import InvalidKey

RULE = "business_key.no_contact_data"
HOW_TO_BUILD = "build keys from the event type and your own ids, e.g. class-opening:c-9081:m-1842"

_EMAIL = re.compile(r"[^\s@:]+@[^\s@:]+\.[^\s@:]+")
_DIGIT_RUN = re.compile(r"\d{10,15}")
"""A run this long is also read as an international number without its '+'; shorter runs
(random ids, dates) are read in the intent's country only."""


class ContactDataInKey(InvalidKey):
    """The key holds a phone number or an email address."""


def _holds_phone_number(text: str, region: str | None) -> bool:
    """Whether `text` holds a phone number valid in `region`.

    In national or international form; with no region, in international form only (only
    a `+` can start one).
    """
    if region is None and "+" not in text:
        return False
    return any(True for _ in phonenumbers.PhoneNumberMatcher(text, region))


def refuse_contact_data(key: str, *, country: str | None) -> None:
    """Refuse a business key that holds contact data.

    Raise ContactDataInKey when `key` holds an email address, or a phone number valid
    in `country` (its national or international form) or in E.164 with or without '+'.
    """
    if _EMAIL.search(key) or "@" in key:
        raise ContactDataInKey(f"business key holds an email address (rule {RULE}): {HOW_TO_BUILD}")
    # Each digit run is also read as if it had its '+': `signup:447911123456` is a UK
    # mobile in E.164 whatever the intent's country.
    international = _DIGIT_RUN.sub(lambda m: " +" + m.group(0), key)
    for text, region in ((key, (country or "").upper() or None), (international, None)):
        if _holds_phone_number(text, region):
            raise ContactDataInKey(
                f"business key holds a phone number (rule {RULE}): {HOW_TO_BUILD}"
            )


class NoteRefused(ValueError):
    """An operator's free text (a reason, a settlement's reference) that is not recorded.

    `field` names it and `rule` the rule it breaks.
    """

    def __init__(self, field: str, rule: str, message: str) -> None:
        """`field` breaks `rule`; `message` says so in words, never echoing the text."""
        self.field = field
        self.rule = rule
        super().__init__(message)


class ContactDataInNote(NoteRefused):
    """An operator's free text holds contact data."""

    def __init__(self, field: str, kind: str) -> None:
        """`field` holds `kind` ("a phone number", "an email address")."""
        rule = f"{field}.no_contact_data"
        super().__init__(
            field,
            rule,
            f"{field} holds {kind} (rule {rule}): name the person by their recipient "
            "ref, not their phone number or email address; nothing was recorded",
        )


class UnwordedNote(NoteRefused):
    """A reason with no visible character (spaces, or only invisible ones such as U+200B)."""

    def __init__(self, field: str) -> None:
        """`field` holds nothing a person can read."""
        rule = f"{field}.worded"
        super().__init__(
            field,
            rule,
            f"{field} has no visible character (rule {rule}): say why in words; nothing "
            "was recorded",
        )


_VISIBLE = frozenset("LNPS")
"""Unicode's letters, numbers, punctuation and symbols: what a reader sees."""


def is_worded(text: str) -> bool:
    """Whether `text` holds at least one character a person can read.

    Spaces, marks alone and format characters (U+200B, U+2060, U+FEFF) say nothing.
    """
    return any(unicodedata.category(c)[0] in _VISIBLE for c in text)


def refuse_unfit_notes(notes: Mapping[str, str], *, country: str | None) -> None:
    """Refuse the first of an operator's notes (field -> text) holding contact data.

    Contact data is an email address or a phone number. A cancel, approve-resend or
    settle carries its reason (and a settlement its reference) into the workflow's
    history as the update's input, and every timeline shows it to every role: it must
    hold no more than a business key may. A phone number counts in international form
    anywhere, and in national form when valid in the intent's `country`; bare digit runs
    are not read as numbers here (a ticket number is a fair thing to write). The error
    never echoes the text.

    A `reason` must also say something: one without a visible character is refused
    (rule `reason.worded`).

    Raises:
        ContactDataInNote: naming the field and what it holds.
        UnwordedNote: a reason with nothing a person can read.
    """
    regions = dict.fromkeys(((country or "").upper() or None, None))
    for field, text in notes.items():
        if field == "reason" and not is_worded(text):
            raise UnwordedNote(field)
        if _EMAIL.search(text):
            raise ContactDataInNote(field, "an email address")
        if any(_holds_phone_number(text, region) for region in regions):
            raise ContactDataInNote(field, "a phone number")


def refuse_contact_data_in_namespace(namespace: str) -> None:
    """Refuse a key namespace that holds contact data (rule `business_key.no_contact_data`).

    A namespace is part of every workflow id and attempt token of its keys, so it is held
    to the rule of the keys themselves; with no country to read it in, a phone number
    counts in international form (a digit run of 10 to 15 reads as one). The error never
    echoes the namespace.
    """
    kind = None
    if _EMAIL.search(namespace) or "@" in namespace:
        kind = "an email address"
    else:
        try:
            refuse_contact_data(namespace, country=None)
        except ContactDataInKey:
            kind = "a phone number"
    if kind is not None:
        raise ContactDataInKey(
            f"the key namespace holds {kind} (rule {RULE}): name it after the app, "
            "e.g. shop or billing"
        )
