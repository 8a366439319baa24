"""Message templates as versioned data: selection, rendering and SMS segment counting.

Templates are rendered in Jinja2's sandbox with strict undefined variables: a template
author cannot reach Python internals, and a missing variable fails the render loudly
instead of sending "Your seat in  is ready".
"""

from __future__ import annotations

import functools
import locale as locale_names
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
from domain.template_variables import DeclarationError, schema_of
from domain.toml_lines import line_of

FALLBACK_LOCALE = "en"
CHANNELS = channels.NAMES


class TemplateError(ValueError):
    """An unknown template, a missing variable, a bad catalog or a message too long."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        """`line`: the catalog line at fault, when the error is about a catalog's text."""
        super().__init__(message)
        self.line = line
        """The catalog line at fault, when the error is about a catalog's text."""


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
    schema: Mapping[str, Any] | None = None
    """The JSON Schema of its variables (`domain.template_variables`); None for a version
    recorded before versions declared their variables."""


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

KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$"
"""A template key: letters, digits, '.', '_' and '-' (it is a path segment of the API)."""
_CATALOG_FIELDS = frozenset({"key", "version", "channel", "locale", "body", "subject", "variables"})
_LOCALE = re.compile(r"^([a-z]{2,3})(-[a-z]{4})?(-([a-z]{2}|[0-9]{3}))?$")
_LANGUAGES = frozenset(
    name.split("_")[0].split(".")[0].split("@")[0] for name in locale_names.locale_alias
) - {"c", "posix"}
"""Language codes the standard library's locale table knows (ISO 639, 270 or so)."""


def known_locale(tag: str) -> bool:
    """True for a BCP 47 tag of a known language, with an optional script and region.

    ``en``, ``fr-CA``, ``zh-Hant-TW`` and ``es-419`` are; ``english``, ``xx`` and
    ``fr_FR`` (an underscore) are not.
    """
    found = _LOCALE.fullmatch(tag.lower())
    return found is not None and found[1] in _LANGUAGES


class _Refused(Exception):
    """A catalog entry's problem and the field it is about (for its line)."""

    def __init__(self, field: str | None, message: str, *, offset: int = 0) -> None:
        super().__init__(message)
        self.field = field
        self.offset = offset
        """Lines into the field's value (a syntax error on a body's third line: 2)."""


def parse_catalog(text: str) -> list[TemplateVersion]:
    """Parse a template catalog: a TOML document of ``[[template]]`` entries.

    Each entry has ``key``, ``version`` (int >= 1), ``channel`` (a channel Herald
    defines), ``locale`` (a BCP 47 tag of a known language), ``body``, for email
    ``subject``, and a ``variables`` table declaring every variable the body and subject
    use, with its shape (docs/templates.md). Every body and subject is compiled here, so a
    syntax error is found when the catalog loads.

    Raises:
        TemplateError: Bad TOML, a missing or unknown field, a duplicate
            (key, version, channel, locale), an email without subject, an unknown channel
            or locale, a syntax error, a malformed declaration, or a variable used but not
            declared; with the line at fault (`TemplateError.line`) when it can be found.
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"at line (\d+)", str(exc))
        raise TemplateError(
            f"template catalog is not valid TOML: {exc}", line=int(at[1]) if at else None
        ) from None
    if set(doc) - {"template"}:
        unknown = sorted(set(doc) - {"template"})
        raise TemplateError(
            f"template catalog: unknown top-level key(s) {unknown}",
            line=line_of(text, [unknown[0]]),
        )
    entries = doc.get("template", [])
    if not isinstance(entries, list):
        raise TemplateError(
            "template catalog: 'template' must be an array of tables",
            line=line_of(text, ["template"]),
        )
    seen: set[tuple[str, int, str, str]] = set()
    result: list[TemplateVersion] = []
    for index, entry in enumerate(entries):
        try:
            version = _entry(entry, index)
        except _Refused as refused:
            path: list[str | int] = ["template", index]
            line = line_of(text, [*path, refused.field] if refused.field else path)
            if line is not None and refused.offset:
                # A multi-line string starts on the line after its opening quotes.
                opens_below = text.splitlines()[line - 1].rstrip().endswith(('"""', "'''"))
                line += refused.offset + opens_below
            raise TemplateError(str(refused), line=line) from None
        identity = (version.key, version.version, version.channel, version.locale.lower())
        if identity in seen:
            raise TemplateError(
                f"template[{index}] ({version.key}): duplicate version {version.version} "
                "for that channel/locale",
                line=line_of(text, ["template", index]),
            )
        seen.add(identity)
        result.append(version)
    return result


def _entry(entry: dict[str, Any], index: int) -> TemplateVersion:
    """One catalog entry, checked; `_Refused` names the field at fault."""
    where = f"template[{index}]"
    unknown = set(entry) - _CATALOG_FIELDS
    if unknown:
        raise _Refused(sorted(unknown)[0], f"{where}: unknown field(s) {sorted(unknown)}")
    for name in ("key", "channel", "locale", "body"):
        if not isinstance(entry.get(name), str) or not entry[name].strip():
            raise _Refused(
                name if name in entry else None, f"{where}: {name!r} must be a non-empty string"
            )
    if not re.fullmatch(KEY_PATTERN, entry["key"]):
        raise _Refused(
            "key", f"{where}: 'key' is 1 to 80 letters, digits, '.', '_' or '-' (not a space)"
        )
    where = f"{where} ({entry['key']})"
    version = entry.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _Refused("version", f"{where}: 'version' must be an integer >= 1")
    if entry["channel"] not in channels.REGISTRY:
        raise _Refused(
            "channel",
            f"{where}: unknown channel {entry['channel']!r} (one of {', '.join(CHANNELS)})",
        )
    if not known_locale(entry["locale"]):
        raise _Refused(
            "locale",
            f"{where}: unknown locale {entry['locale']!r} (a BCP 47 tag of a known "
            "language, e.g. en, fr-CA)",
        )
    channel = channels.get(entry["channel"])
    subject = entry.get("subject")
    if channel.has_subject and not isinstance(subject, str):
        raise _Refused(None, f"{where}: an {channel.title} template needs a 'subject'")
    if not channel.has_subject and subject is not None:
        raise _Refused("subject", f"{where}: an {channel.title} template has no subject")
    declarations = entry.get("variables", {})
    if not isinstance(declarations, dict):
        raise _Refused("variables", f"{where}: 'variables' must be a table")
    try:
        schema = schema_of(declarations)
    except DeclarationError as err:
        raise _Refused("variables", f"{where}: {err}") from None
    for label, source in (("body", entry["body"]), ("subject", subject)):
        if source is None:
            continue
        try:
            _ENV.parse(source)
        except TemplateSyntaxError as exc:
            raise _Refused(
                label,
                f"{where}: {label} syntax error on its line {exc.lineno}: {exc.message}",
                offset=exc.lineno - 1,
            ) from None
    parsed = TemplateVersion(
        key=entry["key"],
        version=version,
        channel=entry["channel"],
        locale=entry["locale"],
        body=entry["body"],
        subject=subject,
        schema=schema,
    )
    undeclared = [name for name in variables_of(parsed) if name not in declarations]
    if undeclared:
        raise _Refused(
            "body",
            f"{where}: uses undeclared variable(s) {', '.join(map(repr, undeclared))} "
            "(declare each under [template.variables] with its shape)",
        )
    return parsed
