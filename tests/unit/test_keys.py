"""Business keys, channel keys, tokens and workflow ids."""

from __future__ import annotations

import pytest

from domain.keys import (
    InvalidKey,
    attempt_token,
    business_key,
    channel_key,
    content_sha256,
    event_type_of,
    validate_business_key,
    workflow_id,
)


def test_a_business_key_joins_the_event_type_and_subject_ids() -> None:
    assert business_key("class-opening", "c-9081", "m-1842") == "class-opening:c-9081:m-1842"


@pytest.mark.parametrize(
    "key",
    ["class-opening", "Class-Opening:c-1", "class-opening:", "order:o 77", "x" * 199 + ":y"],
)
def test_a_malformed_business_key_is_refused(key: str) -> None:
    with pytest.raises(InvalidKey):
        validate_business_key(key)


def test_tokens_and_ids_are_derived_from_the_key() -> None:
    key = "order-created:o-77"
    assert event_type_of(key) == "order-created"
    assert channel_key(key, "sms") == "order-created:o-77:sms"
    assert attempt_token(key, "email", 2) == "order-created:o-77:email:2"
    assert workflow_id(key) == "notification:order-created:o-77"


def test_an_unknown_channel_or_attempt_zero_is_refused() -> None:
    with pytest.raises(InvalidKey):
        channel_key("order-created:o-77", "fax")
    with pytest.raises(InvalidKey):
        attempt_token("order-created:o-77", "sms", 0)


def test_the_content_hash_is_the_same_for_text_and_its_bytes() -> None:
    assert content_sha256("héllo") == content_sha256("héllo".encode())
    assert len(content_sha256("")) == 64
