"""Destinations: phone numbers and email addresses, normalized and checked offline.

Error messages never echo the raw number or address: they reach logs and operator
screens, and a destination is personal data. They say what is wrong (the length, the
country, the number type) instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import phonenumbers
from phonenumbers import PhoneNumberType
from phonenumbers import timezone as phone_timezone

from domain import channels
from domain.channels import DestinationKind


class InvalidDestination(ValueError):
    """A destination Herald cannot send to: invalid, a landline, unsupported, malformed."""


@dataclass(frozen=True)
class PhoneDestination:
    """A phone number normalized to E.164, with what the policy needs to know about it."""

    e164: str
    """The number in E.164 form, e.g. ``+33612345678``."""
    country: str
    """ISO 3166 alpha-2 region code of the number, e.g. ``"US"``, ``"FR"``."""
    number_type: str
    """``"mobile"``, ``"fixed_line_or_mobile"`` (US/CA numbers), ``"voip"``, ..."""
    timezone: str
    """IANA zone of the number (first one phonenumbers gives), ``"UTC"`` when unknown."""


@dataclass(frozen=True)
class EmailDestination:
    """An email address with a lowercased domain; the local part keeps its case (RFC 5321)."""

    address: str
    """``local@domain`` with the domain lowercased (and IDNA-encoded when not ASCII)."""
    domain: str
    """The lowercased domain, used for per-domain throttling and suppression lookups."""


_NUMBER_TYPE_NAMES: dict[int, str] = {
    PhoneNumberType.FIXED_LINE: "fixed_line",
    PhoneNumberType.MOBILE: "mobile",
    PhoneNumberType.FIXED_LINE_OR_MOBILE: "fixed_line_or_mobile",
    PhoneNumberType.TOLL_FREE: "toll_free",
    PhoneNumberType.PREMIUM_RATE: "premium_rate",
    PhoneNumberType.SHARED_COST: "shared_cost",
    PhoneNumberType.VOIP: "voip",
    PhoneNumberType.PERSONAL_NUMBER: "personal_number",
    PhoneNumberType.PAGER: "pager",
    PhoneNumberType.UAN: "uan",
    PhoneNumberType.VOICEMAIL: "voicemail",
    PhoneNumberType.UNKNOWN: "unknown",
}

# Types that can receive an SMS. US/CA numbers cannot be told apart (mobile and fixed
# lines share ranges), so "fixed_line_or_mobile" is accepted and the carrier's 30006
# (landline) error catches the rest. VoIP numbers commonly take SMS.
SMS_CAPABLE_TYPES: frozenset[str] = frozenset(
    {"mobile", "fixed_line_or_mobile", "voip", "personal_number"}
)


def _digit_count(raw: str) -> int:
    return sum(ch.isdigit() for ch in raw)


_PARSE_ERRORS = {
    phonenumbers.NumberParseException.INVALID_COUNTRY_CODE: "no such country calling code",
    phonenumbers.NumberParseException.NOT_A_NUMBER: "not a phone number",
    phonenumbers.NumberParseException.TOO_SHORT_AFTER_IDD: "too short after the "
    "international prefix",
    phonenumbers.NumberParseException.TOO_SHORT_NSN: "too short",
    phonenumbers.NumberParseException.TOO_LONG: "too long",
}
"""The parser's error types in words (its own message is an enum number to a client)."""


def normalize_phone(raw: str, default_region: str | None = None) -> PhoneDestination:
    """Normalize a phone number to E.164 and check it can receive an SMS.

    Args:
        raw: The number as a person or an app typed it (``"+1 415 555 2671"``,
            ``"06 12 34 56 78"``).
        default_region: ISO alpha-2 region used when ``raw`` has no ``+`` prefix.

    Returns:
        The normalized destination, with its country, number type and time zone.

    Raises:
        InvalidDestination: The number does not parse, is not a valid number, is a
            landline or another type that cannot take SMS, or belongs to no country.
    """
    region = default_region.upper() if default_region else None
    try:
        number = phonenumbers.parse(raw, region)
    except phonenumbers.NumberParseException as exc:
        # The library's message does not contain the number; its error type is useful.
        why = _PARSE_ERRORS.get(exc.error_type, "not a phone number")
        raise InvalidDestination(
            f"invalid phone number: {why} ({_digit_count(raw)} digits, "
            f"default region {region or 'none'})"
        ) from None
    country = phonenumbers.region_code_for_number(number)
    if not phonenumbers.is_valid_number(number):
        raise InvalidDestination(
            f"invalid phone number: not a valid number for country code "
            f"+{number.country_code} ({_digit_count(raw)} digits)"
        )
    if not country or country == "001":
        # Non-geographic numbers (+800, +882, ...) have no country for policy to check.
        raise InvalidDestination(
            f"unsupported country: +{number.country_code} numbers belong to no country"
        )
    number_type = _NUMBER_TYPE_NAMES.get(phonenumbers.number_type(number), "unknown")
    if number_type == "fixed_line":
        raise InvalidDestination(f"landline number cannot receive SMS (country {country})")
    if number_type not in SMS_CAPABLE_TYPES:
        raise InvalidDestination(
            f"number type {number_type} cannot receive SMS (country {country})"
        )
    zones = phone_timezone.time_zones_for_number(number)
    zone = zones[0] if zones and zones[0] != "Etc/Unknown" else "UTC"
    return PhoneDestination(
        e164=phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164),
        country=country,
        number_type=number_type,
        timezone=zone,
    )


# RFC 5322 dot-atom local part (no quoted strings, no comments: nobody needs them and
# every relay handles dot-atoms) and an RFC 1035 host name with at least one dot.
_LOCAL = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*$")
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_TLD = re.compile(r"^(?:[a-z]{2,63}|xn--[a-z0-9-]{1,59})$")


