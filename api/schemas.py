"""Request and response bodies of the HTTP API, so the OpenAPI document has real schemas.

Field limits match the ledger's columns: a request the database could not store is a 422
here, never a 500 later. No model carries a phone number, address or body on the way out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal
from zoneinfo import available_timezones

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from domain import key_privacy
from domain.channels import NAMES as CHANNEL_NAMES
from domain.channels import NAMES_AND_ALL, SMS
from domain.destinations import COUNTRIES
from domain.intents import IntentState
from domain.keys import NAMESPACE_PATTERN
from domain.principals import NAME_PATTERN, Role
from domain.recipients import RecipientKind
from domain.requests import Category, NotificationRequest, PlanMode
from domain.settlement import AWAITING_FILTERS
from ledger.listing import IntentList


def _storable(value: str) -> str:
    # Postgres text cannot hold NUL, and a lone surrogate cannot be encoded as UTF-8.
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError("must be valid Unicode text") from err
    return value


NO_NUL = r"^[^\x00]*$"
"""Declared on every free-text field: Postgres text cannot hold a NUL."""
NO_CONTROL = r"^[^\x00-\x1f\x7f-\x9f]*$"
"""Declared on a free-text path or query parameter (an id, a token): no control character
(the app-wide check, api.query_params, refuses one on every route)."""
Text = Annotated[str, Field(pattern=NO_NUL), AfterValidator(_storable)]
if TYPE_CHECKING:
    Channel = str
    EvidenceChannel = str
    AwaitingFilter = str
else:
    # The registry's names as the schema's enum (Literal[("a", "b")] is Literal["a", "b"]).
    Channel = Literal[CHANNEL_NAMES]
    EvidenceChannel = Literal[NAMES_AND_ALL]
    """`*` is every channel."""
    AwaitingFilter = Literal[AWAITING_FILTERS]
    """What an intent's workflow waits for from an operator; `any`: anything."""
E164 = r"^\+[1-9][0-9]{6,14}$"
"""A phone number as the API takes it: E.164, `+` and digits only (the CLI and `starter`
also take the spaced forms people type)."""
BUSINESS_KEY = r"^[a-z][a-z0-9]*(?:[-.][a-z0-9]+)*(?::[A-Za-z0-9][A-Za-z0-9_.-]*)+$"
"""`<event_type>:<subject id>[:<subject id>...]`, as `domain.keys` checks it."""
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})$")


