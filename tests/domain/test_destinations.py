"""Phone numbers, email addresses and regions."""

from __future__ import annotations

import pytest

from domain.destinations import (
    EU_MEMBER_STATES,
    InvalidDestination,
    normalize_email,
    normalize_phone,
    region_of,
)


def test_a_french_mobile_is_normalized_with_its_country_and_zone() -> None:
    phone = normalize_phone("06 12 34 56 78", default_region="fr")
    assert phone.e164 == "+33612345678"
    assert phone.country == "FR"
    assert phone.number_type == "mobile"
    assert phone.timezone == "Europe/Paris"


def test_a_us_number_is_accepted_as_fixed_line_or_mobile() -> None:
    phone = normalize_phone("+1 (617) 555-0123")
    assert phone.e164 == "+16175550123"
    assert phone.country == "US"
    assert phone.number_type == "fixed_line_or_mobile"
    assert phone.timezone == "America/New_York"


def test_a_french_landline_is_refused() -> None:
    with pytest.raises(InvalidDestination, match="landline"):
        normalize_phone("+33142685300")


def test_an_invalid_number_is_refused_without_echoing_it() -> None:
    with pytest.raises(InvalidDestination, match="invalid phone number") as caught:
        normalize_phone("+3361234")
    assert "61234" not in str(caught.value)


def test_garbage_is_refused_as_an_invalid_number() -> None:
    with pytest.raises(InvalidDestination, match="invalid phone number"):
        normalize_phone("call me maybe")


def test_a_non_geographic_number_is_an_unsupported_country() -> None:
    with pytest.raises(InvalidDestination, match="unsupported country"):
        normalize_phone("+80012345678")


def test_an_email_domain_is_lowercased_and_the_local_part_kept() -> None:
    email = normalize_email("  Jean.Dupont+trip@Example.FR ")
    assert email.address == "Jean.Dupont+trip@example.fr"
    assert email.domain == "example.fr"


def test_a_unicode_email_domain_becomes_punycode() -> None:
    assert normalize_email("anna@bücher.de").domain == "xn--bcher-kva.de"


@pytest.mark.parametrize(
    "raw",
    [
        "no-at-sign",
        "a@b@c.com",
        "@example.com",
        "a..b@example.com",
        "a@localhost",
        "a@-bad.com",
        "a@example.c0m",
        "a b@example.com",
        "x" * 65 + "@example.com",
    ],
)
def test_a_bad_email_is_refused_without_echoing_it(raw: str) -> None:
    with pytest.raises(InvalidDestination, match="bad email address") as caught:
        normalize_email(raw)
    assert raw not in str(caught.value)


def test_regions_cover_us_the_27_eu_states_za_and_the_rest() -> None:
    assert len(EU_MEMBER_STATES) == 27
    assert region_of("US") == "US"
    assert region_of("za") == "ZA"
    assert all(region_of(country) == "EU" for country in EU_MEMBER_STATES)
    assert region_of("GB") == "default"
    assert region_of("CA") == "default"
    assert region_of("") == "default"


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("+999999999999", "no such country calling code"),
        ("+4412345678901234567890", "too long"),
        ("call me", "not a phone number"),
    ],
)
def test_an_unparsable_number_says_why_in_words_not_the_parsers_code(raw: str, why: str) -> None:
    with pytest.raises(InvalidDestination) as refused:
        normalize_phone(raw)
    assert str(refused.value).startswith(f"invalid phone number: {why} (")
    assert not str(refused.value).rstrip(")").endswith(tuple("0123456789"))