def normalize_email(raw: str) -> EmailDestination:
    """Check an email address offline (syntax only) and lowercase its domain.

    Args:
        raw: The address, optionally with surrounding whitespace.

    Returns:
        The normalized address and its domain.

    Raises:
        InvalidDestination: The address is malformed; the message says which part.
    """
    text = raw.strip()
    if text.count("@") != 1:
        raise InvalidDestination("bad email address: it must contain exactly one '@'")
    local, domain = text.split("@")
    if not local or len(local) > 64:
        raise InvalidDestination("bad email address: local part must be 1 to 64 characters")
    if not _LOCAL.match(local):
        raise InvalidDestination("bad email address: local part has characters not allowed")
    try:
        # A Unicode domain is valid; relays want its ASCII (punycode) form.
        domain = domain.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise InvalidDestination("bad email address: domain is not a valid host name") from None
    labels = domain.split(".")
    if len(labels) < 2 or not all(_LABEL.match(label) for label in labels):
        raise InvalidDestination("bad email address: domain is not a valid host name")
    if not _TLD.match(labels[-1]):
        raise InvalidDestination("bad email address: domain has no valid top-level label")
    address = f"{local}@{domain}"
    if len(address) > 254:
        raise InvalidDestination("bad email address: longer than 254 characters")
    return EmailDestination(address=address, domain=domain)


COUNTRIES: frozenset[str] = frozenset(phonenumbers.SUPPORTED_REGIONS)
"""Every country an intent may name: the ISO 3166-1 alpha-2 codes (in capitals) that
phonenumbers knows the numbering plan of."""

EU_MEMBER_STATES: frozenset[str] = frozenset(
    {
        "AT", "BE", "BG", "HR", "CY", "CZ", "DK", "EE", "FI", "FR", "DE", "GR", "HU", "IE",
        "IT", "LV", "LT", "LU", "MT", "NL", "PL", "PT", "RO", "SK", "SI", "ES", "SE",
    }
)  # fmt: skip


def region_of(country: str) -> str:
    """The policy region of a destination country.

    Args:
        country: ISO alpha-2 code, any case; ``""`` when unknown.

    Returns:
        ``"US"``, ``"EU"`` (the 27 member states), ``"ZA"`` or ``"default"``.
    """
    code = country.strip().upper()
    if code in ("US", "ZA"):
        return code
    if code in EU_MEMBER_STATES:
        return "EU"
    return "default"


def phone_e164(raw: str, default_region: str | None = None) -> str:
    """Normalize a phone number to E.164 for an opt-out or a search.

    A phone number in E.164. Looser than an SMS destination: an opt-out is honoured even
    for a number Herald would not text (a landline that texted STOP through a gateway).
    With `default_region` (ISO alpha-2), a number in national form (`07400 000001`) is read
    as that country's.
    """
    region = default_region.upper() if default_region else None
    try:
        return normalize_phone(raw, region).e164
    except InvalidDestination:
        try:
            number = phonenumbers.parse(raw, region)
        except phonenumbers.NumberParseException as err:
            raise ValueError("not a phone number (E.164, with its + prefix)") from err
        if not phonenumbers.is_possible_number(number):
            raise ValueError("not a possible phone number") from None
        return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)


def normalize(kind: DestinationKind, raw: str) -> PhoneDestination | EmailDestination:
    """Normalize a destination a channel sends to (its kind from domain.channels).

    Raises:
        InvalidDestination: as :func:`normalize_phone` / :func:`normalize_email` say.
    """
    return NORMALIZERS[kind](raw)


def _lookup_email(raw: str) -> str:
    return normalize_email(raw).address


NORMALIZERS: Mapping[DestinationKind, Callable[[str], PhoneDestination | EmailDestination]] = {
    DestinationKind.PHONE: normalize_phone,
    DestinationKind.EMAIL: normalize_email,
}
"""How a destination of each kind is normalized for sending."""

LOOKUP_FORMS: Mapping[DestinationKind, Callable[[str], str]] = {
    DestinationKind.PHONE: phone_e164,
    DestinationKind.EMAIL: _lookup_email,
}
"""How a destination of each kind is written before its HMAC is taken (looser than for
sending: an opt-out is honoured for any possible number)."""


def normalized_destination(raw: str, channel: str | None) -> str:
    """The normalized form of a destination that the ledger's HMAC is taken over.

    E.164 for a phone, the normalized address for an email. For `*` (or no channel), an
    `@` says which it is.

    Raises:
        ValueError: the destination is malformed, or channels.UnknownChannel (a
            ValueError) for a channel Herald does not know.
    """
    kind = channels.destination_kind(raw, channel)
    try:
        return LOOKUP_FORMS[kind](raw)
    except InvalidDestination as err:
        # The domain's messages describe the problem without repeating the address.
        raise ValueError(str(err)) from err


def search_form(address: str) -> str:
    """What the console's search-only email lookup is taken over.

    The normalized address case-folded whole (`Ann.Lee@Example.com` and
    `ann.lee@example.com` alike), with a prefix so it can never equal the HMAC of a
    destination's normal form. Consent and suppressions keep matching on the normal form,
    which keeps the local part's case.
    """
    return "search:" + address.casefold()


def masked(destination: str) -> str:
    """A destination masked for support and auditors.

    Enough to confirm with the person ("ends in 42, at example.com"), not enough to
    contact them (domain.channels.mask).

    `+447400000142` -> `+44********42`; `ann.lee@example.com` -> `a***@example.com`.
    """
    return channels.mask(destination)
