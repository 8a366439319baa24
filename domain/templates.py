"""Message templates as versioned data: selection, rendering and SMS segment counting.

Templates are rendered in Jinja2's sandbox with strict undefined variables: a template
author cannot reach Python internals, and a missing variable fails the render loudly
instead of sending "Your seat in  is ready".
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jinja2 import (
    ChainableUndefined,
    StrictUndefined,
    Template,
    TemplateSyntaxError,
    UndefinedError,
)
from jinja2 import meta as jinja_meta
from jinja2.sandbox import SandboxedEnvironment, SecurityError

from domain import channels
from domain.keys import content_sha256

FALLBACK_LOCALE = "en"
CHANNELS = channels.NAMES


class TemplateError(ValueError):
    """An unknown template, a missing variable, a bad catalog or a message too long."""


@dataclass(frozen=True)
class TemplateVersion:
    """One version of one template, for one channel and one locale."""

    key: str
    """E.g. ``"class-opening"``; usually the business key's event type."""
    version: int
    """Increases by one per change; an intent may pin a version (e.g. for a rollback)."""
    channel: str
    locale: str
    """BCP 47 tag, e.g. ``"en"``, ``"fr"``, ``"fr-CA"``."""
    body: str
    """Jinja2 source of the body (plain text)."""
    subject: str | None = None
    """Jinja2 source of the subject, for email."""


@dataclass(frozen=True)
class Rendered:
    """A rendered message, with what the ledger and the transport need to know about it."""

    body: str
    subject: str | None
    sha256: str
    """SHA-256 of the final body (footer included): the content hash reconciliation uses."""
    encoding: str
    """``"GSM-7"`` or ``"UCS-2"`` for SMS; ``"UTF-8"`` for email."""
    segments: int
    """SMS segments billed; 0 for email."""
    template_key: str
    template_version: int


# Autoescape stays off: every body is text/plain (SMS, plain-text email), and HTML
# escaping would turn "Tom & Jerry" into "Tom &amp; Jerry" on a phone screen.
class _NotPrintable(TypeError):
    """A value a message must not print as it is: null, a list or an object."""


def _printable(value: object) -> object:
    """Jinja's `finalize`: every printed value is text, a number or a boolean.

    A null, list or object would reach the person as `None`, `[1, 2]` or `{'a': 1}`. A
    template that wants one uses a filter (`{{ items | join(", ") }}`, `| default("")`).
    """
    if value is None or isinstance(value, list | tuple | dict | set):
        kind = "null" if value is None else "a list" if not isinstance(value, dict) else "an object"
        raise _NotPrintable(f"a printed variable is {kind}, not text or a number")
    return value


_ENV = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, finalize=_printable)


def _locale_chain(locale: str) -> list[str]:
    """``fr-CA`` -> ``[fr-ca, fr, en]``, lowercased, without duplicates."""
    tag = locale.replace("_", "-").strip().lower()
    chain: list[str] = []
    parts = tag.split("-") if tag else []
    for end in range(len(parts), 0, -1):
        chain.append("-".join(parts[:end]))
    chain.append(FALLBACK_LOCALE)
    return list(dict.fromkeys(chain))


def select_template(
    versions: Sequence[TemplateVersion],
    key: str,
    channel: str,
    locale: str,
    version: int | None = None,
) -> TemplateVersion:
    """Pick the template to render.

    The locale falls back from the most specific tag to English (``fr-CA`` -> ``fr`` ->
    ``en``); within the first locale that has one, the latest version is taken, unless
    ``version`` pins one (then the first locale in the chain that has that version).

    Raises:
        TemplateError: No such template for the channel, or not the pinned version.
    """
    candidates = [v for v in versions if v.key == key and v.channel == channel]
    if not candidates:
        raise TemplateError(f"unknown template {key!r} for channel {channel}")
    for tag in _locale_chain(locale):
        in_locale = [v for v in candidates if v.locale.replace("_", "-").lower() == tag]
        if version is not None:
            in_locale = [v for v in in_locale if v.version == version]
        if in_locale:
            return max(in_locale, key=lambda v: v.version)
    if version is not None:
        raise TemplateError(f"template {key!r} version {version} not found for channel {channel}")
    raise TemplateError(
        f"template {key!r} for channel {channel} has no locale in {_locale_chain(locale)}"
    )


def pin_of(template: TemplateVersion) -> dict[str, object]:
    """What intake records of the version it chose for one channel (`intent.template_pins`).

    The locale is the one the chain landed on (``fr-CA`` may pin ``fr``), so a later
    attempt finds the same row even after another locale gains a version.
    """
    return {"locale": template.locale, "version": template.version}


