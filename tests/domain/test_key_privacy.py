"""No contact data in business keys: the rule that keeps phone numbers and addresses out of
workflow ids (and so out of Temporal's visibility store)."""

from __future__ import annotations

import pytest

from domain.key_privacy import (
    RULE,
    ContactDataInKey,
    refuse_contact_data,
    refuse_contact_data_in_namespace,
)


@pytest.mark.parametrize(
    ("key", "country"),
    [
        ("signup:447911123456", "GB"),  # E.164 without its '+'
        ("signup:447911123456", "US"),  # ... whatever the intent's country
        ("signup:07911123456", "GB"),  # the national form in the intent's country
        ("order:o-4155550123", "US"),
        ("signup:+33612345678", None),
    ],
)
def test_a_key_holding_a_phone_number_is_refused_without_echoing_it(key, country) -> None:
    with pytest.raises(ContactDataInKey) as refused:
        refuse_contact_data(key, country=country)
    message = str(refused.value)
    assert RULE in message and "phone number" in message
    assert key.split(":")[-1] not in message


@pytest.mark.parametrize("key", ["signup:ann.lee@example.com", "signup:ann.lee@example"])
def test_a_key_holding_an_email_address_is_refused_without_echoing_it(key) -> None:
    with pytest.raises(ContactDataInKey) as refused:
        refuse_contact_data(key, country="GB")
    assert RULE in str(refused.value) and "email address" in str(refused.value)
    assert "ann.lee" not in str(refused.value)


@pytest.mark.parametrize(
    ("key", "country"),
    [
        ("class-opening:c-9081:m-1842", "US"),
        ("order-created:o-1f3e8a9b", "GB"),
        ("flight-change:LH-432:2026-12-06", "DE"),
        ("report:r-20261206", "US"),
        ("order:o-4155550123", "FR"),  # not a number in France, nor an international one
    ],
)
def test_keys_built_from_the_business_s_own_ids_pass(key, country) -> None:
    refuse_contact_data(key, country=country)


@pytest.mark.parametrize(
    ("text", "worded"),
    [
        ("", False),
        ("   \t\n", False),
        ("\u200b\u200b", False),  # zero-width space
        ("\u2060\ufeff\u00a0", False),  # word joiner, BOM, no-break space
        ("\u0301", False),  # a combining mark alone
        ("ok", True),
        ("?", True),
        ("7", True),
        ("\u200b\u2713", True),  # a check mark beside an invisible one
        ("été", True),
    ],
)
def test_a_reason_is_worded_only_with_a_visible_character(text: str, worded: bool) -> None:
    from domain.key_privacy import UnwordedNote, is_worded, refuse_unfit_notes

    assert is_worded(text) is worded
    if worded:
        refuse_unfit_notes({"reason": text}, country=None)
    else:
        with pytest.raises(UnwordedNote, match="rule reason.worded"):
            refuse_unfit_notes({"reason": text}, country=None)
    refuse_unfit_notes({"reference": text}, country=None)  # a reference may be empty


@pytest.mark.parametrize(
    ("namespace", "kind"),
    [("shop-447911123456", "phone number"), ("ann.lee@example.com", "email address")],
)
def test_a_namespace_is_held_to_the_rule_of_keys_without_echoing_it(namespace, kind) -> None:
    # A namespace enters every workflow id of its keys (notification:<ns>~<key>).
    with pytest.raises(ContactDataInKey) as refused:
        refuse_contact_data_in_namespace(namespace)
    assert RULE in str(refused.value) and kind in str(refused.value)
    assert namespace not in str(refused.value) and "447911" not in str(refused.value)


@pytest.mark.parametrize("namespace", ["shop", "billing-eu", "app-2026.12"])
def test_an_apps_name_is_a_fine_namespace(namespace) -> None:
    refuse_contact_data_in_namespace(namespace)
