"""Business keys, channel keys, tokens and workflow ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain import keys
from domain.channels import NAMES, UnknownChannel
from domain.keys import (
    MAX_KEY_LENGTH,
    AttemptToken,
    InvalidKey,
    attempt_token,
    business_key,
    channel_key,
    content_sha256,
    event_type_of,
    parse_attempt_token,
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
    with pytest.raises(UnknownChannel):
        channel_key("order-created:o-77", "fax")
    with pytest.raises(UnknownChannel):
        attempt_token("order-created:o-77", "fax", 1)
    with pytest.raises(InvalidKey):
        attempt_token("order-created:o-77", "sms", 0)


def test_an_attempt_token_is_read_from_the_right_since_the_key_holds_colons() -> None:
    token = parse_attempt_token("class-opening:c-9081:m-1842:email:3")
    assert token == AttemptToken("class-opening:c-9081:m-1842", "email", 3)
    assert str(token) == "class-opening:c-9081:m-1842:email:3"


@given(
    st.lists(st.from_regex(r"[a-z0-9][a-z0-9\-_.]{0,8}", fullmatch=True), min_size=1, max_size=4),
    st.sampled_from(NAMES),
    st.integers(min_value=1, max_value=10_000),
)
def test_every_token_made_is_read_back_as_it_was_made(
    subjects: list[str], channel: str, number: int
) -> None:
    key = business_key("order-created", *subjects)
    assert parse_attempt_token(attempt_token(key, channel, number)) == AttemptToken(
        key, channel, number
    )


@pytest.mark.parametrize(
    "token",
    ["order-created:o-77:sms", "order-created:o-77:sms:0", "order-created:o-77:sms:x", "sms:1",
     "order-created:o-77:sms:-1", ""],
)  # fmt: skip
def test_a_malformed_attempt_token_is_refused(token: str) -> None:
    with pytest.raises(InvalidKey):
        parse_attempt_token(token)


def test_an_attempt_token_on_an_unknown_channel_is_refused() -> None:
    with pytest.raises(UnknownChannel):
        parse_attempt_token("order-created:o-77:fax:1")


def test_the_content_hash_is_the_same_for_text_and_its_bytes() -> None:
    assert content_sha256("héllo") == content_sha256("héllo".encode())
    assert len(content_sha256("")) == 64


def test_a_keys_identity_is_its_namespace_then_the_key_and_never_reads_as_a_bare_key() -> None:
    key = "order-created:o-77"
    identity = keys.identity("shop", key)
    assert identity == "shop~order-created:o-77"
    assert keys.workflow_id(identity) == "notification:shop~order-created:o-77"
    assert keys.attempt_token(identity, "sms", 1) == "shop~order-created:o-77:sms:1"
    assert parse_attempt_token(keys.attempt_token(identity, "email", 2)).business_key == identity
    # `~` is never in a key: no identity is a key recorded before namespaces.
    with pytest.raises(InvalidKey):
        validate_business_key(identity)


def test_the_identity_of_a_workflow_id_gives_each_scheme_its_own_tokens() -> None:
    assert keys.identity_of_workflow("notification:shop~order-created:o-77") == (
        "shop~order-created:o-77"
    )
    # An intent recorded before namespaces keeps its bare-key tokens.
    legacy = keys.identity_of_workflow("notification:order-created:o-77")
    assert keys.attempt_token(legacy, "email", 1) == "order-created:o-77:email:1"
    with pytest.raises(InvalidKey):
        keys.identity_of_workflow("other:order-created:o-77")


@pytest.mark.parametrize("namespace", ["", "-shop", "shop~eu", "shop/eu", "a" * 81, "shöp"])
def test_a_malformed_namespace_is_refused(namespace: str) -> None:
    with pytest.raises(InvalidKey, match="namespace"):
        keys.identity(namespace, "order-created:o-77")


def test_a_key_and_its_namespace_fit_the_identitys_length_together() -> None:
    namespace = "n" * 40
    longest = "e:" + "k" * (MAX_KEY_LENGTH - 41 - 2)
    assert len(keys.identity(namespace, longest)) == MAX_KEY_LENGTH
    with pytest.raises(InvalidKey, match=f"longer than {MAX_KEY_LENGTH - 41} characters"):
        keys.identity(namespace, longest + "k")


def test_a_key_is_named_in_a_namespace_with_a_tilde() -> None:
    assert keys.split_key_ref("shop~order-created:o-77") == ("shop", "order-created:o-77")
    assert keys.split_key_ref("order-created:o-77") == (None, "order-created:o-77")
