"""Validate a NotificationRequest at the edge and turn it into ledger fields.

Errors name the field and the problem; PII is encrypted here, before anything is stored,
and never appears in an error message.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy.orm import Session

from domain import channels, destinations, key_privacy, keys, policy, template_variables, templates
from domain.channels import DestinationKind
from domain.requests import TIME_HORIZON, Category, NotificationRequest, PlanMode
from ledger import repository as repo
from ledger.crypto import FieldCipher
from ledger.errors import InvalidRequest, NotFound
from ledger.models import Artifact
from ledger.templates import active_templates

MAX_VARIABLES_BYTES = 16_384


def _country_hint(request: NotificationRequest) -> str | None:
    """The intent's country as far as the request says it: the phone's, else `country`."""
    if request.phone:
        try:
            return destinations.normalize_phone(request.phone).country
        except destinations.InvalidDestination:
            pass  # refused below, with its own message
    return request.country


class _Problems:
    """What is wrong with a request, gathered so one refusal names all of it."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str]] = []

    def add(self, field: str, problem: str) -> None:
        self.found.append((field, problem))

    def raise_any(self) -> None:
        if self.found:
            raise InvalidRequest(*self.found[0], *self.found[1:])


def validate(
    session: Session,
    request: NotificationRequest,
    cipher: FieldCipher,
    *,
    now: datetime,
    retention_days: int,
    namespace: str = keys.DEFAULT_NAMESPACE,
) -> repo.IntentFields:
    """Check a request and turn it into ledger fields, PII encrypted; raise InvalidRequest.

    `namespace` is the key's (the recording principal's, or the starter client's): the
    key and its namespace together must fit an identity (domain.keys.identity), and the
    namespace holds no contact data either, since both enter the workflow id.
    """
    problems = _Problems()
    try:
        # Contact data first: the format check would name the part it refuses.
        key_privacy.refuse_contact_data(request.business_key, country=_country_hint(request))
        keys.validate_business_key(request.business_key)
        key_privacy.refuse_contact_data_in_namespace(namespace)
        keys.identity(namespace, request.business_key)
    except keys.InvalidKey as err:
        problems.add("business_key", str(err))
    category = mode = None
    try:
        category = Category(request.category)
    except ValueError:
        problems.add("category", f"must be one of {', '.join(c.value for c in Category)}")
    try:
        mode = PlanMode(request.mode)
    except ValueError:
        problems.add("mode", f"must be one of {', '.join(m.value for m in PlanMode)}")
    if not request.recipient_ref or len(request.recipient_ref) > 120:
        problems.add("recipient_ref", "required, at most 120 characters")
    plan = request.channel_plan()
    if not plan:
        problems.add("channels", "give a phone number, an email address, or both")
    for name in plan:
        if name not in channels.REGISTRY:
            problems.add("channels", f"unknown channel {name!r}")
    for name in dict.fromkeys(c for c in plan if plan.count(c) > 1):
        problems.add("channels", f"{name} is named more than once")
    plan = tuple(dict.fromkeys(c for c in plan if c in channels.REGISTRY))
    kinds = {channels.get(c).destination for c in plan}
    found: dict[DestinationKind, destinations.PhoneDestination | destinations.EmailDestination]
    found = {}
    for name in plan:
        channel = channels.get(name)
        raw = request.destination_for(name)
        if not raw:
            problems.add(channel.request_field, f"required for the {name} channel")
        elif channel.destination not in found:
            try:
                found[channel.destination] = destinations.normalize(channel.destination, raw)
            except destinations.InvalidDestination as err:
                problems.add(channel.request_field, str(err))
    phone = found.get(DestinationKind.PHONE)
    email = found.get(DestinationKind.EMAIL)
    assert phone is None or isinstance(phone, destinations.PhoneDestination)
    assert email is None or isinstance(email, destinations.EmailDestination)
    if request.country and request.country.upper() not in destinations.COUNTRIES:
        problems.add("country", "not an ISO 3166-1 alpha-2 country code (e.g. GB)")
    country = (phone.country if phone else (request.country or "")).upper()
    if (
        not country
        and category is not None
        and not (DestinationKind.PHONE in kinds and phone is None)
    ):
        needing = _rule_needing_country(session, plan, category)
        if needing:
            problems.add(
                "country",
                f"required by the active policy: {needing} lists the countries it allows, "
                "so an intent with no country would be denied (rule country.unknown); give "
                "the recipient's country",
            )
    tz = request.timezone or (phone.timezone if phone else "UTC")
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        # The zone is named by its field, never repeated: a refusal echoes no input.
        problems.add("timezone", "not a time zone in the IANA database (e.g. Europe/London)")
    chosen = _check_templates(session, request, plan, problems)
    variables_json = json.dumps(request.variables, sort_keys=True, default=str)
    if len(variables_json.encode()) > MAX_VARIABLES_BYTES:
        problems.add("variables", f"larger than {MAX_VARIABLES_BYTES} bytes")
    if request.artifact_sha256:
        refusing = [c for c in plan if not channels.get(c).takes_attachments]
        if refusing:
            # An attachment never enters such a channel's path, not even as a fallback.
            taking = [c.name for c in channels.REGISTRY.values() if c.takes_attachments]
            problems.add(
                "artifact_sha256",
                f"attachments go by {' or '.join(taking)} only; drop {', '.join(refusing)} "
                "from the channels",
            )
        elif session.get(Artifact, request.artifact_sha256) is None:
            problems.add("artifact_sha256", "no artifact registered with that hash")
    for name, value in (("send_at", request.send_at), ("expires_at", request.expires_at)):
        if value is not None and value.tzinfo is None:
            problems.add(name, "must carry a timezone")
        elif value is not None and not now - TIME_HORIZON <= value <= now + TIME_HORIZON:
            problems.add(name, f"must be within {TIME_HORIZON.days} days of now, either way")
    if (
        request.send_at
        and request.expires_at
        and request.send_at.tzinfo is not None
        and request.expires_at.tzinfo is not None
        and request.expires_at <= request.send_at
    ):
        problems.add("expires_at", "must be after send_at")
    problems.raise_any()
    assert category is not None and mode is not None

    # The intent id is not known before insert, so destination/variable ciphertexts are
    # bound to the business key (immutable and unique) as associated data.
    context = request.business_key
    return repo.IntentFields(
        business_key=request.business_key,
        event_type=keys.event_type_of(request.business_key),
        category=category.value,
        region=destinations.region_of(country),
        country=country,
        timezone=tz,
        recipient_ref=request.recipient_ref,
        channel_plan={"mode": mode.value, "channels": list(plan)},
        template_key=request.template_key,
        template_version=request.template_version,
        template_pins={channel: templates.pin_of(tv) for channel, tv in chosen.items()},
        locale=request.locale,
        sms_destination_ct=cipher.encrypt(phone.e164, context=context) if phone else None,
        sms_destination_hmac=cipher.lookup_hmac(phone.e164) if phone else None,
        email_destination_ct=cipher.encrypt(email.address, context=context) if email else None,
        email_destination_hmac=cipher.lookup_hmac(email.address) if email else None,
        email_search_hmac=(
            cipher.lookup_hmac(destinations.search_form(email.address)) if email else None
        ),
        variables_ct=cipher.encrypt(variables_json, context=context) if request.variables else None,
        variables_sha256=hashlib.sha256(variables_json.encode()).hexdigest(),
        artifact_sha256=request.artifact_sha256,
        send_at=request.send_at,
        expires_at=request.expires_at,
        # Retention counts from when the message can go out, not from when it was recorded.
        purge_after=max(now, request.send_at or now) + timedelta(days=retention_days),
        namespace=namespace,
    )