def attempt_choice(
    pins: Mapping[str, Mapping[str, object]] | None,
    channel: str,
    locale: str,
    version: int | None,
) -> tuple[str, int | None]:
    """The (locale, version) an attempt on `channel` renders with.

    The pin intake recorded for the channel when there is one: every attempt of an intent
    (first, fallback, resend) then sends the text of the version active when it was
    recorded, whatever was activated or rolled back since. An intent recorded before pins
    (or a channel without one) keeps the older rule: the intent's locale and its named
    version, or the version active at the attempt when it names none.
    """
    pin = (pins or {}).get(channel)
    if pin is None:
        return locale, version
    pinned_locale, pinned_version = pin.get("locale"), pin.get("version")
    if not isinstance(pinned_locale, str) or not isinstance(pinned_version, int):
        raise TemplateError(f"the intent's template pin for {channel} is malformed")
    return pinned_locale, pinned_version


# --------------------------------------------------------------------------- SMS encoding

# GSM 03.38 basic character set (the escape 0x1B itself is not a printable character).
GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
# The extension table: each of these costs an escape plus the character, two septets.
GSM7_EXTENSION = frozenset("^{}\\[~]|€\f")


def sms_encoding_and_segments(text: str) -> tuple[str, int]:
    """The encoding an SMS needs and how many segments it takes.

    GSM-7 when every character is in the basic or extension table (extension characters
    count two septets): 160 septets fit one segment, 153 per segment when concatenated.
    Otherwise UCS-2, counted in UTF-16 code units (an emoji is two): 70 in one segment,
    67 per segment when concatenated. An escape pair or a surrogate pair is never split
    across two segments, as handsets and providers do.

    Returns:
        ``("GSM-7" | "UCS-2", segments)``; an empty text is 0 segments.
    """
    if all(ch in GSM7_BASIC or ch in GSM7_EXTENSION for ch in text):
        encoding, single, multi = "GSM-7", 160, 153
        costs = [2 if ch in GSM7_EXTENSION else 1 for ch in text]
    else:
        encoding, single, multi = "UCS-2", 70, 67
        costs = [2 if ord(ch) > 0xFFFF else 1 for ch in text]
    total = sum(costs)
    if total == 0:
        return encoding, 0
    if total <= single:
        return encoding, 1
    segments, used = 1, 0
    for cost in costs:
        if used + cost > multi:
            segments, used = segments + 1, cost
        else:
            used += cost
    return encoding, segments


# --------------------------------------------------------------------------- rendering


@functools.lru_cache(maxsize=512)
def _compiled(source: str) -> Template:
    """Compile a template body once: a body is immutable text, every version keeps its own.

    Jinja's own cache only covers loader-based templates, not `from_string`.
    """
    return _ENV.from_string(source)


def _render_source(source: str, variables: Mapping[str, object], where: str) -> str:
    # StrictUndefined fails on use, not on mention: `{{ x | default("") }}` and a
    # variable in a branch not taken stay legal, anything printed must be present.
    try:
        template = _compiled(source)
    except TemplateSyntaxError as exc:
        raise TemplateError(f"{where}: syntax error on line {exc.lineno}: {exc.message}") from None
    try:
        return template.render(**variables)
    except UndefinedError as exc:
        # "'first_name' is undefined", or "... has no attribute 'total'" for {{ order.total }}.
        raise TemplateError(f"{where}: missing variable: {exc.message}") from None
    except SecurityError as exc:
        raise TemplateError(f"{where}: unsafe template operation: {exc}") from None
    except _NotPrintable as exc:
        raise TemplateError(f"{where}: {exc}") from None
    except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as exc:
        # A variable of another shape than the template uses (a number where it loops, a
        # text where it does arithmetic). The exception's text may quote a value: not
        # repeated, only its kind.
        raise TemplateError(
            f"{where}: a variable does not have the type the template uses it as "
            f"({type(exc).__name__})"
        ) from None


_UNDEFINED = re.compile(r"'([^']+)' is undefined")


def _sources(template: TemplateVersion) -> list[str]:
    return [source for source in (template.body, template.subject) if source is not None]


def variables_of(template: TemplateVersion) -> list[str]:
    """Every variable the template mentions, sorted.

    Every variable the template mentions (body and subject), sorted; some may be
    optional (`{{ x | default("") }}`, a branch): see `missing_variables`.
    """
    names: set[str] = set()
    for source in _sources(template):
        try:
            names |= jinja_meta.find_undeclared_variables(_ENV.parse(source))
        except TemplateSyntaxError:
            continue  # `render` says what is wrong with it
    return sorted(names)


def missing_variables(template: TemplateVersion, variables: Mapping[str, object]) -> list[str]:
    """The variables the template needs that `variables` lacks.

    All of them, in the order rendering meets them; `missing_variables(t, {})` is what `t`
    requires.

    Rendered again with a stand-in for each missing name found (StrictUndefined stops at
    the first), at most once per variable the template mentions.
    """
    missing: list[str] = []
    for source in _sources(template):
        try:
            compiled = _compiled(source)
        except TemplateSyntaxError:
            continue
        given: dict[str, object] = dict(variables)
        for _ in range(len(variables_of(template)) + 1):
            try:
                compiled.render(**given)
                break
            except UndefinedError as exc:
                found = _UNDEFINED.fullmatch(exc.message or "")
                if found is None or found[1] in given:
                    break  # an attribute of a value given, or a stand-in misused
                given[found[1]] = ChainableUndefined(name=found[1])
                if found[1] not in missing:
                    missing.append(found[1])
            except Exception:  # noqa: BLE001 - `render` reports anything else
                break
    return missing


