"""What the ledger refuses, in one place.

The errors its callers (the API, the CLI, the starter, the activities) catch and answer;
each says why in its message. The storage-level errors stay beside what raises them: an
artifact's bytes (`ledger.artifacts.ArtifactError`), the key ring
(`ledger.crypto.KeyRingError`) and a listing cursor (`ledger.listing.InvalidCursor`).
"""

from __future__ import annotations

NO_INTENT = "no intent with that id or business key"
"""What a caller is told of an intent it cannot see (missing, archived, another app's, or a
key several namespaces hold): the key is never echoed, since a business key may hold a
subject id that is contact data, and answers end up in logs and trackers."""


class NotFound(LookupError):
    """No row for the id or key given.

    The message is for an operator (it may name the key it looked for: the CLI prints
    it); `answer`, when the raiser gives one, is what an API caller is told, as a 404
    (`api.errors`): never the key, which may hold contact data. A NotFound without an
    answer is nothing a caller asked for (no active policy, say) and stays a fault.
    """

    def __init__(self, message: str, *, answer: str | None = None) -> None:
        """`message` for the operator; `answer` for an API caller (a 404), if any."""
        super().__init__(message)
        self.answer = answer
        """The 404's `detail`; None: not a caller's not-found (answered as a fault)."""


class AmbiguousKey(NotFound):
    """A bare business key that several namespaces hold, none of them the caller's.

    Only a scope that searches anywhere (people's roles) meets it; the message names the
    namespaces, never the key, and says to name one as `NAMESPACE~KEY`.
    """


class IntentConflict(ValueError):
    """The business key exists with a different payload: never a second intent."""


class InvalidRequest(ValueError):
    """Request fields are wrong.

    `problems` names each field and what is wrong with it, all
    of them at once (`field` and `problem` are the first).
    """

    def __init__(self, field: str, problem: str, *more: tuple[str, str]) -> None:
        """Name the first problem; `more` are the others, all refused at once."""
        self.problems = [(field, problem), *more]
        super().__init__("; ".join(f"{f}: {p}" for f, p in self.problems))
        self.field = field
        self.problem = problem


class NotAllowed(PermissionError):
    """The principal's role does not grant operating (a viewer or an app)."""


class ErasureRefused(Exception):
    """The erasure would destroy data a hold needs or an open intent still uses."""


class PrincipalExists(Exception):
    """A principal of that name is on record.

    A principal of that name is on record (revoked ones included: names are not reused,
    so the audit trail of one name is one principal's).
    """


class InvalidNamespace(ValueError):
    """A key namespace a principal cannot have (malformed, contact data, or reserved)."""


class PrincipalRevoked(Exception):
    """The principal is revoked; it cannot be rotated or revoked again."""


class LastAdmin(Exception):
    """Revoking this principal would leave no live admin in the ledger.

    Nobody could manage principals again without the break-glass HERALD_OPERATOR_TOKEN.
    """
