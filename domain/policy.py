"""Sending policy as versioned data, and the one function that applies it.

A policy is a TOML document (see ``docs/domain.md`` and ``policies/default.toml``). It is
parsed once into a fully resolved table: one :class:`Rule` for every region x channel x
category and one :class:`FallbackRule` for every region x category, so evaluation never
has to guess how layers combine and a missing field is caught when the policy is loaded,
not when the first promotional SMS to South Africa is evaluated.

:func:`evaluate` takes the evidence (consents, suppressions, recent contacts) and the
time as arguments and returns a :class:`Decision` that names the policy version, the rule
that decided and what it looked at, so the ledger can explain it later.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from domain import channels
from domain import review as review_rules
from domain import settlement as settlement_rules
from domain.clocks import iso_utc
from domain.destinations import region_of

REGIONS: tuple[str, ...] = ("US", "EU", "ZA", "default")
CHANNELS: tuple[str, ...] = channels.NAMES
CATEGORIES: tuple[str, ...] = ("transactional", "operational", "promotional")

# The purpose a message serves when the caller does not say. Promotional mail needs a
# marketing consent; a service relationship never stands in for it.
DEFAULT_PURPOSE: dict[str, str] = {
    "transactional": "service",
    "operational": "service",
    "promotional": "marketing",
}
MARKETING_PURPOSE = "marketing"

_RULE_FIELDS = frozenset(
    {
        "allowed_countries",
        "consent_purposes",
        "quiet_hours",
        "quiet_hours_exempt",
        "sender",
        "cooldown",
        "footer",
        "failover",
    }
)
_FALLBACK_FIELDS = frozenset(
    {
        "email_after_seconds",
        "email_on_permanent_failure",
        "sms_poll_horizon_seconds",
        "poll_initial_seconds",
        "poll_max_seconds",
        "expiry_seconds",
        "email_events_horizon_seconds",
        "email_blocks_to_suppress",
        "email_blocks_window_seconds",
    }
)
_RETENTION_FIELDS = frozenset({"evidence_days"})
DEFAULT_EVIDENCE_DAYS = 365
"""How long a closed intent's evidence stays in the hot ledger when a policy does not say
(``[retention] evidence_days``): a year of `herald show`, the console and reconciliation
from the hot tables; after it the archive holds the same facts (ledger/archive.py)."""
_PROVIDER_ALIAS = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
_COUNTRY = re.compile(r"^[A-Z]{2}$")
# Longest quiet window accepted: a deferral must land within 24 h even across DST.
_MAX_QUIET = timedelta(hours=16)


class PolicyError(ValueError):
    """A policy document that cannot be used; the message names the field at fault."""


class InvalidPolicyRequest(ValueError):
    """A policy request with an unknown channel, category or time zone.

    A policy request with an unknown channel, category or time zone (a request refused
    at intake is ledger.errors.InvalidRequest).
    """


@dataclass(frozen=True)
class QuietHours:
    """A daily window, in the recipient's local time, when nothing is sent."""

    start: time
    """First quiet minute, e.g. 21:00."""
    end: time
    """First eligible minute again, e.g. 08:00 (the window may wrap past midnight)."""

    def contains(self, local: time) -> bool:
        """Whether a local wall-clock time lies in ``[start, end)``."""
        if self.start < self.end:
            return self.start <= local < self.end
        return local >= self.start or local < self.end


@dataclass(frozen=True)
class Cooldown:
    """How often one recipient may be contacted on one channel."""

    min_gap_seconds: int
    """Least time between two contacts; 0 for no gap."""
    max_per_window: int
    """Most contacts within ``window_seconds``; 0 for no limit."""
    window_seconds: int
    """Length of the sliding window."""


@dataclass(frozen=True)
class Rule:
    """Everything the policy says about one region x channel x category."""

    allowed_countries: frozenset[str] | None
    """Destination countries allowed; ``None`` means any (``"*"`` in TOML)."""
    consent_purposes: tuple[str, ...]
    """Consent purposes that must all be granted and not revoked."""
    quiet_hours: QuietHours | None
    """The quiet window, or ``None`` when this rule has none."""
    quiet_hours_exempt: bool
    """True when the quiet window does not apply (e.g. a transactional SMS)."""
    sender: str
    """Sender identity: a from-number alias for SMS, a From header for email."""
    cooldown: Cooldown
    footer: str | None
    """Legal footer appended to the body, e.g. ``"Reply STOP to opt out"``."""
    failover: bool = True
    """Whether another provider of the channel's list may take over when one refuses for
    its own reasons (docs/transports.md, "Failover"); ``false`` for a category that
    would rather wait than change provider. Moot with one provider."""
    allowed_countries_from: str = ""
    """Where the document sets a list of ``allowed_countries`` (``regions.EU.rules.
    allowed_countries``), to name the rule that needs a country; ``""`` for ``"*"``."""