def rfc3339(value: Any) -> Any:
    """A time is an RFC 3339 date-time string with its offset, as the document says: not
    a number (`0.5` would be a Unix time to pydantic), not a naive time."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise ValueError("must be an RFC 3339 date-time with an offset, e.g. 2026-01-31T12:00:00Z")
    return value


DESTINATION = r"^(?:\+[1-9](?:[ ().-]*[0-9]){6,14}|[^@\s\x00]+@[^@\s\x00]+)$"
"""A phone number with its `+` (a country code never starts with 0) and 7 to 15 digits in
all, spaces and punctuation allowed between them, as E.164 counts them, or something with
one `@`: what the shape can say; whether the number exists or the address is valid is
checked after (rule `destination.valid`, 422 `invalid_destination`)."""
Instant = Annotated[datetime, BeforeValidator(rfc3339)]
"""An RFC 3339 date-time with its offset, in a body or a query."""
SHA256_HEX = r"^[0-9a-f]{64}$"
MACHINE_WORD = r"^[a-z][a-z0-9_]{0,59}$"
COUNTRY_CODES: list[str] = sorted(COUNTRIES)
"""The enum of `country`: ISO 3166-1 alpha-2, in capitals, as phonenumbers knows them."""
QUERY_REGION = r"^[A-Za-z0-9_-]{1,10}$"
QUERY_EVENT_TYPE = r"^[a-z][a-z0-9]*(?:[-.][a-z0-9]+)*$"

CURSOR_PATTERN = r"^[A-Za-z0-9_-]+={0,2}$"
"""A cursor is base64url (ledger.listing.encode_cursor_of writes it unpadded)."""

PATTERN_WORDS: dict[str, str] = {
    CURSOR_PATTERN: "must be the `next` or `previous` of an earlier page (base64url)",
    E164: "must be a phone number in E.164 form: + and 7 to 15 digits, no spaces "
    "(e.g. +447400123456)",
    BUSINESS_KEY: "must be <event type>:<subject id>[:<subject id>...]: lowercase words "
    "joined by '-' or '.', then ids of letters, digits, '-', '_' or '.' "
    "(e.g. class-opening:c-9081:m-1842)",
    NO_NUL: "must not contain NUL characters",
    NO_CONTROL: "must not contain control characters",
    DESTINATION: "must be a phone number with its + prefix and 7 to 15 digits, or an email address",
    SHA256_HEX: "must be a SHA-256 in lowercase hex (64 characters)",
    MACHINE_WORD: "must be a machine word: a lowercase letter, then lowercase letters, "
    "digits or '_' (at most 60)",
    NAME_PATTERN: "must be 1 to 80 letters, digits, '.', '_' or '-', starting with a letter "
    "or digit",
    QUERY_REGION: "must be a region: 1 to 10 letters, digits, '_' or '-'",
    QUERY_EVENT_TYPE: "must be an event type: lowercase words joined by '-' or '.'",
}
"""What each pattern the API declares means, in words: a refusal says this, never the
regular expression (a test holds every pattern of the document to having words here)."""

_PREFIXES = ("Value error, ", "Assertion failed, ")


def refusal(error: Mapping[str, Any]) -> dict[str, Any]:
    """One pydantic error as the API's problem issue (docs/api.md): `loc`, `msg`, `type`
    and nothing that was sent. A rule of Herald's own (a validator's `ValueError`) is
    `invalid_request`, as intake's are, in its own words with no "Value error, " before
    them; a pattern mismatch says what the field must be, never the regular expression.
    The API's 422 and `herald send`'s refusal are both made of these."""
    kind = str(error["type"])
    msg = str(error["msg"])
    if kind in ("value_error", "assertion_error"):
        kind = "invalid_request"
        for prefix in _PREFIXES:
            msg = msg.removeprefix(prefix)
    elif (
        kind in ("too_long", "too_short")
        and (ctx := error.get("ctx") or {}).get("field_type") == "Value"
    ):
        # A text field checked after its own validator (`Text`): pydantic counts "items".
        if kind == "too_long":
            msg = f"String should have at most {ctx['max_length']} characters"
        else:
            n = ctx["min_length"]
            msg = f"String should have at least {n} character{'' if n == 1 else 's'}"
    elif kind == "string_pattern_mismatch":
        pattern = str((error.get("ctx") or {}).get("pattern", ""))
        msg = PATTERN_WORDS.get(pattern, "is not in the form the API document declares for it")
    return {"loc": list(error.get("loc", ())), "msg": msg, "type": kind}


def _known_country(value: str) -> str:
    if value not in COUNTRIES:
        raise ValueError("must be an ISO 3166-1 alpha-2 country code in capitals (e.g. GB)")
    return value


Country = Annotated[
    str,
    Field(json_schema_extra={"enum": COUNTRY_CODES}),
    AfterValidator(_known_country),
]

TIMEZONES: list[str] = sorted(available_timezones())
"""The enum of `timezone`: every zone name the IANA database this process reads has. The
document says it; intake refuses any other name (beside the request's other problems, in
one answer), with the database itself (ledger.intake)."""

TimeZoneName = Annotated[
    str, Field(min_length=1, max_length=64, json_schema_extra={"enum": TIMEZONES})
]


class Problem(BaseModel):
    """An error: `detail` says what was wrong, in a sentence."""

    detail: str


class Forbidden(BaseModel):
    """A 403 from a route whose role the caller's lacks: the role needed, never the token."""

    detail: str
    needed_role: str
    """The least role that may do this."""
    allowed_roles: list[str]
    """Every role that may."""


class ValidationIssue(BaseModel):
    """One problem with a request. The value that was sent is never echoed back."""

    loc: list[str | int]
    """Where: `["body", "phone"]`, `["query", "limit"]`, `["header", "Idempotency-Key"]`."""
    msg: str
    type: str
    """Machine-readable kind, e.g. `string_type`, `extra_forbidden`, `invalid_request`."""


class ValidationProblem(BaseModel):
    """A 422: each issue names the field (`loc`) and the problem (`msg`), on every route."""

    detail: list[ValidationIssue]


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    checks: dict[str, str]
    """`ledger` and `temporal`: "ok", or what failed (an error class, never a secret)."""


# --- intents -----------------------------------------------------------------------------


def _no_contact_data(value: Any) -> Any:
    """Name the contact-data rule before the key's pattern is checked: an address fails
    the pattern too, and the caller should learn which rule it broke. The intent's country
    is not known here; intake checks national forms again with it."""
    if isinstance(value, str):
        try:
            key_privacy.refuse_contact_data(value, country=None)
        except key_privacy.ContactDataInKey as refused:
            raise ValueError(str(refused)) from None
    return value


def _fit_reason(value: str) -> str:
    """A review's refusal reason says something and names no one: it is shown to every
    role in the audit trail (domain.key_privacy.refuse_unfit_notes)."""
    try:
        key_privacy.refuse_unfit_notes({"reason": value}, country=None)
    except key_privacy.NoteRefused as refused:
        raise ValueError(str(refused)) from None
    return value


