"""domain.channels is the one place that says what a channel is.

Three kinds of test: the registry's own rules; for every place that used to branch on a
channel's spelling (`if channel == "sms" ... else <email>`), that an unknown channel now
raises there instead of taking the email path; and two source checks: no module outside
the registry, the policy and template documents and the tests compares a channel name
literal, and docs/channels.md names files that exist and say what it says they say.
"""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from domain import channels, destinations, fallback, keys, policy, templates
from domain.channels import DestinationKind, UnknownChannel
from domain.requests import NotificationRequest
from domain.senders import SenderBook
from domain.states import AttemptState

ROOT = Path(__file__).resolve().parents[2]
UNKNOWN = "fax"

# --- the registry ------------------------------------------------------------------------


def test_every_channel_is_found_by_its_name_and_an_unknown_name_raises() -> None:
    for name, channel in channels.REGISTRY.items():
        assert channels.get(name) is channel
        assert channel.name == name == str(channel)
    with pytest.raises(UnknownChannel, match="unknown channel 'fax'"):
        channels.get(UNKNOWN)
    with pytest.raises(UnknownChannel):
        channels.get(channels.ALL)  # the wildcard is not a channel


def test_the_registry_says_what_the_workflow_schedules_for_each_channel() -> None:
    sms, email = channels.SMS, channels.EMAIL
    assert (sms.send_activity, sms.poll_activity, sms.task_queue("herald")) == (
        "submit_sms",
        "poll_sms",
        "herald-sms",
    )
    assert (email.send_activity, email.poll_activity, email.task_queue("herald")) == (
        "send_email",
        None,
        "herald",
    )
    assert sms.send_heartbeat and not email.send_heartbeat


def test_only_a_delivery_reaches_over_sms_while_an_accepted_email_does() -> None:
    assert channels.SMS.reaches(AttemptState.DELIVERED)
    assert not channels.SMS.reaches(AttemptState.SENT)
    assert channels.EMAIL.reaches(AttemptState.SENT)
    assert channels.awaiting_delivery_report() == ("sms",)


def test_each_channel_masks_its_own_kind_of_destination() -> None:
    assert channels.SMS.mask("+447400000142") == "+44********42"
    assert channels.EMAIL.mask("ann.lee@example.com") == "a***@example.com"
    assert channels.mask("ann.lee@example.com") == "a***@example.com"
    assert channels.mask("+447400000142", channels.ALL) == "+44********42"
    with pytest.raises(UnknownChannel):
        channels.mask("+447400000142", UNKNOWN)


def test_default_providers_are_the_adapters_herald_ships() -> None:
    assert channels.SMS.default_providers == ("twilio",)
    assert channels.EMAIL.default_providers == ("smtp",)
    assert channels.SMS.provider_lookup and not channels.EMAIL.provider_lookup
    # The name is in every recorded history of a lookup: it may not change.
    assert (channels.SMS.lookup_activity, channels.EMAIL.lookup_activity) == ("lookup_sms", None)


def test_every_kind_of_destination_has_a_channel_a_normaliser_and_a_mask() -> None:
    for kind in DestinationKind:
        assert channels.of_destination(kind)
        assert kind in destinations.NORMALIZERS
        assert kind in destinations.LOOKUP_FORMS
        assert kind in channels.MASKS


# --- every former branch raises on an unknown channel ------------------------------------


def test_fallback_reached_raises_on_an_unknown_channel() -> None:
    with pytest.raises(UnknownChannel):
        fallback.reached(UNKNOWN, "sent")


def test_the_default_plan_and_the_destination_of_a_request_raise_on_an_unknown_channel() -> None:
    request = NotificationRequest("k:1", "r", "t", phone="+447400000142", email="a@b.example")
    assert request.channel_plan() == ("sms", "email")
    assert request.destination_for("email") == "a@b.example"
    with pytest.raises(UnknownChannel):
        request.destination_for(UNKNOWN)


def test_the_lookup_form_of_a_destination_raises_on_an_unknown_channel() -> None:
    assert destinations.normalized_destination("Ann@Example.COM", "email") == "Ann@example.com"
    assert destinations.normalized_destination("+44 7400 000142", "sms") == "+447400000142"
    with pytest.raises(UnknownChannel):
        destinations.normalized_destination("ann@example.com", UNKNOWN)