@dataclass(frozen=True)
class FallbackRule:
    """Timings for one region x category: fallback, polling and expiry."""

    email_after_seconds: int | None
    """Send email when SMS is not delivered after this long; ``None`` means never."""
    email_on_permanent_failure: bool
    """Send email at once when the SMS attempt fails permanently."""
    sms_poll_horizon_seconds: int
    """Stop polling an unresolved SMS after this long; the verdict is then ``unknown``."""
    poll_initial_seconds: float
    """First poll delay (the backoff's initial value)."""
    poll_max_seconds: float
    """Largest poll delay."""
    expiry_seconds: int
    """Default business expiry of an intent, counted from its creation."""
    email_events_horizon_seconds: int = 3600
    """An email accepted by a provider that reports events (SendGrid) and with no
    ``delivered``, bounce or drop event after this long records ``sent``, the last word
    an SMTP relay gives; a later event still settles it."""
    email_blocks_to_suppress: int = 3
    """Transient blocks (``bounce`` of type blocked) of one address within
    ``email_blocks_window_seconds`` after which it is suppressed for email; 0: never."""
    email_blocks_window_seconds: int = 604800
    """The window the blocks are counted in (default a week)."""


@dataclass(frozen=True)
class Policy:
    """One version of the sending policy, fully resolved."""

    version: str
    """E.g. ``"2026-12-01.1"``: recorded on every decision."""
    owner: str
    """Who answers for this policy (a team or a mailbox)."""
    effective_from: datetime
    """When this version starts to apply (timezone-aware)."""
    rules: Mapping[tuple[str, str, str], Rule] = field(repr=False)
    """One rule per (region, channel, category)."""
    fallbacks: Mapping[tuple[str, str], FallbackRule] = field(repr=False)
    """One fallback rule per (region, category)."""
    description: str = ""
    providers: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict, repr=False)
    """Per (region, channel), the provider aliases in order (``[providers]``); a channel
    the document does not name has its registry defaults (domain.channels)."""
    settlement: settlement_rules.SettlementPolicy = field(
        default_factory=settlement_rules.SettlementPolicy
    )
    """How an unknown attempt may be settled, and for how long after the verdict."""
    source_sha256: str = ""
    """SHA-256 of the TOML text it was loaded from, so evidence can name the exact bytes."""
    named_providers: frozenset[tuple[str, str]] = frozenset()
    """The (region, channel) pairs whose providers the document names itself; the others
    carry the registry defaults, which a deployment may replace (``defaults`` below)."""
    evidence_days: int = DEFAULT_EVIDENCE_DAYS
    """``[retention] evidence_days``: a closed intent whose last activity is older than
    this is archived (its rows exported, hashed and deleted from the hot tables, a
    tombstone kept; ledger/archive.py). Never shorter than a day."""
    review: review_rules.ReviewRule = field(default_factory=review_rules.ReviewRule)
    """``[review]``: which new policy and template versions need a second principal's
    approval before they become active (domain.review); every policy version by default."""

    def providers_for(
        self,
        region: str,
        channel: str,
        *,
        defaults: Mapping[str, tuple[str, ...]] | None = None,
    ) -> tuple[str, ...]:
        """The provider aliases of one region and channel, in order.

        The first takes the attempt; raises channels.UnknownChannel for a channel Herald
        does not know. ``defaults`` (channel -> aliases, from settings:
        HERALD_EMAIL_PROVIDER) replaces the registry defaults where the document names no
        provider for the channel.
        """
        default = channels.get(channel).default_providers
        if (region, channel) not in self.named_providers and defaults and channel in defaults:
            return defaults[channel]
        return self.providers.get((region, channel), default)

    def rule_for(self, region: str, channel: str, category: str) -> Rule:
        """The rule for one combination; raises :class:`InvalidPolicyRequest` if unknown."""
        try:
            return self.rules[(region, channel, category)]
        except KeyError:
            raise InvalidPolicyRequest(
                f"no rule for region {region!r}, channel {channel!r}, category {category!r}"
            ) from None


# --------------------------------------------------------------------------- loading


def _check_fields(table: Mapping[str, object], allowed: frozenset[str], where: str) -> None:
    for name in table:
        if name not in allowed:
            raise PolicyError(f"{where}: unknown field {name!r}")


def _layer(table: Mapping[str, object], where: str, nested: Sequence[str]) -> dict[str, object]:
    """The plain fields of one layer; sub-tables named in ``nested`` are layers of their own."""
    fields: dict[str, object] = {}
    for name, value in table.items():
        if name in nested:
            if not isinstance(value, dict):
                raise PolicyError(f"{where}.{name}: must be a table")
            continue
        fields[name] = value
    _check_fields(fields, _RULE_FIELDS, where)
    return fields