def _rule(name: str, words: str) -> str:
    """A domain rule in a field's description: what no JSON Schema can express, checked
    after the schema (422 naming the field). tests/api/test_openapi_contract.py allows a
    schema-valid request to be refused only for a rule documented so, on its own field."""
    return f"Rule `{name}` (beyond this schema): {words}"


domain_rule = _rule
"""The same, for a field declared outside this module (api.idempotency's header)."""


CURSOR_DESCRIPTION = (
    "The `next` or `previous` of an earlier page, with the same filters (docs/api.md, "
    '"Paging"). '
    + _rule(
        "cursor.issued",
        "a cursor this list handed out, for these filters and this principal "
        "(422 `invalid_cursor`).",
    )
)


class IntentCreate(BaseModel):
    """One business event -> one notification intent (mirrors `NotificationRequest`)."""

    model_config = ConfigDict(extra="forbid")

    business_key: Annotated[
        str,
        Field(
            min_length=3,
            max_length=200,
            pattern=BUSINESS_KEY,
            description="`<event_type>:<subject ids>`, e.g. `class-opening:c-9081:m-1842`. "
            + _rule(
                "business_key.no_contact_data",
                "no email address, and no phone number in E.164 or in the national form "
                "of the intent's country.",
            ),
        ),
        BeforeValidator(_no_contact_data),
    ]
    recipient_ref: Annotated[Text, Field(min_length=1, max_length=120)]
    template_key: Annotated[
        Text,
        Field(
            min_length=1,
            max_length=80,
            description=_rule(
                "template.exists",
                "an active template of this key (and `template_version`, if pinned) for "
                "each channel of the plan, in `locale` or its fallback.",
            ),
        ),
    ]
    category: Category = Category.TRANSACTIONAL
    phone: (
        Annotated[
            str,
            Field(
                pattern=E164,
                description="E.164: `+447400123456`. "
                + _rule(
                    "phone.valid_for_country",
                    "a valid mobile number in its country's numbering plan (phonenumbers).",
                )
                + " "
                + _rule("channels.destinations", "required when the plan has sms."),
            ),
        ]
        | None
    ) = None
    email: (
        Annotated[
            Text,
            Field(
                max_length=320,
                description=_rule(
                    "email.valid", "a dot-atom local part and a host name with a dot."
                )
                + " "
                + _rule("channels.destinations", "required when the plan has email."),
            ),
        ]
        | None
    ) = None
    channels: Annotated[
        list[Channel],
        Field(
            max_length=len(CHANNEL_NAMES),
            json_schema_extra={"uniqueItems": True},
            description="Order of channels, each at most once; empty means sms then email, "
            "for whichever destinations are given. "
            + _rule(
                "channels.destinations",
                "a phone number, an email address or both, one for each channel named.",
            ),
        ),
    ] = []
    mode: PlanMode = PlanMode.FALLBACK
    template_version: Annotated[int, Field(ge=1, le=2_147_483_647)] | None = None
    locale: Annotated[Text, Field(min_length=1, max_length=16)] = "en"
    variables: Annotated[
        dict[str, Any],
        Field(
            description=_rule(
                "template.variables",
                "every variable the template version declares as required, each of the "
                "shape it declares (its `variables_schema`, `GET /v1/templates/{key}`), "
                "rendering without error, at most 16,384 bytes as JSON.",
            )
        ),
    ] = {}
    send_at: (
        Annotated[
            Instant,
            Field(
                description="RFC 3339 with its offset, e.g. `2026-01-31T12:00:00Z`. "
                + _rule("send_at.within_a_year", "at most 366 days from now, either way.")
            ),
        ]
        | None
    ) = None
    expires_at: (
        Annotated[
            Instant,
            Field(
                description="RFC 3339 with its offset. "
                + _rule("expires_at.after_send_at", "later than `send_at` when both are given. ")
                + _rule("expires_at.within_a_year", "at most 366 days from now, either way.")
            ),
        ]
        | None
    ) = None
    timezone: (
        Annotated[
            TimeZoneName,
            Field(
                description="An IANA time zone name (`Europe/London`), one of the database's "
                "(the enum); default the phone number's zone, else UTC."
            ),
        ]
        | None
    ) = None
    country: (
        Annotated[
            Country,
            Field(
                description="ISO 3166-1 alpha-2, in capitals: the recipient's country when "
                "no phone number gives it. "
                + _rule(
                    "country.required",
                    "required when no phone number gives it and the active policy lists "
                    "the countries a channel of the intent may reach (an email address "
                    "alone needs none under the default policy).",
                ),
            ),
        ]
        | None
    ) = None
    artifact_sha256: (
        Annotated[
            str,
            Field(
                pattern=SHA256_HEX,
                description="An attachment's id: the `sha256` `POST /v1/attachments` "
                "answered with (email only). "
                + _rule("artifact.registered", "an attachment with this hash was uploaded.")
                + " "
                + _rule("artifact.email_only", "the plan has no sms."),
            ),
        ]
        | None
    ) = None

    def to_request(self) -> NotificationRequest:
        return NotificationRequest(
            business_key=self.business_key,
            recipient_ref=self.recipient_ref,
            template_key=self.template_key,
            category=self.category,
            phone=self.phone,
            email=self.email,
            channels=tuple(self.channels),
            mode=self.mode,
            template_version=self.template_version,
            locale=self.locale,
            variables=self.variables,
            send_at=self.send_at,
            expires_at=self.expires_at,
            timezone=self.timezone,
            country=self.country,
            artifact_sha256=self.artifact_sha256,
        )


