"""Sender aliases resolve to senders a provider takes; a bad one is refused at start-up,
in one line naming the alias."""

from __future__ import annotations

import pytest

import settings as settings_module
from domain.policy import load_policy
from domain.senders import SenderBook, SenderError, SmsSenderKind, parse_sms_sender
from policies import load_packaged

SERVICE = "MG" + "0123456789abcdef" * 2


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("+15005550006", SmsSenderKind.NUMBER),
        ("+447400123456", SmsSenderKind.NUMBER),
        ("Herald", SmsSenderKind.ALPHANUMERIC),
        ("Herald Tix", SmsSenderKind.ALPHANUMERIC),
        (SERVICE, SmsSenderKind.MESSAGING_SERVICE),
    ],
)
def test_a_real_sender_is_classified(value: str, kind: SmsSenderKind) -> None:
    assert parse_sms_sender(value).kind == kind


@pytest.mark.parametrize(
    "value",
    ["herald-us-10dlc", "", "12345678", "+0123456789", SERVICE.upper(), "Héraldo"],
)
def test_an_alias_or_a_malformed_sender_is_no_sender(value: str) -> None:
    with pytest.raises(ValueError):
        parse_sms_sender(value)


def test_unmapped_aliases_get_the_default_and_mapped_ones_their_sender() -> None:
    book = SenderBook.build(sms_default="+15005550006", sms={"herald-us-10dlc": SERVICE})
    assert book.resolve("sms", "herald-us-10dlc") == SERVICE
    assert book.resolve("sms", "herald-sms") == "+15005550006"


def test_an_email_policy_sender_is_kept_unless_mapped_and_an_alias_gets_the_default() -> None:
    book = SenderBook.build(
        email_default="Ops <ops@example.com>",
        email={"Herald <notifications@herald.example>": "Acme <notify@acme.example>"},
    )
    assert book.resolve("email", "Herald <notifications@herald.example>") == (
        "Acme <notify@acme.example>"
    )
    assert book.resolve("email", "News <news@herald.example>") == "News <news@herald.example>"
    assert book.resolve("email", "herald-mail") == "Ops <ops@example.com>"


def test_a_bad_mapping_is_refused_naming_the_alias() -> None:
    with pytest.raises(SenderError, match="HERALD_SMS_SENDERS alias 'herald-za'"):
        SenderBook.build(sms={"herald-za": "herald-za-long-name"})
    with pytest.raises(SenderError, match="HERALD_EMAIL_SENDER"):
        SenderBook.build(email_default="not an address")


def test_an_alphanumeric_id_for_a_region_that_sends_to_the_us_is_refused() -> None:
    policy = load_policy(load_packaged("default"))
    SenderBook.build(sms={"Herald": "Herald"}).check(policy)  # EU: alphanumeric is fine
    with pytest.raises(SenderError, match="'herald-us-10dlc'.*cannot send to US"):
        SenderBook.build(sms={"herald-us-10dlc": "Herald"}).check(policy)
    with pytest.raises(SenderError, match="unmapped, so HERALD_SMS_SENDER.*cannot send to"):
        SenderBook.build(sms_default="Herald").check(policy)  # US and CA


def test_the_settings_read_the_json_map_and_refuse_a_bad_alias_in_one_line(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in list(__import__("os").environ):
        if name.startswith("HERALD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HERALD_SMS_SENDER", "+15005550007")
    monkeypatch.setenv("HERALD_SMS_SENDERS", f'{{"herald-us-10dlc": "{SERVICE}"}}')
    book = settings_module.Settings().sender_book()
    assert book.resolve("sms", "herald-us-10dlc") == SERVICE
    assert book.resolve("sms", "herald-sms") == "+15005550007"

    monkeypatch.setenv("HERALD_SMS_SENDERS", '{"herald-us-10dlc": "herald-us-10dlc"}')
    with pytest.raises(RuntimeError) as refused:
        settings_module.Settings().sender_book()
    assert "herald-us-10dlc" in str(refused.value) and "\n" not in str(refused.value)


def test_the_embedded_defaults_are_valid_for_both_packaged_policies(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in list(__import__("os").environ):
        if name.startswith("HERALD_"):
            monkeypatch.delenv(name)
    for policy_name in ("default", "demo"):
        monkeypatch.setenv("HERALD_POLICY_NAME", policy_name)
        book = settings_module.Settings().sender_book()
        assert book.resolve("sms", "herald-sms") == "+15005550006"
