"""Review before activation: the author never approves their own version, a version has
one verdict, and an unapproved version under review never becomes active."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import policies
from domain.policy import PolicyError, load_policy
from domain.review import (
    SYSTEM,
    ReviewRefused,
    ReviewRule,
    Verdict,
    VersionReview,
    activation_refusal,
    parse,
    review,
)

PEOPLE = ("alice", "bob", "carol")
RULE = "[review] templates of policy p-1"


def pending(author: str | None = "alice") -> VersionReview:
    return VersionReview("template 'order-created' v3 (sms/en)", author)


def after(steps: list[tuple[str, Verdict]], author: str | None) -> VersionReview:
    """The review after each step, the refused ones changing nothing (as in the ledger)."""
    current = pending(author)
    for by, verdict in steps:
        try:
            current = review(current, verdict, by)
        except ReviewRefused:
            pass
    return current


steps = st.lists(st.tuples(st.sampled_from(PEOPLE), st.sampled_from(Verdict)), max_size=8)
authors = st.sampled_from((*PEOPLE, None))


@settings(max_examples=400, deadline=None)
@given(steps, authors)
def test_the_author_never_approves_their_own_version(steps, author) -> None:  # type: ignore[no-untyped-def]
    final = after(steps, author)
    assert author is None or final.approved_by != author
    assert author is None or final.refused_by != author


@settings(max_examples=400, deadline=None)
@given(steps, authors)
def test_an_unapproved_version_under_review_never_becomes_active(steps, author) -> None:  # type: ignore[no-untyped-def]
    final = after(steps, author)
    allowed = activation_refusal(final, required=True, rule=RULE) is None
    assert allowed == (final.approved_by is not None and final.approved_by != author)
    # The first verdict given by someone other than the author is the one that stands.
    first = next(((by, v) for by, v in steps if by != author), None)
    assert final.verdict == (first[1] if first else None)


def test_the_author_is_refused_naming_the_second_principal_it_takes() -> None:
    with pytest.raises(ReviewRefused, match="recorded by alice: its author cannot approve"):
        review(pending("alice"), Verdict.APPROVED, "alice")


def test_approving_again_by_the_same_principal_changes_nothing_and_another_is_told_who() -> None:
    approved = review(pending(), Verdict.APPROVED, "bob")
    assert review(approved, Verdict.APPROVED, "bob") is approved
    with pytest.raises(ReviewRefused, match="already approved by bob"):
        review(approved, Verdict.APPROVED, "carol")
    with pytest.raises(ReviewRefused, match="already approved by bob"):
        review(approved, Verdict.REFUSED, "bob")


def test_no_one_reviews_as_the_system_principal() -> None:
    with pytest.raises(ReviewRefused, match="reviews no version"):
        review(pending(), Verdict.APPROVED, SYSTEM)


def test_activation_names_what_is_missing_and_a_refusal_stands_even_without_review() -> None:
    refusal = activation_refusal(pending(), required=True, rule=RULE)
    assert refusal is not None
    assert "is not approved" in refusal and RULE in refusal and "(alice)" in refusal
    assert activation_refusal(pending(), required=False, rule="") is None
    refused = review(pending(), Verdict.REFUSED, "bob")
    assert "refused by bob" in (activation_refusal(refused, required=False, rule="") or "")


def test_the_review_table_reviews_every_policy_by_default_and_templates_by_key() -> None:
    assert parse({}) == ReviewRule(policies=True, templates=frozenset())
    rule = parse({"policies": False, "templates": ["order-created"]})
    assert not rule.policies and rule.covers_template("order-created")
    assert not rule.covers_template("class-opening")


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"template": ["x"]}, "review: unknown field 'template'"),
        ({"policies": "yes"}, "review.policies: must be true or false"),
        ({"templates": "order-created"}, "review.templates: must be a list"),
        ({"templates": [""]}, "review.templates: must be a list"),
    ],
)
def test_a_malformed_review_table_is_refused_naming_the_field(table, named) -> None:  # type: ignore[no-untyped-def]
    document = (
        policies.load_packaged("default")
        + "\n[review]\n"
        + "".join(
            f"{name} = {value!r}\n".replace("'", '"').replace("False", "false")
            for name, value in table.items()
        )
    )
    with pytest.raises(PolicyError, match=named.replace("[", r"\[")):
        load_policy(document)


def test_a_policy_document_carries_its_review_rule(default_policy) -> None:  # type: ignore[no-untyped-def]
    assert default_policy.review == ReviewRule()
    document = policies.load_packaged("default") + '\n[review]\ntemplates = ["order-created"]\n'
    assert load_policy(document).review.covers_template("order-created")
