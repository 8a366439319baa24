"""Sender identities: the policy names a sender alias per region, settings map it to a real one.

An SMS sender is one of three things a Twilio-compatible provider takes: an E.164 number
(`From`), an alphanumeric sender id (`From`, where the destination country allows one) or
a Messaging Service SID (`MG` + 32 hex, sent as `MessagingServiceSid` instead of `From`).
A policy alias such as `herald-us-10dlc` is none of them: it is looked up in the
`HERALD_SMS_SENDERS` map, and an alias the map does not name gets `HERALD_SMS_SENDER`.

An email sender in a policy is normally a real `From` header already; `HERALD_EMAIL_SENDERS`
may replace any policy value by another `From`, and a policy value that is not an address
(an alias) without an entry gets `HERALD_EMAIL_SENDER`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parseaddr
from enum import StrEnum

from domain import channels
from domain.channels import DestinationKind
from domain.destinations import InvalidDestination, normalize_email
from domain.policy import Policy

DEV_SMS_SENDER = "+15005550006"
"""The embedded default: a number the carrier simulator (and Twilio's test credentials) take."""
DEV_EMAIL_SENDER = "Herald <notifications@herald.localhost>"

_E164 = re.compile(r"^\+[1-9][0-9]{7,14}$")
# Twilio: at most 11 of A-Z a-z 0-9 space + - _ &, and not digits only.
_ALPHANUMERIC = re.compile(r"^(?=.*[A-Za-z])[A-Za-z0-9 +\-_&]{1,11}$")
_MESSAGING_SERVICE = re.compile(r"^MG[0-9a-f]{32}$")

NO_ALPHANUMERIC_COUNTRIES = frozenset({"US", "CA", "PR"})
"""Destination countries where carriers refuse alphanumeric sender ids."""


class SenderError(ValueError):
    """A sender setting that no provider would take; the message names the alias."""


class SmsSenderKind(StrEnum):
    """What an SMS sender is: an E.164 number, an alphanumeric id or a Messaging Service."""

    NUMBER = "number"
    ALPHANUMERIC = "alphanumeric"
    MESSAGING_SERVICE = "messaging_service"


@dataclass(frozen=True)
class SmsSender:
    """An SMS sender and its kind."""

    value: str
    kind: SmsSenderKind


def parse_sms_sender(value: str) -> SmsSender:
    """Classify a real SMS sender; raises ValueError saying what it should look like."""
    text = value.strip() if isinstance(value, str) else ""
    if _E164.match(text):
        return SmsSender(text, SmsSenderKind.NUMBER)
    if _MESSAGING_SERVICE.match(text):
        return SmsSender(text, SmsSenderKind.MESSAGING_SERVICE)
    if text.startswith("MG") and len(text) == 34:
        raise ValueError("a Messaging Service SID is MG followed by 32 lowercase hex digits")
    if _ALPHANUMERIC.match(text):
        return SmsSender(text, SmsSenderKind.ALPHANUMERIC)
    raise ValueError(
        "not an E.164 number (+ and 8 to 15 digits), an alphanumeric sender id (1 to 11 of "
        "A-Z a-z 0-9 space + - _ &, with a letter) or a Messaging Service SID (MG + 32 hex)"
    )


def parse_email_sender(value: str) -> str:
    """Check a `From` header value.

    A `From` header value (`addr` or `Name <addr>`); raises ValueError if it has no
    valid address.
    """
    _, address = parseaddr(value if isinstance(value, str) else "")
    try:
        normalize_email(address)
    except InvalidDestination as err:
        raise ValueError(str(err)) from None
    return value.strip()


@dataclass(frozen=True)
class SenderBook:
    """The real sender for each policy alias, validated when built."""

    sms_default: SmsSender
    email_default: str
    sms: Mapping[str, SmsSender] = field(default_factory=dict)
    email: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        *,
        sms_default: str = DEV_SMS_SENDER,
        sms: Mapping[str, str] | None = None,
        email_default: str = DEV_EMAIL_SENDER,
        email: Mapping[str, str] | None = None,
    ) -> SenderBook:
        """Parse every entry; the first bad one raises :class:`SenderError` naming it."""

        def sms_entry(name: str, value: str) -> SmsSender:
            try:
                return parse_sms_sender(value)
            except ValueError as err:
                raise SenderError(f"{name}: {value!r} is {err}") from None

        def email_entry(name: str, value: str) -> str:
            try:
                return parse_email_sender(value)
            except ValueError as err:
                raise SenderError(f"{name}: {value!r} is not a From address ({err})") from None

        return cls(
            sms_default=sms_entry("HERALD_SMS_SENDER", sms_default),
            email_default=email_entry("HERALD_EMAIL_SENDER", email_default),
            sms={
                alias: sms_entry(f"HERALD_SMS_SENDERS alias {alias!r}", value)
                for alias, value in (sms or {}).items()
            },
            email={
                alias: email_entry(f"HERALD_EMAIL_SENDERS alias {alias!r}", value)
                for alias, value in (email or {}).items()
            },
        )

    def sms_for(self, alias: str) -> SmsSender:
        """The real SMS sender of a policy alias (the default one for an unmapped alias)."""
        return self.sms.get(alias, self.sms_default)

    def email_for(self, policy_sender: str) -> str:
        """The `From` of a policy email sender: mapped, else itself when it is an address."""
        if policy_sender in self.email:
            return self.email[policy_sender]
        try:
            return parse_email_sender(policy_sender)
        except ValueError:
            return self.email_default

    def resolve(self, channel: str, policy_sender: str) -> str:
        """The real sender for a policy's `sender` on `channel`.

        Chosen by the kind of destination the channel sends to; raises
        channels.UnknownChannel for a channel Herald does not know.
        """
        kind = channels.get(channel).destination
        resolvers: dict[DestinationKind, Callable[[str], str]] = {
            DestinationKind.PHONE: lambda alias: self.sms_for(alias).value,
            DestinationKind.EMAIL: self.email_for,
        }
        return resolvers[kind](policy_sender)

    def check(self, policy: Policy) -> None:
        """Check that every SMS alias of a policy resolves to a sender its countries take.

        Every SMS alias of `policy` resolves to a sender its countries take: an
        alphanumeric id is refused where a rule may send to the US, Canada or Puerto Rico.
        """
        for (region, channel, category), rule in sorted(policy.rules.items()):
            if channels.get(channel).destination is not DestinationKind.PHONE:
                continue
            sender = self.sms_for(rule.sender)
            if sender.kind != SmsSenderKind.ALPHANUMERIC:
                continue
            countries = (
                NO_ALPHANUMERIC_COUNTRIES
                if rule.allowed_countries is None
                else rule.allowed_countries & NO_ALPHANUMERIC_COUNTRIES
            )
            if countries:
                source = (
                    f"HERALD_SMS_SENDERS alias {rule.sender!r}"
                    if rule.sender in self.sms
                    else f"alias {rule.sender!r} (unmapped, so HERALD_SMS_SENDER)"
                )
                raise SenderError(
                    f"{source}: alphanumeric sender id {sender.value!r} cannot send to "
                    f"{', '.join(sorted(countries))} (policy {policy.version}, region {region}, "
                    f"{category} {channel}); map it to a number or a Messaging Service SID"
                )