class IntentCreated(BaseModel):
    intent_id: str
    workflow_id: str
    business_key: str
    existed: bool
    """True when the business key was already recorded: the existing intent is returned."""


class AttachmentStored(BaseModel):
    """An uploaded attachment: an intent names it by `sha256` (its `artifact_sha256`)."""

    sha256: str
    """The attachment's id: the SHA-256 of its bytes, computed as they arrived. The same
    bytes uploaded again are the same attachment."""
    size: int
    """In bytes."""
    media_type: str
    """The upload's media type (the part's `Content-Type`, without parameters)."""
    filename: str
    """The name the recipient sees (the first upload's, for bytes uploaded again)."""
    existed: bool
    """True when these bytes were uploaded before (200): nothing new was stored."""


class IntentSummary(BaseModel):
    id: str
    business_key: str
    state: IntentState
    """Derived from attempts and the latest decision (see `domain.intents`)."""
    event_type: str
    category: str
    region: str
    channels: list[str]
    template_key: str
    template_version: int | None
    created_at: datetime
    send_at: datetime | None
    cancelled_at: datetime | None
    created_by: str | None = None
    """The principal that recorded it through the API (null: in-process, or older)."""
    awaiting: Literal["settlement", "resend"] | None = None
    """What the intent's workflow waits for from an operator (null: nothing)."""
    awaiting_until: datetime | None = None
    """When that window closes."""


class IntentPage(BaseModel):
    """One page of a list of intents, newest first (`ledger.listing`: keyset paged)."""

    items: list[IntentSummary]
    next: str | None = None
    """The cursor of the next (older) page; null: nothing older. Opaque: pass it back as
    `cursor` with the same filters."""
    previous: str | None = None
    """The cursor of the previous (newer) page; null: this is the newest."""
    scanned: int
    """Intents read to fill the page (a state filter may skip some); bounded per request."""
    truncated: bool
    """True when the page holds fewer than `limit` items only because its scan bound was
    reached: `next` goes on from where the scan stopped."""

    @classmethod
    def of(cls, listed: IntentList, *, limit: int) -> IntentPage:
        """The page of a `ledger.listing.page` result (the API's and `herald list`'s)."""
        return cls(
            items=[
                IntentSummary(
                    id=row.id,
                    business_key=row.business_key,
                    state=IntentState(item.state),
                    event_type=row.event_type,
                    category=row.category,
                    region=row.region,
                    channels=list((row.channel_plan or {}).get("channels", [])),
                    template_key=row.template_key,
                    template_version=row.template_version,
                    created_at=row.created_at,
                    send_at=row.send_at,
                    cancelled_at=row.cancelled_at,
                    created_by=row.created_by,
                    awaiting=row.awaiting,
                    awaiting_until=row.awaiting_until if row.awaiting else None,
                )
                for item in listed.items
                for row in (item.intent,)
            ],
            next=listed.next_cursor,
            previous=listed.newer_cursor,
            scanned=listed.scanned,
            truncated=len(listed.items) < limit and listed.next_cursor is not None,
        )


class TemplatePin(BaseModel):
    """The template version an intent renders every attempt of one channel with."""

    locale: str
    version: int


class IntentView(BaseModel):
    id: str
    business_key: str
    state: IntentState
    event_type: str
    category: str
    region: str
    channel_plan: dict[str, Any]
    template_key: str
    template_version: int | None
    template_pins: dict[str, TemplatePin] | None = None
    """Per channel, the template locale and version chosen when the intent was recorded:
    every attempt (first, fallback, resend) renders with it, whatever is activated or
    rolled back later. Null on intents recorded before pins."""
    workflow_id: str
    send_at: datetime | None
    expires_at: datetime | None
    created_at: datetime | None
    cancelled_at: datetime | None
    pii_purged_at: datetime | None
    legal_hold: bool
    created_by: str | None = None
    """The principal that recorded it through the API (null: in-process through `starter`,
    or recorded before creators were)."""
    awaiting: Literal["settlement", "resend"] | None = None
    """What the intent's workflow waits for from an operator (null: nothing)."""
    awaiting_until: datetime | None = None
    """When that window closes."""