def _sub(table: Mapping[str, object], name: str) -> Mapping[str, object]:
    value = table.get(name, {})
    return value if isinstance(value, dict) else {}


def _rule_layers(
    rules: Mapping[str, object], where: str, channel: str, category: str
) -> list[tuple[str, dict[str, object]]]:
    """Layers of one ``rules`` table, least specific first: all, category, channel, both."""
    nested = (*CHANNELS, *CATEGORIES)
    by_channel = _sub(rules, channel)
    return [
        (where, _layer(rules, where, nested)),
        (f"{where}.{category}", _layer(_sub(rules, category), f"{where}.{category}", ())),
        (f"{where}.{channel}", _layer(by_channel, f"{where}.{channel}", CATEGORIES)),
        (
            f"{where}.{channel}.{category}",
            _layer(_sub(by_channel, category), f"{where}.{channel}.{category}", ()),
        ),
    ]


def _check_rule_table_keys(rules: Mapping[str, object], where: str) -> None:
    # Catch typos like [rules.promotinal] or [rules.sms.transactionl]: they would
    # otherwise be read as an unknown field of the enclosing layer.
    # quiet_hours and cooldown are inline tables too: they are fields, not layers.
    for name, value in rules.items():
        if isinstance(value, dict) and name not in (*CHANNELS, *CATEGORIES, *_RULE_FIELDS):
            raise PolicyError(f"{where}.{name}: not a channel or category")
        if name in CHANNELS and isinstance(value, dict):
            for sub, subvalue in value.items():
                if isinstance(subvalue, dict) and sub not in (*CATEGORIES, *_RULE_FIELDS):
                    raise PolicyError(f"{where}.{name}.{sub}: not a category")
        if name in CATEGORIES and isinstance(value, dict):
            _check_fields(value, _RULE_FIELDS, f"{where}.{name}")


def _providers(value: object, where: str) -> dict[str, tuple[str, ...]]:
    """A ``providers`` table: channel -> ordered, non-empty list of provider aliases."""
    if not isinstance(value, dict):
        raise PolicyError(f"{where}: must be a table of channel = [provider aliases]")
    routes: dict[str, tuple[str, ...]] = {}
    for channel, aliases in value.items():
        if channel not in channels.REGISTRY:
            raise PolicyError(f"{where}.{channel}: not a channel (one of {', '.join(CHANNELS)})")
        if (
            not isinstance(aliases, list)
            or not aliases
            or not all(isinstance(a, str) and _PROVIDER_ALIAS.match(a) for a in aliases)
        ):
            raise PolicyError(
                f"{where}.{channel}: must be a non-empty list of provider aliases "
                "(lowercase letters, digits, '-', '_')"
            )
        if len(set(aliases)) != len(aliases):
            raise PolicyError(f"{where}.{channel}: names a provider twice")
        routes[channel] = tuple(aliases)
    return routes


def _parse_time(value: object, where: str) -> time:
    if not isinstance(value, str) or not _HHMM.match(value):
        raise PolicyError(f"{where}: must be a 'HH:MM' string")
    hours, minutes = value.split(":")
    return time(int(hours), int(minutes))


