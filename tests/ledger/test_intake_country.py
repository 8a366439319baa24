"""An email-only intent needs no `country` unless a policy rule depends on it (#50)."""

from __future__ import annotations

import uuid

import pytest

import policies
from ledger import repository as repo
from ledger.errors import InvalidRequest
from ledger.templates import seed_policy
from tests.conftest import unique
from tests.ledger.conftest import EMAIL, fields

pytestmark = pytest.mark.ledger


def email_only(db, cipher, **overrides):  # type: ignore[no-untyped-def]
    return fields(
        db,
        cipher,
        unique("order-created:o"),
        phone=None,
        email=EMAIL,
        template_key="order-created",
        template_version=1,
        variables={"order_id": "o-77", "first_name": "Ada"},
        **overrides,
    )


def test_an_email_only_intent_without_a_country_is_recorded_under_the_default_policy(db, cipher):
    recorded = email_only(db, cipher)
    assert (recorded.country, recorded.region) == ("", "default")
    assert repo.record_intent(db, recorded).created


def test_a_policy_listing_the_countries_email_may_reach_needs_one_and_says_which_rule(db, cipher):
    document = policies.load_packaged("default").replace(
        'version = "2026-12-07.1"', f'version = "test-country-{uuid.uuid4().hex[:8]}"'
    )
    document += '\n[regions.default.rules.email]\nallowed_countries = ["GB", "IE"]\n'
    seed_policy(db, document, name="test-country", activate=True)
    with pytest.raises(InvalidRequest) as refused:
        email_only(db, cipher)
    assert [field for field, _ in refused.value.problems] == ["country"]
    problem = refused.value.problem
    assert "regions.default.rules.email.allowed_countries" in problem
    assert "country.unknown" in problem
    # Given, it is recorded as before.
    assert email_only(db, cipher, country="GB").region == "default"