class DecisionView(BaseModel):
    id: int
    channel: str
    policy_version: str
    outcome: str
    rule: str
    reason: str
    inputs: dict[str, Any]
    next_eligible_at: datetime | None
    decided_at: datetime | None


class AttemptView(BaseModel):
    channel: str
    number: int
    token: str
    state: str
    remote_id: str | None
    message_id: str | None
    decision_id: int
    template_key: str
    template_version: int
    content_sha256: str
    segments: int | None
    sender: str = ""
    """The policy's sender alias."""
    sender_address: str | None = None
    """The real sender it resolved to: a number, an alphanumeric id, a Messaging Service
    SID or an email From (Herald's own, never the recipient's)."""
    provider: str = ""
    """The provider alias that took the attempt (the policy's `[providers]`); for attempts
    prepared before it was recorded, the channel's default provider."""
    error_code: str | None
    prepared_at: datetime | None
    submitted_at: datetime | None
    terminal_at: datetime | None
    pii_readable: bool
    destination_masked: str | None = None
    """The destination masked (`+44********42`, `a***@example.com`); null once purged.
    No role reads a destination in full through the API."""
    settled_rule: str | None = None
    """The settlement rule whose operator's settlement stands on this attempt."""
    settled_resend_allowed: bool | None = None
    """Whether that rule lets an approve-resend follow."""


class ObservationView(BaseModel):
    attempt: str | None
    source: str
    raw_status: str
    normalized_status: str | None
    provider_code: str | None
    provider_at: datetime | None
    observed_at: datetime | None
    verdict: str | None
    applied: bool
    conflict: bool


class OperatorActionView(BaseModel):
    action: str
    operator: str
    operator_role: str | None = None
    """The operator's role when it acted (null for actions recorded before roles)."""
    reason: str
    outcome: str
    detail: dict[str, Any] | None
    at: datetime | None


class ReviewItemView(BaseModel):
    id: int
    kind: str
    subject: str
    found_at: datetime | None
    resolved_at: datetime | None = None
    resolved_by: str | None = None
    resolution_note: str | None = None


class Timeline(BaseModel):
    """Everything the ledger knows about one intent, without any PII."""

    intent: IntentView
    decisions: list[DecisionView]
    attempts: list[AttemptView]
    observations: list[ObservationView]
    operator_actions: list[OperatorActionView]
    review_items: list[ReviewItemView] = []
    """Review items about the intent, its attempts and their observations, open or closed."""


# --- operator actions --------------------------------------------------------------------


NO_CONTACT_DATA = (
    "no email address and no phone number (in international form, or in national form "
    "valid in the intent's country): the text goes into the workflow's history and every "
    "timeline; name the person by their recipient ref."
)


WORDED = (
    "at least one visible character (a letter, digit, punctuation or symbol): spaces and "
    "invisible characters such as U+200B say nothing."
)


class OperatorBody(BaseModel):
    """Who acts is the authenticated principal: an `operator` field, which older clients
    sent, is ignored (not stored, not compared); any other unknown field is 422."""

    model_config = ConfigDict(extra="forbid")

    operator: Annotated[
        str | None,
        Field(
            max_length=200,
            description="Ignored: older clients sent it. Who acts is the token's principal.",
        ),
    ] = None

    reason: Annotated[
        Text,
        Field(
            min_length=1,
            max_length=2000,
            description="Why, in words (recorded, and shown in every timeline). "
            + _rule("reason.no_contact_data", NO_CONTACT_DATA)
            + " "
            + _rule("reason.worded", WORDED),
        ),
    ]


class ResendBody(OperatorBody):
    channel: Channel = SMS.name


class CancelOutcome(BaseModel):
    accepted: bool
    operator: str
    """The authenticated principal the cancel was recorded under."""
    closed: list[str]
    """What the cancel closed: the scheduled send, a deferral, polls, later channels."""
    in_flight: list[str]
    """Attempt tokens submitted and not yet settled: not recalled, only no longer followed."""
    delivered: list[str] = []
    """Attempt tokens already delivered when the cancel came (nothing to recall)."""
    message: str


class ResendOutcome(BaseModel):
    accepted: bool
    operator: str
    """The authenticated principal the approval (or refusal) was recorded under."""
    message: str
    attempt_number: int | None = None


class SettleBody(OperatorBody):
    """Settle the channel's unknown attempt under a named rule of the active policy."""

    channel: Channel = "sms"
    rule: Annotated[str, Field(min_length=1, max_length=60)]
    """A settlement rule of the active policy (`GET /v1/settlement-rules`)."""
    reference: Annotated[
        Text,
        Field(
            max_length=200,
            description="A carrier ticket, or how the recipient gave their word. "
            + _rule("reference.no_contact_data", NO_CONTACT_DATA),
        ),
    ] = ""