def test_the_sender_book_raises_on_an_unknown_channel() -> None:
    book = SenderBook.build()
    assert book.resolve("sms", "herald-sms") == "+15005550006"
    with pytest.raises(UnknownChannel):
        book.resolve(UNKNOWN, "herald-sms")


def test_an_attempt_token_on_an_unknown_channel_raises() -> None:
    with pytest.raises(UnknownChannel):
        keys.attempt_token("order-created:o-77", UNKNOWN, 1)
    with pytest.raises(UnknownChannel):
        keys.channel_of_token("order-created:o-77:fax:1")


def test_rendering_a_template_of_an_unknown_channel_raises() -> None:
    template = templates.TemplateVersion(
        key="t", version=1, channel=UNKNOWN, locale="en", body="hello", subject=None
    )
    with pytest.raises(UnknownChannel):
        templates.render(template, {})


def test_a_policy_request_on_an_unknown_channel_is_refused() -> None:
    import policies

    pol = policy.load_policy(policies.load_packaged("default"))
    request = policy.PolicyRequest(
        channel=UNKNOWN, category="transactional", country="GB", timezone="UTC", region="default"
    )
    with pytest.raises(policy.InvalidPolicyRequest, match="unknown channel"):
        policy.evaluate(pol, request, consents=[], suppressions=[], recent=[], now=_NOW)


_NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)


def test_the_ledger_reads_a_channels_destination_columns_by_its_kind_and_raises_otherwise() -> None:
    """The former `_destination_of` branch (a third channel read the email columns)."""
    from types import SimpleNamespace

    from ledger.models import intent_destination

    intent = SimpleNamespace(
        sms_destination_ct="ct-phone",
        sms_destination_hmac="h-phone",
        email_destination_ct="ct-mail",
        email_destination_hmac="h-mail",
    )
    assert intent_destination(intent, "sms") == ("ct-phone", "h-phone")
    assert intent_destination(intent, "email") == ("ct-mail", "h-mail")
    with pytest.raises(UnknownChannel):
        intent_destination(intent, UNKNOWN)


def test_the_consoles_masking_and_hand_off_words_raise_on_an_unknown_channel() -> None:
    """The console's former branches: the placeholder mask and "carrier" / "mail relay"."""
    from api.console import reads

    assert reads.mask("sms") == "+•• ••• ••• ••••"
    assert reads.mask("email") == "•••@•••"
    with pytest.raises(UnknownChannel):
        reads.mask(UNKNOWN)
    attempt = {
        "channel": UNKNOWN, "number": 1, "token": "k:1:fax:1", "template_key": "t",
        "template_version": 1, "content_sha256": "0" * 64, "state": "sent", "remote_id": None,
        "message_id": None, "error_code": None, "prepared_at": "2026-12-07T12:00:00+00:00",
        "submitted_at": "2026-12-07T12:00:01+00:00", "provider": "x",
    }  # fmt: skip
    doc = {"decisions": [], "attempts": [attempt], "observations": [], "operator_actions": []}
    with pytest.raises(UnknownChannel):
        reads.events_of(doc)


def test_the_timelines_masked_destination_raises_on_an_unknown_channel() -> None:
    from types import SimpleNamespace

    from ledger.timeline import _masked_destination

    class Clear:
        def decrypt(self, value: str, *, context: str) -> str:
            return value

    attempt = SimpleNamespace(channel="sms", destination_ct="+447400000142", token="k:1:sms:1")
    assert _masked_destination(Clear(), attempt) == "+44********42"  # type: ignore[arg-type]
    attempt.channel = UNKNOWN
    with pytest.raises(UnknownChannel):
        _masked_destination(Clear(), attempt)  # type: ignore[arg-type]


# --- source checks -----------------------------------------------------------------------

ALLOWED = {
    "domain/channels.py",  # the registry itself
}
"""Modules that may compare a channel name literal. Policies and templates are TOML
documents (not Python), and tests are not scanned."""
SKIPPED_FOLDERS = {"tests", ".venv", "node_modules", ".git", "build", "dist"}


