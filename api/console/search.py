"""The console's search: whatever a caller or a colleague gives, in one box.

An intent id, a business key, an attempt token, the provider's message id (a Twilio SID,
`SM...`) or an email's Message-ID match exactly. A phone number matches as a person says
it, national form included (`07400 000001`, read in the country chosen beside the box,
HERALD_DEFAULT_COUNTRY by default), by the ledger's HMAC of its E.164 form; an email
address in any letter case, by the search-only lookup of its case-folded form
(`domain.destinations.search_form`) beside the exact one. Contact data never reaches a
URL or the answer page: the page says what was searched for, masked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from domain.destinations import masked, normalize_email, phone_e164, search_form
from ledger import listing
from ledger.read_models import search as searching

MAX_MATCHES = 100
_PHONE_CHARACTERS = re.compile(r"^[+\d\s().\-/]{6,40}$")


@dataclass
class Found:
    searched: str
    """What was searched for, in words, contact data masked."""
    listed: listing.IntentList
    recipients: list[str] = field(default_factory=list)
    """Recipient refs of a phone number or an address."""


def _digits(text: str) -> int:
    return sum(c.isdigit() for c in text)


def find(session: Session, text: str, *, country: str, lookup: Callable[[str], str]) -> Found:
    """The intents `text` names, newest first; `lookup` is the ledger's HMAC."""
    text = text.strip()
    ids: set[str] = set()
    words: list[str] = []
    by_destination: set[str] = set()

    # Identifiers: exact matches (each through a unique index).
    ids |= searching.intents_named(session, text)
    if ids:
        words.append(f"“{text}” as an intent id, business key, attempt token or message id")

    if "@" in text:
        try:
            address = normalize_email(text).address
        except ValueError:
            if not ids:  # a Message-ID in its brackets is no address, and was found
                words.append("an email address that is not valid (not shown)")
        else:
            exact, folded = lookup(address), lookup(search_form(address))
            by_destination |= searching.intents_to_address(session, exact, folded)
            words.append(f"the email address {masked(address.lower())} (in any letter case)")
    elif _PHONE_CHARACTERS.match(text) and _digits(text) >= 6:
        try:
            e164 = phone_e164(text, country)
        except ValueError:
            if not ids:
                words.append("a phone number that is not valid (not shown)")
        else:
            h = lookup(e164)
            by_destination |= searching.intents_to_number(session, h)
            national = "" if text.lstrip().startswith("+") else f", read as a number in {country}"
            words.append(f"the phone number {masked(e164)}{national}")
    if not words:
        # Not an id that matched, not contact data: safe to repeat unless it looks like some.
        shown = "what you typed (not shown)" if _digits(text) >= 6 else f"“{text}”"
        words.append(f"{shown}: no intent id, business key, attempt token or message id")
    ids |= by_destination
    recipients = searching.recipients_of(session, by_destination)
    flt = listing.IntentFilter(intent_ids=tuple(sorted(ids))[:MAX_MATCHES] or ("",))
    return Found("; ".join(words), listing.list_page(session, flt, size=MAX_MATCHES), recipients)