class SettleOutcome(BaseModel):
    accepted: bool
    operator: str
    """The authenticated principal the settlement (or refusal) was recorded under."""
    message: str
    """What was recorded, or why it was refused."""
    state: str = ""
    rule: str = ""
    resend_allowed: bool = False
    policy_version: str = ""
    attempt_token: str = ""


class LookupBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    channel: Channel = "sms"


class LookupOutcome(BaseModel):
    found: bool
    raw_status: str = ""
    """What the provider holds for the attempt (`not_found`: nothing)."""
    state: str = ""
    """The attempt's state after the lookup was recorded."""
    provider_at: datetime | None = None
    observed_at: datetime | None = None
    message: str = ""


class SettlementRuleDoc(BaseModel):
    name: str
    outcome: Literal["delivered", "not_delivered", "undeliverable"]
    evidence: Literal["provider_lookup", "reference", "recipient_word"]
    resend_allowed: bool
    description: str = ""


class SettlementRules(BaseModel):
    policy_version: str
    window_seconds: int
    """How long after an unknown verdict the workflow waits for a settlement."""
    rules: list[SettlementRuleDoc]


class Unsubscribed(BaseModel):
    status: Literal["unsubscribed"]


# --- consent and suppressions ------------------------------------------------------------


class ConsentBody(BaseModel):
    """Names the recipient in the body (never the URL, which access logs keep)."""

    model_config = ConfigDict(extra="forbid")

    recipient_ref: Annotated[Text, Field(min_length=1, max_length=120)]
    """The app's recipient id, as in `POST /v1/intents`."""
    channel: EvidenceChannel
    purpose: Annotated[Text, Field(min_length=1, max_length=40)] = "service"
    source: Annotated[Text, Field(min_length=1, max_length=120)] = "api"
    """Where the grant came from, or who revoked it (recorded)."""


class ConsentQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recipient_ref: Annotated[Text, Field(min_length=1, max_length=120)]
    channel: EvidenceChannel | None = None
    """Only grants that apply to this channel (`*` grants included)."""
    purpose: Annotated[Text, Field(min_length=1, max_length=40)] | None = None


class ConsentView(BaseModel):
    """One grant; the recipient is not echoed (the caller named it)."""

    id: int
    channel: str
    purpose: str
    source: str
    recorded_by: str | None = None
    """The principal that recorded the grant (an app or a person); null for grants
    recorded before this was kept, or by an inbound keyword or a scenario."""
    granted_at: datetime
    revoked_at: datetime | None
    revoked_source: str | None
    live: bool

    @classmethod
    def of(cls, row: Any) -> ConsentView:
        """The view of a `ledger.models.Consent` row (the API's and `herald consent`'s)."""
        return cls(
            id=row.id,
            channel=row.channel,
            purpose=row.purpose,
            source=row.source,
            recorded_by=(row.evidence or {}).get("recorded_by"),
            granted_at=row.granted_at,
            revoked_at=row.revoked_at,
            revoked_source=row.revoked_source,
            live=row.revoked_at is None,
        )


class ConsentRevoked(BaseModel):
    revoked_at: datetime
    ended: list[ConsentView]
    """The grants this revoke ended; empty when none was live (nothing changed)."""


class ConsentList(BaseModel):
    items: list[ConsentView]
    """Every grant on record, revoked ones included, oldest first."""


Destination = Annotated[
    str,
    Field(
        min_length=1,
        max_length=320,
        pattern=DESTINATION,
        description="A phone number with its `+` prefix, or an email address; stored only "
        "as its HMAC, never echoed. "
        + _rule(
            "destination.valid",
            "a possible phone number, or an email address with a dot-atom local part and a "
            "host name (422 `invalid_destination`).",
        ),
    ),
]


class SuppressionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    channel: EvidenceChannel
    destination: Destination
    """A phone number (E.164 or with a `+` prefix) or an email address; stored only as
    its HMAC, never echoed."""
    reason: Annotated[str, Field(pattern=MACHINE_WORD)] = "operator"
    """A machine word; the policy denies with rule `suppression.<reason>`."""
    source: Annotated[Text, Field(min_length=1, max_length=60)] = "api"


class SuppressionQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    destination: Destination
    channel: EvidenceChannel | None = None
    """Only suppressions that apply to this channel (`*` ones included)."""


class IntentSearch(BaseModel):
    """A recipient's intents, found by their phone number or address: in the body, never
    the URL (proxies and access logs keep URLs), and never repeated in the answer."""

    model_config = ConfigDict(extra="forbid")

    destination: Destination
    limit: Annotated[int, Field(ge=1, le=500)] = 50
    cursor: Annotated[
        str | None, Field(max_length=400, pattern=CURSOR_PATTERN, description=CURSOR_DESCRIPTION)
    ] = None