def _literal_names(node: ast.AST) -> set[str]:
    """The channel names a comparison operand spells out: a string, or a tuple, list or
    set of strings."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & set(channels.NAMES)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(_literal_names(e) for e in node.elts)) if node.elts else set()
    return set()


EXEMPT = "; not a channel"
"""A line whose comment ends in `; not a channel` compares a word that only looks like a
channel name (the demo story called `sms`)."""


def channel_comparisons(source: str, name: str = "<source>") -> list[str]:
    """Where `source` compares a channel name literal: `==`/`!=`/`in` against one (or a
    collection of them), a `match` case on one, or a lookup by one (`x["sms"]`,
    `x.get("sms")`)."""
    found: list[str] = []
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source, name)):
        line = getattr(node, "lineno", 0)
        if line and EXEMPT in lines[line - 1]:
            continue
        spelled: set[str] = set()
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                spelled |= _literal_names(operand)
        elif isinstance(node, ast.MatchValue):
            spelled |= _literal_names(node.value)
        elif isinstance(node, ast.Subscript):
            spelled |= _literal_names(node.slice)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
        ):
            spelled |= _literal_names(node.args[0])
        if spelled:
            found.append(f"{name}:{line or '?'}: {', '.join(sorted(spelled))}")
    return found


def _modules() -> list[Path]:
    return [
        path
        for path in sorted(ROOT.rglob("*.py"))
        if not SKIPPED_FOLDERS & set(path.relative_to(ROOT).parts)
    ]


def test_no_module_outside_the_registry_compares_a_channel_name() -> None:
    modules = _modules()
    assert len(modules) > 50
    problems = [
        problem
        for path in modules
        if str(path.relative_to(ROOT)) not in ALLOWED
        for problem in channel_comparisons(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert problems == [], "look the channel up in domain.channels instead"


def test_the_comparison_check_catches_what_it_claims_to() -> None:
    source = (
        'if channel == "sms": pass\n'
        'if c in ("sms", "email"): pass\n'
        'x = states["email"]\n'
        'y = states.get("sms", "")\n'
        'match c:\n    case "email": pass\n'
        'ok = channel == "*" or name == "smsx"\n'
        'if story == "sms": pass  # the story; not a channel\n'
    )
    problems = channel_comparisons(source)
    assert [p.split(":")[1] for p in problems] == ["1", "2", "3", "4", "6"]


# --- docs/channels.md holds to the code --------------------------------------------------

DOC = ROOT / "docs" / "channels.md"


def _how_to_add_a_channel() -> str:
    text = DOC.read_text()
    start = text.index("## How to add a channel")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_how_to_add_a_channel_names_a_handful_of_files_that_exist() -> None:
    section = _how_to_add_a_channel()
    named = sorted(set(re.findall(r"`([\w/]+\.(?:py|toml|md))`", section)))
    assert 4 <= len(named) <= 12, named
    missing = [path for path in named if not (ROOT / path).is_file()]
    assert missing == []


def test_what_the_doc_says_each_file_holds_is_in_that_file() -> None:
    """Each step names a file and, in backticks after an arrow, a name that file holds:
    `domain/channels.py` -> `REGISTRY` fails here when the name moves."""
    section = _how_to_add_a_channel()
    pairs = re.findall(r"`([\w/]+\.py)`\s*->\s*`([\w.]+)`", section)
    assert len(pairs) >= 8, pairs
    for path, name in pairs:
        assert name in _top_level_names(ROOT / path), f"{path} defines no {name}"


def _top_level_names(path: Path) -> set[str]:
    """What a module defines at its top level: classes, functions, assigned names."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_every_field_of_a_channel_is_described_in_the_doc() -> None:
    text = DOC.read_text()
    fields = channels.Channel.__dataclass_fields__
    missing = [f for f in fields if f"`{f}`" not in text]
    assert missing == []


TOKEN_SPLIT = re.compile(
    r"""(token\w*|\])\.(r?split|r?partition)\(\s*["']:["']"""
    r"""|\.r?split\(\s*["']:["'][^)]*\)\[-[0-9]\]"""
)
"""An attempt token (or a token pulled out of something) cut at its colons by hand."""


def test_only_domain_keys_reads_an_attempt_token() -> None:
    assert TOKEN_SPLIT.search('channel = token.split(":")[-2]')
    assert TOKEN_SPLIT.search("c = attempt_token.rpartition(':')[2]")
    assert TOKEN_SPLIT.search('{t.split(":")[-2] for t in self._in_flight}')  # the old workflow
    assert not TOKEN_SPLIT.search('hours, minutes = value.split(":")')
    readers = [
        str(path.relative_to(ROOT))
        for path in _modules()
        if str(path.relative_to(ROOT)) != "domain/keys.py" and TOKEN_SPLIT.search(path.read_text())
    ]
    assert readers == [], "read tokens with domain.keys.parse_attempt_token"
