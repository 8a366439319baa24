"""Providers as data: aliases for configured accounts, kinds for their adapters.

An alias names one configured provider account; a kind says which adapter speaks to it
and for which channel.

Settings hold each provider's credentials under an alias (``HERALD_PROVIDERS``; the
built-in aliases ``twilio``, ``telnyx`` and ``smtp`` come from the ``HERALD_SMS_*``,
``HERALD_TELNYX_*`` and ``HERALD_SMTP_*`` settings). The policy names, per channel and
region, an ordered list of aliases (``[providers]``, ``[regions.<R>.providers]``; a
channel it does not name gets its registry defaults, domain.channels). Each attempt
records the alias that took it.

The first alias of the list takes the attempt; the later ones take over on failover
(domain.failover), each try on its provider's own task queue; all are checked at
start-up, so a policy cannot name a provider the settings lack.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from domain import channels


class ProviderError(ValueError):
    """A provider route no worker could follow; the message names the alias."""


@dataclass(frozen=True)
class ProviderKind:
    """An adapter Herald ships, and what it can do."""

    name: str
    """The kind as settings write it (``"kind": "twilio"``)."""
    channel: str
    """The channel its adapter sends on."""
    lookup: bool
    """Whether the provider can be asked for a message it may have taken (reconciling)."""


KINDS: Mapping[str, ProviderKind] = {
    kind.name: kind
    for kind in (
        ProviderKind("twilio", channels.SMS.name, lookup=True),
        # Telnyx has no lookup by destination: a lost create cannot be placed.
        ProviderKind("telnyx", channels.SMS.name, lookup=False),
        ProviderKind("smtp", channels.EMAIL.name, lookup=False),
        ProviderKind("sendgrid", channels.EMAIL.name, lookup=False),
    )
}
"""Every adapter by kind: a Twilio-compatible REST API (transports.twilio), Telnyx
Messaging v2 (transports.telnyx), SMTP (transports.smtp) and a SendGrid-compatible HTTP
API with a signed Event Webhook (transports.sendgrid; its Email Activity lookup is a paid,
rate-limited add-on, so no lookup)."""


def kind(name: str) -> ProviderKind:
    """The provider kind called ``name``; raises :class:`ProviderError` for another."""
    try:
        return KINDS[name]
    except KeyError:
        raise ProviderError(f"unknown provider kind {name!r} (one of {', '.join(KINDS)})") from None


def check_routes(
    routes: Mapping[tuple[str, str], tuple[str, ...]], configured: Mapping[str, str]
) -> None:
    """Every alias a policy routes to is configured, with an adapter for that channel.

    Args:
        routes: ``(region, channel) -> aliases`` (domain.policy.Policy.providers).
        configured: ``alias -> kind`` from the settings.

    Raises:
        ProviderError: the first alias that is not configured, or whose adapter sends on
            another channel; the message names the alias, the region and the channel.
    """
    for (region, channel), aliases in sorted(routes.items()):
        for alias in aliases:
            if alias not in configured:
                raise ProviderError(
                    f"provider alias {alias!r} (region {region}, {channel}) is not configured: "
                    f"set it in HERALD_PROVIDERS (configured: {', '.join(sorted(configured))})"
                )
            adapter = kind(configured[alias])
            if adapter.channel != channel:
                raise ProviderError(
                    f"provider alias {alias!r} is a {adapter.name} account, which sends "
                    f"{adapter.channel}, not {channel} (region {region})"
                )


def provider_task_queue(channel: channels.Channel, base: str, alias: str) -> str:
    """The task queue of one provider's send and poll activities (``herald-sms-telnyx``).

    On a channel that fails over, each provider has its own rate budget, enforced by the
    Temporal server for the whole fleet (settings: ``HERALD_PROVIDER_MAX_PER_SECOND``).
    """
    return f"{channel.task_queue(base)}-{alias}"