class SuppressionLift(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: Annotated[Text, Field(min_length=1, max_length=60)] = "api"


class SuppressionView(BaseModel):
    """One suppression; the destination is not echoed."""

    id: int
    channel: str
    category: str | None = None
    """The one message category it holds for (a complaint, an unsubscribe reported by the
    email provider); null: every category."""
    reason: str
    source: str
    at: datetime
    lifted_at: datetime | None
    lifted_source: str | None
    active: bool


class SuppressionRecorded(SuppressionView):
    created: bool
    """False when an active suppression on that channel already existed (it is returned)."""


class SuppressionLifted(SuppressionView):
    changed: bool
    """False when it was already lifted."""


class SuppressionList(BaseModel):
    items: list[SuppressionView]
    """Every suppression on record for the destination, lifted ones included, oldest first."""


# --- erasures ----------------------------------------------------------------------------


class ErasureBody(BaseModel):
    """Whom to erase, in the body (never the URL), never echoed back."""

    model_config = ConfigDict(extra="forbid")

    kind: RecipientKind
    """How `value` names the recipient: a phone number, an email address (any letter
    case), or the app's `recipient_ref`."""
    value: Annotated[
        Text,
        Field(
            min_length=1,
            max_length=320,
            description="The phone number, the address or the recipient ref; stored only as "
            "its HMAC, never echoed. "
            + _rule(
                "recipient.valid",
                "a possible phone number (with its + prefix) for `phone`, an address for "
                "`email`, at most 120 characters for `recipient_ref` (422 "
                "`invalid_destination`).",
            ),
        ),
    ]
    reason: Annotated[
        Text,
        Field(
            min_length=1,
            max_length=500,
            description="Why (a request's reference): recorded with the erasure. "
            + _rule("reason.no_contact_data", NO_CONTACT_DATA)
            + " "
            + _rule("reason.worded", WORDED),
        ),
    ]
    dry_run: bool = False
    """Say what would be erased, erase nothing (200, no audit event)."""


class ErasureRecorded(BaseModel):
    """What an erasure did: the recipient by HMAC only, and row counts."""

    kind: RecipientKind
    lookup: str
    """The recipient's HMAC: the only way the erasure names them."""
    at: datetime
    intents: int
    """The recipient's intents found."""
    rows_erased: dict[str, int]
    """Rows whose contact columns were nulled, by table."""
    evidence_kept: dict[str, int]
    """The recipient's rows that hold no contact data and stay as they are, by table."""
    audit_event_id: int | None
    """The audit event that records it; null on a dry run."""
    dry_run: bool


# --- principals --------------------------------------------------------------------------


class PrincipalCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    role: Role
    namespace: (
        Annotated[
            str,
            Field(
                pattern=NAMESPACE_PATTERN,
                description="The namespace of the business keys it records (docs/api.md, "
                "'How keys are scoped'); default its name. Its own for ever: one another "
                "principal holds, whatever its case, is 409. "
                + _rule(
                    "business_key.no_contact_data",
                    "no phone number or email address (it is part of every workflow id of "
                    "its keys); `starter` and `break-glass` are reserved.",
                ),
            ),
        ]
        | None
    ) = None


class PrincipalView(BaseModel):
    """A principal as listed: never its token or the token's hash."""

    name: str
    role: Role
    namespace: str
    """The namespace of the business keys it records."""
    created_by: str
    created_at: datetime
    last_used_at: datetime | None
    rotated_at: datetime | None
    revoked_at: datetime | None


class PrincipalList(BaseModel):
    items: list[PrincipalView]


class PrincipalToken(BaseModel):
    """The answer to an add or a rotate: the only time the token is ever shown."""

    name: str
    role: Role
    token: str
    warning: str = "store this token now: it is not stored by Herald and will not be shown again"


# --------------------------------------------------------------------------- templates, policies


class ActiveVersion(BaseModel):
    """The version of a template active for one channel and locale."""

    channel: str
    locale: str
    version: int


class TemplateSummaryView(BaseModel):
    """A template key: where it exists and which versions are active (`GET /v1/templates`)."""

    key: str
    channels: list[str]
    locales: list[str]
    active: list[ActiveVersion]
    """Empty until a version is activated (an import records versions, never activates)."""


class TemplateListView(BaseModel):
    """Every template key."""

    items: list[TemplateSummaryView]


class TemplateVersionView(BaseModel):
    """One recorded version of a template for a channel and locale: what an app calls."""

    version: int
    channel: str
    locale: str
    active: bool
    subject: str | None
    body: str
    variables_schema: dict[str, Any] | None = Field(
        description="The JSON Schema (2020-12) of the variables an intent sends for this "
        "version: each property's `description` says its shape in words, `required` lists "
        "those it cannot do without. Null for a version recorded before versions declared "
        "their variables."
    )
    sha256: str
    author: str | None = Field(
        description="The principal who imported it; null for the versions packaged with Herald."
    )
    approved_by: str | None = Field(
        default=None,
        description="The principal who approved it (`herald:system` for a version on record "
        "before review existed); null while under review or refused.",
    )
    refused_by: str | None = Field(
        default=None, description="The principal who refused it: it never becomes active."
    )
    recorded_at: datetime


class TemplateView(BaseModel):
    """A template key and every version of it (`GET /v1/templates/{key}`)."""

    key: str
    versions: list[TemplateVersionView]


class PolicyVersionView(BaseModel):
    """One recorded policy version (`GET /v1/policies`)."""

    version: str
    name: str
    owner: str
    effective_from: datetime
    active: bool
    sha256: str
    author: str | None = Field(
        description="The principal who imported it; null for the packaged policies and "
        "policy files named by `HERALD_POLICY_NAME`."
    )
    approved_by: str | None = Field(
        default=None,
        description="The principal who approved it (`herald:system` for a version on record "
        "before review existed); null while under review or refused.",
    )
    refused_by: str | None = Field(
        default=None, description="The principal who refused it: it never becomes active."
    )
    recorded_at: datetime


class PolicyListView(BaseModel):
    """Every policy version, oldest effective first."""

    items: list[PolicyVersionView]


class PolicyDocumentView(PolicyVersionView):
    """One policy version with its document (`GET /v1/policies/{version}`)."""

    document: str
    """The TOML text, as imported (docs/domain.md, "Policy documents")."""


class ChannelDiff(BaseModel):
    """A unified diff of one channel and locale's source (the subject first, for email)."""

    channel: str
    locale: str
    diff: str


class TemplateDiffView(BaseModel):
    """What changes from one version of a template to another (`.../diff?from=N`)."""

    key: str
    from_version: int
    to_version: int
    diffs: list[ChannelDiff]
    """One per channel and locale whose source changes; empty: the same text."""


class PolicyDiffView(BaseModel):
    """What changes from one policy document to another (`/v1/policies/{version}/diff`)."""

    from_version: str
    to_version: str
    diff: str
    """A unified diff of the TOML texts, as recorded; empty: the same document."""


class PreviewBody(BaseModel):
    """Sample variables to render a template version with (nothing is sent)."""

    model_config = ConfigDict(extra="forbid")
    variables: dict[str, Any] = Field(
        default_factory=dict,
        description="As an intent sends them: "
        + _rule(
            "template.variables",
            "each variable the version declares, of the shape it declares "
            "(`variables_schema`); a refusal names the variable and the shape.",
        ),
    )
    channel: Channel | None = Field(
        default=None, description="Which channel's text; required when the version has several."
    )
    locale: Annotated[Text, Field(min_length=1, max_length=16)] | None = Field(
        default=None, description="Which locale's text; required when the version has several."
    )
    region: str = Field(
        default="default",
        min_length=1,
        max_length=10,
        description="The policy region whose footer the text gets.",
    )
    category: Category = Category.TRANSACTIONAL


class AddedLinkView(BaseModel):
    """A link Herald adds at send: shown with a placeholder, never a variable to send."""

    name: str
    where: str
    value: str


class PreviewView(BaseModel):
    """A version rendered with sample variables as an attempt would send it; nothing sent."""

    key: str
    version: int
    channel: str
    locale: str
    subject: str | None
    text: str
    """The body as sent, the policy's footer included."""
    sha256: str
    """The content hash an attempt with these variables records."""
    encoding: str
    """`GSM-7` or `UCS-2` for SMS, `UTF-8` for email."""
    segments: int
    """SMS segments billed; 0 for email."""
    links_added: list[AddedLinkView]
    """What Herald adds itself at send (an email's one-click unsubscribe): no variables."""


class ReviewBody(BaseModel):
    """An approval or activation, of every channel and locale a version has or of one."""

    model_config = ConfigDict(extra="forbid")
    channel: Channel | None = None
    locale: Annotated[Text, Field(min_length=1, max_length=16)] | None = None


ReviewReason = Annotated[
    Text,
    Field(
        min_length=1,
        max_length=500,
        description="Why, for the author to read (recorded in the audit event). "
        + _rule("reason.no_contact_data", NO_CONTACT_DATA)
        + " "
        + _rule("reason.worded", WORDED),
    ),
    AfterValidator(_fit_reason),
]


class RefusalBody(ReviewBody):
    """A refusal: the reason is recorded in the audit event, for the author to read."""

    reason: ReviewReason


class PolicyRefusalBody(BaseModel):
    """A policy version's refusal."""

    model_config = ConfigDict(extra="forbid")
    reason: ReviewReason


class ImportedView(BaseModel):
    """What an import recorded (new versions, not activated) and what it already held."""

    recorded: list[str]
    unchanged: list[str]
    """Versions recorded before with the same content: nothing to do for them."""
