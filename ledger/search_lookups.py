"""The console search's lookups, filled in for intents recorded before they existed.

Intake writes them for new intents; this fills them for the older ones (`herald migrate`
runs it after the migrations).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from domain.destinations import search_form
from ledger.crypto import FieldCipher
from ledger.models import Intent


def backfill_email_search(session: Session, cipher: FieldCipher, *, batch: int = 1000) -> int:
    """Write `email_search_hmac` for up to `batch` intents that lack it.

    Those with a readable email destination and no lookup yet; how many were written (0:
    none left). A purged intent has no readable destination and stays unsearchable by
    address, as it should.
    """
    rows = session.execute(
        select(Intent)
        .where(Intent.email_destination_ct.is_not(None), Intent.email_search_hmac.is_(None))
        .limit(batch)
    ).scalars()
    written = 0
    for intent in rows:
        assert intent.email_destination_ct is not None
        address = cipher.decrypt(intent.email_destination_ct, context=intent.business_key)
        intent.email_search_hmac = cipher.lookup_hmac(search_form(address))
        written += 1
    return written
