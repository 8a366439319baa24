"""How a person is named when their contact data is erased (ledger/erasure.py).

A closed set, defined once: the CLI's options, the API's `kind` and the erasure's row
finders all look a member up here.
"""

from __future__ import annotations

from enum import StrEnum

from domain.channels import DestinationKind


class RecipientKind(StrEnum):
    """What names the recipient: one of their destinations, or the app's reference."""

    PHONE = "phone"
    """A phone number (found by its lookup HMAC)."""
    EMAIL = "email"
    """An email address, in any letter case (its lookup HMAC and the search lookup)."""
    RECIPIENT_REF = "recipient_ref"
    """The app's `recipient_ref` of its intents and consent."""

    @property
    def destination(self) -> DestinationKind | None:
        """The kind of destination it is, None for a `recipient_ref`."""
        return _DESTINATIONS.get(self)


_DESTINATIONS = {
    RecipientKind.PHONE: DestinationKind.PHONE,
    RecipientKind.EMAIL: DestinationKind.EMAIL,
}