_POLICIES: dict[str, policy.Policy] = {}
"""Parsed policy versions (immutable, so a version is parsed once per process)."""


def _rule_needing_country(
    session: Session, plan: tuple[str, ...], category: Category
) -> str | None:
    """Where the active policy needs the country of an intent that has none, or None.

    An intent with no country (an email address alone, no `country`) is in the `default`
    region; a channel whose rule there allows only listed countries would deny it
    (`country.unknown`) at every attempt, so intake refuses it at once, naming that
    rule's `allowed_countries` (`regions.default.rules.email.allowed_countries`). Under a
    policy that allows every country there, no country is needed.
    """
    try:
        version = repo.active_policy_version(session)
    except NotFound:
        return None  # no policy yet: nothing can need a country (nor send)
    if version not in _POLICIES:
        _POLICIES[version] = policy.load_policy(repo.policy_document(session, version))
    active = _POLICIES[version]
    region = destinations.region_of("")
    for channel in plan:
        rule = active.rule_for(region, channel, category.value)
        if rule.allowed_countries is not None:
            return rule.allowed_countries_from or f"rule for {region} {channel} {category.value}"
    return None


def _check_templates(
    session: Session, request: NotificationRequest, plan: tuple[str, ...], problems: _Problems
) -> dict[str, templates.TemplateVersion]:
    """Check that each channel's template exists and renders; the version chosen for each.

    Each channel's template exists and renders with the variables given; every missing
    variable of every channel is named in one problem. The versions chosen are the ones
    the intent pins: every attempt of it renders with them (docs/domain.md, "Templates").
    """
    available = active_templates(session, pinned=request.template_version, key=request.template_key)
    missing: list[str] = []
    chosen_for: dict[str, templates.TemplateVersion] = {}
    refusals: list[str] = []
    for channel in plan:
        try:
            chosen = templates.select_template(
                available,
                request.template_key,
                channel,
                request.locale,
                version=request.template_version,
            )
        except templates.TemplateError as err:
            problems.add("template_key", str(err))
            continue
        chosen_for[channel] = chosen
        if chosen.schema is not None:
            # The version declares its variables: each problem names the variable and
            # the shape it must have (domain.template_variables).
            refused = [
                r
                for r in template_variables.refusals(chosen.schema, request.variables)
                if r not in refusals
            ]
            refusals += refused
            if refused:
                continue
        else:
            missing += [
                n
                for n in templates.missing_variables(chosen, request.variables)
                if n not in missing
            ]
        if missing or refusals:
            continue
        try:
            # Rendered once here so anything else wrong is refused at the edge, not later.
            templates.render(chosen, request.variables)
        except templates.TemplateError as err:
            problems.add("variables", str(err))
    if refusals:
        problems.add("variables", f"template {request.template_key!r}: {'; '.join(refusals)}")
    if missing:
        problems.add(
            "variables",
            f"template {request.template_key!r} needs {', '.join(missing)}, missing from the "
            "variables",
        )
    return chosen_for
