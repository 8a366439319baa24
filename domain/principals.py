"""Who may do what: the four roles, what each grants, and the acting principal.

Pure rules (no I/O): the API, the CLI and the console ask :meth:`Role.may` and name the
least role that would do (:func:`least_role_for`) when they refuse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum


class Access(StrEnum):
    """What a route or a command does, as far as permissions go."""

    CREATE_INTENTS = "create intents"
    READ_INTENTS = "read intents"
    """Intents, their timelines (destinations masked)."""
    READ_EVIDENCE = "read evidence"
    """Consent and suppression records, reconciliation sets."""
    FIND_BY_RECIPIENT = "find intents by a recipient's phone or address"
    """Every intent to one destination, whoever recorded it (people's roles only)."""
    RECORD_CONSENT = "record or revoke consent"
    """A recipient's consent is the recipient's, whoever records it (Herald serves one
    organisation): the app that collected it records it, attributed to the app."""
    CANCEL_INTENTS = "cancel intents"
    """An app cancels only the intents it created (another's is as unknown as a missing
    one: `Principal.reads_intent_of`); people's roles cancel any."""
    UPLOAD_ATTACHMENTS = "upload attachments"
    """Store an attachment's bytes (`POST /v1/attachments`) for an intent to name."""
    READ_CONTENT = "read template and policy versions"
    """The templates (with the variables an app must send) and the policy versions, and
    a template's preview with sample variables (nothing sent)."""
    REVIEW_CONTENT = "approve, refuse or activate template and policy versions"
    """A second pair of eyes on a new version, and making one live (a rollback included):
    operators' work, as a resend's approval is. Never the version's own author
    (domain.review); importing a version stays an admin's (ADMINISTER)."""
    OPERATE = "act on intents and evidence"
    """Approve a resend, settle, resolve a review item, add or lift a suppression."""
    ADMINISTER = "administer Herald (principals, purge, legal holds, policy and template versions)"


class Role(StrEnum):
    """A principal's role.

    `viewer < operator < admin` each add to the one before; `app`
    stands apart (it creates intents, which people's roles below admin do not).
    """

    APP = "app"
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def grants(self) -> frozenset[Access]:
        """Every access this role grants."""
        return GRANTS[self]

    def may(self, access: Access) -> bool:
        """Whether this role grants `access`."""
        return access in GRANTS[self]


_VIEWER = frozenset(
    {Access.READ_INTENTS, Access.READ_EVIDENCE, Access.FIND_BY_RECIPIENT, Access.READ_CONTENT}
)
_APPS_OWN = frozenset({Access.RECORD_CONSENT, Access.CANCEL_INTENTS, Access.UPLOAD_ATTACHMENTS})
"""What an app does on its own credential beyond creating and reading its intents; an
operator may each of them too (for any intent)."""
_OPERATOR = _VIEWER | _APPS_OWN | {Access.OPERATE, Access.REVIEW_CONTENT}
GRANTS: dict[Role, frozenset[Access]] = {
    Role.APP: frozenset({Access.CREATE_INTENTS, Access.READ_INTENTS, Access.READ_CONTENT})
    | _APPS_OWN,
    Role.VIEWER: _VIEWER,
    Role.OPERATOR: _OPERATOR,
    # Admin may do everything, creating intents included: the break-glass credential
    # must be able to stand in for any other.
    Role.ADMIN: frozenset(Access),
}

ORDER: tuple[Role, ...] = (Role.APP, Role.VIEWER, Role.OPERATOR, Role.ADMIN)
"""Least to most powerful: the order in which a refusal names the roles that would do."""


def roles_for(access: Access) -> tuple[Role, ...]:
    """Every role that grants `access`, least powerful first."""
    return tuple(role for role in ORDER if role.may(access))


def least_role_for(access: Access) -> Role:
    """The role a refusal names as needed (every role above it in ORDER would do too)."""
    return roles_for(access)[0]


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: what every recorded action names."""

    name: str
    role: Role
    namespace: str | None = field(default=None, compare=False)
    """The namespace of the business keys it records (domain.keys); None: its name (the
    default, and break-glass's). Not part of who it is: the name says that."""

    @property
    def key_namespace(self) -> str:
        """The namespace its business keys live in, and its reads by key look in first."""
        return self.namespace or self.name

    def may(self, access: Access) -> bool:
        """Whether this principal's role grants `access`."""
        return self.role.may(access)

    @property
    def reads_only_own_intents(self) -> bool:
        """Whether this principal reads only the intents it recorded (an app).

        Two apps on one Herald never see each other's business keys or outcomes.
        People's roles read every intent.
        """
        return self.role is Role.APP

    def reads_intent_of(self, created_by: str | None) -> bool:
        """Whether this principal may read an intent recorded by `created_by`.

        `created_by` is null for an intent recorded by no principal (through `starter`
        in-process) or before creators were recorded.
        """
        return not self.reads_only_own_intents or created_by == self.name


BREAK_GLASS_NAME = "break-glass"
"""The principal HERALD_OPERATOR_TOKEN authenticates as (an admin no ledger row holds)."""

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$"
_NAME = re.compile(NAME_PATTERN)


def check_name(name: str) -> str:
    """Check a principal's name.

    The name, or ValueError saying what a principal's name may be. No `@`, so an email
    address never becomes a name that every audit row and log line repeats.
    """
    if not _NAME.match(name):
        raise ValueError(
            "a principal's name is 1 to 80 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    if name == BREAK_GLASS_NAME:
        raise ValueError(f"{BREAK_GLASS_NAME!r} is reserved for HERALD_OPERATOR_TOKEN")
    return name


def local_principal_name(user: str) -> str:
    """A principal name made from a local user name (`herald dev`'s admin)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", user).strip("-._")[:80]
    if not cleaned or cleaned == BREAK_GLASS_NAME:
        return "local-admin"
    return cleaned