def render(
    template: TemplateVersion,
    variables: Mapping[str, object],
    *,
    footer: str | None = None,
    max_sms_segments: int = 10,
) -> Rendered:
    """Render one template with its variables and the policy's legal footer.

    Args:
        template: The selected version.
        variables: Values for the template; every variable it uses must be present.
        footer: Appended on a line of its own (e.g. ``"Reply STOP to opt out."``).
        max_sms_segments: Longest SMS accepted, in segments.

    Returns:
        The body, subject, content hash, encoding and segment count.

    Raises:
        TemplateError: A variable is missing (named in the message), the template is
            malformed or unsafe, the body is empty, the subject has a line break, or the
            SMS is longer than ``max_sms_segments``.
    """
    where = f"template {template.key!r} v{template.version} ({template.channel}/{template.locale})"
    body = _render_source(template.body, variables, where).strip()
    if not body:
        raise TemplateError(f"{where}: rendered body is empty")
    if footer:
        body = f"{body}\n{footer.strip()}"
    subject = None
    if template.subject is not None:
        subject = _render_source(template.subject, variables, f"{where} subject").strip()
        if "\r" in subject or "\n" in subject:
            # A line break in a header is how header injection starts.
            raise TemplateError(f"{where}: subject must be a single line")
    if channels.get(template.channel).counts_segments:
        encoding, segments = sms_encoding_and_segments(body)
        if segments > max_sms_segments:
            raise TemplateError(
                f"{where}: rendered SMS is {segments} segments ({encoding}), "
                f"more than {max_sms_segments}"
            )
    else:
        encoding, segments = "UTF-8", 0
    return Rendered(
        body=body,
        subject=subject,
        sha256=content_sha256(body),
        encoding=encoding,
        segments=segments,
        template_key=template.key,
        template_version=template.version,
    )


# --------------------------------------------------------------------------- catalog

_CATALOG_FIELDS = frozenset({"key", "version", "channel", "locale", "body", "subject"})


def parse_catalog(text: str) -> list[TemplateVersion]:
    """Parse a template catalog: a TOML document of ``[[template]]`` entries.

    Each entry has ``key``, ``version`` (int >= 1), ``channel`` (sms or email),
    ``locale``, ``body`` and, for email, ``subject``. Every body and subject is compiled
    here, so a syntax error is found when the catalog loads.

    Raises:
        TemplateError: Bad TOML, a missing or unknown field, a duplicate
            (key, version, channel, locale), an email without subject, or a syntax error.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TemplateError(f"template catalog is not valid TOML: {exc}") from None
    if set(doc) - {"template"}:
        raise TemplateError(f"template catalog: unknown top-level key(s) {sorted(set(doc))}")
    entries = doc.get("template", [])
    if not isinstance(entries, list):
        raise TemplateError("template catalog: 'template' must be an array of tables")
    seen: set[tuple[str, int, str, str]] = set()
    result: list[TemplateVersion] = []
    for index, entry in enumerate(entries):
        where = f"template[{index}]"
        unknown = set(entry) - _CATALOG_FIELDS
        if unknown:
            raise TemplateError(f"{where}: unknown field(s) {sorted(unknown)}")
        for name in ("key", "channel", "locale", "body"):
            if not isinstance(entry.get(name), str) or not entry[name].strip():
                raise TemplateError(f"{where}: {name!r} must be a non-empty string")
        where = f"{where} ({entry['key']})"
        version = entry.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise TemplateError(f"{where}: 'version' must be an integer >= 1")
        if entry["channel"] not in channels.REGISTRY:
            raise TemplateError(f"{where}: channel must be one of {', '.join(CHANNELS)}")
        channel = channels.get(entry["channel"])
        subject = entry.get("subject")
        if channel.has_subject and not isinstance(subject, str):
            raise TemplateError(f"{where}: an {channel.title} template needs a 'subject'")
        if not channel.has_subject and subject is not None:
            raise TemplateError(f"{where}: an {channel.title} template has no subject")
        identity = (entry["key"], version, entry["channel"], entry["locale"].lower())
        if identity in seen:
            raise TemplateError(f"{where}: duplicate version {version} for that channel/locale")
        seen.add(identity)
        for label, source in (("body", entry["body"]), ("subject", subject)):
            if source is None:
                continue
            try:
                _ENV.parse(source)
            except TemplateSyntaxError as exc:
                raise TemplateError(
                    f"{where}: {label} syntax error on line {exc.lineno}: {exc.message}"
                ) from None
        result.append(
            TemplateVersion(
                key=entry["key"],
                version=version,
                channel=entry["channel"],
                locale=entry["locale"],
                body=entry["body"],
                subject=subject,
            )
        )
    return result