def _parse_int(value: object, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PolicyError(f"{where}: must be an integer >= {minimum}")
    return value


def _parse_seconds(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise PolicyError(f"{where}: must be a number of seconds > 0")
    return float(value)


def _quiet_hours(value: object, where: str) -> QuietHours | None:
    if value is False:
        return None
    if not isinstance(value, dict) or set(value) != {"start", "end"}:
        raise PolicyError(f"{where}: must be {{ start = 'HH:MM', end = 'HH:MM' }} or false")
    start = _parse_time(value["start"], f"{where}.start")
    end = _parse_time(value["end"], f"{where}.end")
    length = (datetime.combine(date.min, end) - datetime.combine(date.min, start)) % timedelta(
        days=1
    )
    if not timedelta(0) < length <= _MAX_QUIET:
        raise PolicyError(f"{where}: window must last between 1 minute and 16 hours")
    return QuietHours(start=start, end=end)


def _cooldown(value: object, where: str) -> Cooldown:
    names = {"min_gap_seconds", "max_per_window", "window_seconds"}
    if not isinstance(value, dict) or set(value) != names:
        raise PolicyError(f"{where}: must be a table with exactly {sorted(names)}")
    window = _parse_int(value["window_seconds"], f"{where}.window_seconds", minimum=1)
    return Cooldown(
        min_gap_seconds=_parse_int(value["min_gap_seconds"], f"{where}.min_gap_seconds"),
        max_per_window=_parse_int(value["max_per_window"], f"{where}.max_per_window"),
        window_seconds=window,
    )


def _resolve_rule(layers: list[tuple[str, dict[str, object]]], category: str) -> Rule:
    merged: dict[str, tuple[str, object]] = {}
    for where, fields in layers:
        for name, value in fields.items():
            merged[name] = (f"{where}.{name}", value)
    scope = layers[-1][0]

    def need(name: str) -> tuple[str, object]:
        if name not in merged:
            raise PolicyError(f"{scope}: field {name!r} is not set at any level")
        return merged[name]

    where, countries = need("allowed_countries")
    countries_where = where
    if countries == "*" or countries == ["*"]:
        allowed: frozenset[str] | None = None
    elif isinstance(countries, list) and all(
        isinstance(c, str) and _COUNTRY.match(c) for c in countries
    ):
        allowed = frozenset(countries)
    else:
        raise PolicyError(f'{where}: must be "*" or a list of ISO alpha-2 codes like "US"')

    where, purposes = need("consent_purposes")
    if not isinstance(purposes, list) or not all(isinstance(p, str) and p for p in purposes):
        raise PolicyError(f"{where}: must be a list of purpose names")
    if category == "promotional" and MARKETING_PURPOSE not in purposes:
        # A legal invariant, not a preference: no policy version may drop it.
        raise PolicyError(f"{where}: promotional messages must require {MARKETING_PURPOSE!r}")

    where, quiet = need("quiet_hours")
    quiet_hours = _quiet_hours(quiet, where)
    where, exempt = merged.get("quiet_hours_exempt", (scope, False))
    if not isinstance(exempt, bool):
        raise PolicyError(f"{where}: must be true or false")

    where, sender = need("sender")
    if not isinstance(sender, str) or not sender.strip():
        raise PolicyError(f"{where}: must be a non-empty string")

    where, cooldown = need("cooldown")
    where_footer, footer = merged.get("footer", (scope, ""))
    if not isinstance(footer, str):
        raise PolicyError(f'{where_footer}: must be a string ("" for none)')
    where_failover, may_fail_over = merged.get("failover", (scope, True))
    if not isinstance(may_fail_over, bool):
        raise PolicyError(f"{where_failover}: must be true or false")
    return Rule(
        allowed_countries=allowed,
        allowed_countries_from=countries_where if allowed is not None else "",
        consent_purposes=tuple(purposes),
        quiet_hours=quiet_hours,
        quiet_hours_exempt=exempt,
        sender=sender,
        cooldown=_cooldown(cooldown, where),
        footer=footer or None,
        failover=may_fail_over,
    )


def _resolve_fallback(layers: list[tuple[str, dict[str, object]]]) -> FallbackRule:
    merged: dict[str, tuple[str, object]] = {}
    for where, fields in layers:
        for name, value in fields.items():
            merged[name] = (f"{where}.{name}", value)
    scope = layers[-1][0]

    def need(name: str) -> tuple[str, object]:
        if name not in merged:
            raise PolicyError(f"{scope}: field {name!r} is not set at any level")
        return merged[name]

    where, after = need("email_after_seconds")
    email_after = None if after is False else _parse_int(after, where)
    where, on_permanent = need("email_on_permanent_failure")
    if not isinstance(on_permanent, bool):
        raise PolicyError(f"{where}: must be true or false")
    where, initial = need("poll_initial_seconds")
    poll_initial = _parse_seconds(initial, where)
    where, maximum = need("poll_max_seconds")
    poll_max = _parse_seconds(maximum, where)
    if poll_max < poll_initial:
        raise PolicyError(f"{where}: must be >= poll_initial_seconds")
    where, horizon = need("sms_poll_horizon_seconds")
    where_expiry, expiry = need("expiry_seconds")
    optional: dict[str, int] = {}
    for name, minimum in (
        ("email_events_horizon_seconds", 1),
        ("email_blocks_to_suppress", 0),
        ("email_blocks_window_seconds", 1),
    ):
        if name in merged:
            where_optional, value = merged[name]
            optional[name] = _parse_int(value, where_optional, minimum=minimum)
    return FallbackRule(
        email_after_seconds=email_after,
        email_on_permanent_failure=on_permanent,
        sms_poll_horizon_seconds=_parse_int(horizon, where, minimum=1),
        poll_initial_seconds=poll_initial,
        poll_max_seconds=poll_max,
        expiry_seconds=_parse_int(expiry, where_expiry, minimum=1),
        **optional,
    )


def load_policy(text: str) -> Policy:
    """Parse and fully resolve a policy document.

    Args:
        text: The TOML text (see ``docs/domain.md`` for its shape).

    Returns:
        The policy with a rule for every region x channel x category and a fallback
        rule for every region x category.

    Raises:
        PolicyError: The TOML does not parse, a field is unknown, missing or malformed;
            the message names the field (e.g. ``regions.US.rules.sms.promotional.footer``).
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"policy is not valid TOML: {exc}") from None
    _check_fields(
        doc, frozenset({"version", "owner", "effective_from", "description", "rules",
                        "fallback", "regions", "providers", "settlement",
                        "retention", "review"}), "policy"
    )  # fmt: skip
    version = doc.get("version")
    if not isinstance(version, str) or not version.strip():
        raise PolicyError("version: must be a non-empty string like '2026-12-01.1'")
    owner = doc.get("owner")
    if not isinstance(owner, str) or not owner.strip():
        raise PolicyError("owner: must be a non-empty string")
    effective_from = doc.get("effective_from")
    if not isinstance(effective_from, datetime) or effective_from.tzinfo is None:
        raise PolicyError("effective_from: must be an offset date-time like 2026-12-01T00:00:00Z")
    description = doc.get("description", "")
    if not isinstance(description, str):
        raise PolicyError("description: must be a string")

    rules = doc.get("rules", {})
    fallback = doc.get("fallback", {})
    regions = doc.get("regions", {})
    for name, value in (("rules", rules), ("fallback", fallback), ("regions", regions)):
        if not isinstance(value, dict):
            raise PolicyError(f"{name}: must be a table")
    _check_rule_table_keys(rules, "rules")
    for region, body in regions.items():
        if region not in REGIONS:
            raise PolicyError(f"regions.{region}: unknown region (one of {', '.join(REGIONS)})")
        if not isinstance(body, dict):
            raise PolicyError(f"regions.{region}: must be a table")
        _check_fields(body, frozenset({"rules", "fallback", "providers"}), f"regions.{region}")
        _check_rule_table_keys(_sub(body, "rules"), f"regions.{region}.rules")
    for scope, table in [("fallback", fallback)] + [
        (f"regions.{r}.fallback", _sub(regions.get(r, {}), "fallback")) for r in regions
    ]:
        for name, value in table.items():
            if isinstance(value, dict):
                if name not in CATEGORIES:
                    raise PolicyError(f"{scope}.{name}: not a category")
                _check_fields(value, _FALLBACK_FIELDS, f"{scope}.{name}")
            else:
                _check_fields({name: value}, _FALLBACK_FIELDS, scope)

    everywhere = _providers(doc.get("providers", {}), "providers")
    routes: dict[tuple[str, str], tuple[str, ...]] = {}
    named: set[tuple[str, str]] = set()
    for region in REGIONS:
        regional_routes = _providers(
            regions.get(region, {}).get("providers", {}), f"regions.{region}.providers"
        )
        for channel in CHANNELS:
            routes[(region, channel)] = regional_routes.get(
                channel, everywhere.get(channel, channels.get(channel).default_providers)
            )
            if channel in regional_routes or channel in everywhere:
                named.add((region, channel))

    resolved: dict[tuple[str, str, str], Rule] = {}
    fallbacks: dict[tuple[str, str], FallbackRule] = {}
    for region in REGIONS:
        regional = _sub(regions.get(region, {}), "rules")
        for channel in CHANNELS:
            for category in CATEGORIES:
                layers = _rule_layers(rules, "rules", channel, category) + _rule_layers(
                    regional, f"regions.{region}.rules", channel, category
                )
                resolved[(region, channel, category)] = _resolve_rule(layers, category)
        regional_fallback = _sub(regions.get(region, {}), "fallback")
        for category in CATEGORIES:
            layers = [
                ("fallback", {k: v for k, v in fallback.items() if not isinstance(v, dict)}),
                (f"fallback.{category}", dict(_sub(fallback, category))),
                (
                    f"regions.{region}.fallback",
                    {k: v for k, v in regional_fallback.items() if not isinstance(v, dict)},
                ),
                (
                    f"regions.{region}.fallback.{category}",
                    dict(_sub(regional_fallback, category)),
                ),
            ]
            fallbacks[(region, category)] = _resolve_fallback(layers)

    settlement_table = doc.get("settlement", {})
    if not isinstance(settlement_table, dict):
        raise PolicyError("settlement: must be a table")
    try:
        settlement = settlement_rules.parse(settlement_table)
    except settlement_rules.SettlementPolicyError as err:
        raise PolicyError(str(err)) from None

    retention = doc.get("retention", {})
    if not isinstance(retention, dict):
        raise PolicyError("retention: must be a table")
    _check_fields(retention, _RETENTION_FIELDS, "retention")
    evidence_days = DEFAULT_EVIDENCE_DAYS
    if "evidence_days" in retention:
        evidence_days = _parse_int(retention["evidence_days"], "retention.evidence_days", minimum=1)

    review_table = doc.get("review", {})
    if not isinstance(review_table, dict):
        raise PolicyError("review: must be a table")
    try:
        review = review_rules.parse(review_table)
    except review_rules.ReviewPolicyError as err:
        raise PolicyError(str(err)) from None

    return Policy(
        version=version,
        owner=owner,
        effective_from=effective_from,
        rules=resolved,
        fallbacks=fallbacks,
        description=description,
        providers=routes,
        named_providers=frozenset(named),
        settlement=settlement,
        evidence_days=evidence_days,
        review=review,
        source_sha256=hashlib.sha256(text.encode()).hexdigest(),
    )


def select_policy(policies: Sequence[Policy], now: datetime) -> Policy:
    """The version in force at ``now``: the latest ``effective_from`` not after it.

    Raises:
        PolicyError: No version is in force yet.
    """
    in_force = [p for p in policies if p.effective_from <= now]
    if not in_force:
        raise PolicyError(f"no policy version is in force at {now.isoformat()}")
    return max(in_force, key=lambda p: (p.effective_from, p.version))


def fallback_for(policy: Policy, region: str, category: str) -> FallbackRule:
    """The fallback, polling and expiry timings for one region and category.

    Raises:
        InvalidPolicyRequest: Unknown region or category.
    """
    try:
        return policy.fallbacks[(region, category)]
    except KeyError:
        raise InvalidPolicyRequest(
            f"no fallback rule for region {region!r}, category {category!r}"
        ) from None


# --------------------------------------------------------------------------- evidence


@dataclass(frozen=True)
class Consent:
    """Evidence that a person agreed to be contacted on a channel for a purpose."""

    channel: str
    """``"sms"``, ``"email"`` or ``"*"`` for every channel."""
    purpose: str
    """E.g. ``"service"``, ``"marketing"``."""
    granted_at: datetime
    revoked_at: datetime | None = None
    source: str = ""
    """Where it was collected (``"signup-form-v3"``, ``"keyword:START"``)."""
    id: str = ""
    """The ledger's id for this consent, recorded as decision evidence."""
    revoked_source: str = ""
    """Who or what revoked it (``"cli"``, ``"api"``, ``"keyword:STOP"``), when revoked."""


@dataclass(frozen=True)
class Suppression:
    """A reason never to contact a destination on a channel (STOP, hard bounce, complaint)."""

    channel: str
    """``"sms"``, ``"email"`` or ``"*"``."""
    reason: str
    """A machine word: ``"opted_out"``, ``"hard_bounce"``, ``"complaint"``, ..."""
    at: datetime
    lifted_at: datetime | None = None
    """Set when the person opted back in (START); a lifted suppression no longer applies."""
    id: str = ""
    category: str | None = None
    """The one message category it holds for (a complaint, an unsubscribe); ``None``:
    every category (a STOP, a hard bounce)."""


@dataclass(frozen=True)
class RecentContact:
    """A past send to this recipient, for the cooldown rule."""

    at: datetime
    channel: str = ""
    """The channel it went out on; ``""`` (unknown) counts against every channel."""


@dataclass(frozen=True)
class PolicyRequest:
    """What is about to be sent, described without any personal data."""

    channel: str
    category: str
    """``"transactional"``, ``"operational"`` or ``"promotional"``."""
    country: str
    """Destination country (ISO alpha-2); for email the recipient's country or ``""``."""
    timezone: str
    """The recipient's IANA zone, for quiet hours."""
    purpose: str | None = None
    """Consent purpose; defaults by category (promotional -> marketing, else service)."""
    region: str | None = None
    """Policy region; derived from ``country`` when not given."""


class Outcome(StrEnum):
    """What a policy decision says: send now, send later, or never."""

    ALLOW = "allow"
    DEFER = "defer"
    DENY = "deny"


@dataclass(frozen=True)
class Decision:
    """The result of :func:`evaluate`, stored as evidence beside the attempt."""

    outcome: Outcome
    rule: str
    """Machine name of the deciding rule: ``"suppression.opted_out"``, ``"country.not_allowed"``,
    ``"consent.missing"``, ``"consent.revoked"``, ``"quiet_hours"``, ``"cooldown.min_gap"``,
    ``"cooldown.max_per_window"`` or ``"allow"``."""
    reason: str
    """One human sentence."""
    policy_version: str
    next_eligible_at: datetime | None
    """For a deferral: the earliest time worth evaluating again."""
    inputs: dict[str, object]
    """What the decision looked at; JSON-serialisable and free of personal data."""
    sender: str = ""
    """Sender identity to use, on ALLOW."""
    footer: str | None = None
    """Legal footer to append, on ALLOW."""


# --------------------------------------------------------------------------- evaluation


def _quiet_window_end(quiet: QuietHours, local_now: datetime) -> datetime:
    """The first instant after ``local_now`` whose local time is ``quiet.end`` or later.

    Compared in UTC, not wall time: around a DST change the same wall time happens twice
    (or not at all), so both folds of today and tomorrow are tried and the earliest
    instant that is in the future and outside the window wins. A wall time inside a
    spring-forward gap lands just after the gap.
    """
    zone = local_now.tzinfo
    now_utc = local_now.astimezone(UTC)
    candidates = []
    for day in (local_now.date(), local_now.date() + timedelta(days=1)):
        for fold in (0, 1):
            instant = datetime.combine(day, quiet.end, tzinfo=zone).replace(fold=fold)
            instant_utc = instant.astimezone(UTC)
            if instant_utc > now_utc and not quiet.contains(instant_utc.astimezone(zone).time()):
                candidates.append(instant_utc)
    return min(candidates)


def evaluate(
    policy: Policy,
    request: PolicyRequest,
    *,
    consents: Sequence[Consent],
    suppressions: Sequence[Suppression],
    recent: Sequence[RecentContact],
    now: datetime,
) -> Decision:
    """Decide whether one message may go out now, later, or never.

    The checks run in this order and the first that blocks decides: suppression
    (deny), destination country (deny), consent for the purpose (deny), quiet hours in
    the recipient's local time (defer to the end of the window), recipient cooldown
    (defer until the gap passes or the window frees). Otherwise the message is allowed
    with the rule's sender and footer. A deferral's ``next_eligible_at`` is a lower
    bound: the caller evaluates again then, and a later rule may defer once more.

    Args:
        policy: The policy version in force.
        request: Channel, category, destination country and time zone.
        consents: Every consent on record for this recipient (any channel, any purpose).
        suppressions: Every suppression on record for this destination.
        recent: Past contacts with this recipient.
        now: The current time, timezone-aware.

    Returns:
        The decision, naming the policy version, the deciding rule and its inputs.

    Raises:
        InvalidPolicyRequest: Unknown channel or category, unknown time zone, or a naive ``now``.
    """
    if now.tzinfo is None:
        raise InvalidPolicyRequest("now must be timezone-aware")
    if request.channel not in CHANNELS:
        raise InvalidPolicyRequest(f"unknown channel {request.channel!r}")
    if request.category not in CATEGORIES:
        raise InvalidPolicyRequest(f"unknown category {request.category!r}")
    try:
        zone = ZoneInfo(request.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        # Guessing a zone could mean a message at 3 a.m.: refuse instead.
        raise InvalidPolicyRequest(f"unknown time zone {request.timezone!r}") from None

    country = request.country.strip().upper()
    region = request.region or region_of(country)
    rule = policy.rule_for(region, request.channel, request.category)
    purposes = list(rule.consent_purposes)
    purpose = request.purpose or DEFAULT_PURPOSE[request.category]
    if purpose not in purposes:
        purposes.append(purpose)
    if request.category == "promotional" and MARKETING_PURPOSE not in purposes:
        purposes.append(MARKETING_PURPOSE)
    local_now = now.astimezone(zone)
    inputs: dict[str, object] = {
        "region": region,
        "channel": request.channel,
        "category": request.category,
        "country": country,
        "timezone": request.timezone,
        "local_time": local_now.isoformat(),
        "purposes_required": purposes,
    }

    def decide(
        outcome: Outcome, rule_name: str, reason: str, next_eligible_at: datetime | None = None
    ) -> Decision:
        return Decision(
            outcome=outcome,
            rule=rule_name,
            reason=reason,
            policy_version=policy.version,
            next_eligible_at=next_eligible_at,
            inputs=inputs,
            sender=rule.sender if outcome == Outcome.ALLOW else "",
            footer=rule.footer if outcome == Outcome.ALLOW else None,
        )

    # 1. Suppression: an opt-out is absolute, whatever consent says.
    active = [
        s
        for s in suppressions
        if s.channel in (request.channel, "*")
        and s.category in (None, request.category)
        and s.at <= now
        and (s.lifted_at is None or s.lifted_at > now)
    ]
    inputs["suppressions_active"] = [
        {"id": s.id, "reason": s.reason, **({"category": s.category} if s.category else {})}
        for s in active
    ]
    if active:
        first = min(active, key=lambda s: s.at)
        word = re.sub(r"[^a-z0-9_]+", "_", first.reason.lower()).strip("_") or "unspecified"
        return decide(
            Outcome.DENY,
            f"suppression.{word}",
            f"The destination is suppressed on {request.channel}"
            + (f" for {first.category} messages" if first.category else "")
            + f" ({first.reason}) since {iso_utc(first.at)}.",
        )

    # 2. Destination country.
    if rule.allowed_countries is not None and country not in rule.allowed_countries:
        inputs["allowed_countries"] = sorted(rule.allowed_countries)
        if not country:
            return decide(
                Outcome.DENY,
                "country.unknown",
                f"The destination country is unknown and {region} {request.channel} "
                f"{request.category} messages go only to listed countries.",
            )
        return decide(
            Outcome.DENY,
            "country.not_allowed",
            f"{request.category.capitalize()} {request.channel} to {country} is not allowed "
            f"by the {region} rules.",
        )

    # 3. Consent: every required purpose, on this channel, granted and not revoked.
    used: list[str] = []
    for needed in purposes:
        relevant = [
            c
            for c in consents
            if c.purpose == needed and c.channel in (request.channel, "*") and c.granted_at <= now
        ]
        live = [c for c in relevant if c.revoked_at is None or c.revoked_at > now]
        if not live:
            inputs["consents_used"] = used
            if relevant:
                revoked = sorted(
                    (c for c in relevant if c.revoked_at is not None),
                    key=lambda c: (c.revoked_at, c.granted_at),
                )
                inputs["consent_revoked"] = [
                    {
                        "id": c.id,
                        "channel": c.channel,
                        "purpose": c.purpose,
                        "granted_at": iso_utc(c.granted_at),
                        "revoked_at": iso_utc(c.revoked_at),
                        "revoked_source": c.revoked_source,
                    }
                    for c in revoked
                    if c.revoked_at is not None
                ]
                # Cite the latest revoke: it is what ended the last grant.
                latest = revoked[-1]
                cited = f"consent {latest.id}" if latest.id else f"the {latest.channel} consent"
                by = f" by {latest.revoked_source}" if latest.revoked_source else ""
                when = iso_utc(latest.revoked_at) if latest.revoked_at else "?"
                return decide(
                    Outcome.DENY,
                    "consent.revoked",
                    f"Consent for {needed!r} on {request.channel} was revoked at {when}{by} "
                    f"({cited}, granted {iso_utc(latest.granted_at)}).",
                )
            return decide(
                Outcome.DENY,
                "consent.missing",
                f"No consent for {needed!r} on {request.channel} is on record.",
            )
        best = max(live, key=lambda c: c.granted_at)
        used.append(best.id or f"{best.channel}:{best.purpose}@{iso_utc(best.granted_at)}")
    inputs["consents_used"] = used

    # 4. Quiet hours, in the recipient's local time.
    if rule.quiet_hours is not None:
        start = rule.quiet_hours.start.strftime("%H:%M")
        end = rule.quiet_hours.end.strftime("%H:%M")
        inputs["quiet_hours"] = {"start": start, "end": end, "exempt": rule.quiet_hours_exempt}
        if not rule.quiet_hours_exempt and rule.quiet_hours.contains(local_now.time()):
            return decide(
                Outcome.DEFER,
                "quiet_hours",
                f"It is {local_now.strftime('%H:%M')} for the recipient ({request.timezone}), "
                f"inside quiet hours {start}-{end}.",
                _quiet_window_end(rule.quiet_hours, local_now),
            )

    # 5. Recipient cooldown on this channel.
    cooldown = rule.cooldown
    contacts = sorted(c.at for c in recent if c.channel in (request.channel, ""))
    window_start = now - timedelta(seconds=cooldown.window_seconds)
    in_window = [t for t in contacts if t > window_start]
    inputs["recent_contacts_in_window"] = len(in_window)
    inputs["cooldown"] = {
        "min_gap_seconds": cooldown.min_gap_seconds,
        "max_per_window": cooldown.max_per_window,
        "window_seconds": cooldown.window_seconds,
    }
    if contacts and cooldown.min_gap_seconds:
        last = contacts[-1]
        inputs["last_contact_at"] = iso_utc(last)
        gap_ends = last + timedelta(seconds=cooldown.min_gap_seconds)
        if gap_ends > now:
            return decide(
                Outcome.DEFER,
                "cooldown.min_gap",
                f"The recipient was contacted on {request.channel} less than "
                f"{cooldown.min_gap_seconds} s ago.",
                gap_ends,
            )
    if cooldown.max_per_window and len(in_window) >= cooldown.max_per_window:
        # The window frees when enough of the oldest contacts slide out of it.
        oldest_to_leave = in_window[len(in_window) - cooldown.max_per_window]
        frees_at = oldest_to_leave + timedelta(seconds=cooldown.window_seconds)
        return decide(
            Outcome.DEFER,
            "cooldown.max_per_window",
            f"The recipient already had {len(in_window)} {request.channel} messages in the "
            f"last {cooldown.window_seconds} s (limit {cooldown.max_per_window}).",
            frees_at,
        )

    return decide(
        Outcome.ALLOW,
        "allow",
        f"{request.category.capitalize()} {request.channel} is allowed by the {region} rules.",
    )
