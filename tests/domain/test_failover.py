"""Failover between providers: one rule per answer class, and the invariant that holds over
any sequence of provider answers: at most one submission a provider could have accepted
per intent and channel, until a reconciliation or a person says otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.failover import (
    AFTER_LOOKUP,
    RULES,
    Answer,
    ChannelRun,
    Lookup,
    Move,
    classify_answer,
    decide,
    found_nothing,
    may_be_accepted,
)
from domain.provider_errors import Cause, ErrorKind, classify


@pytest.mark.parametrize(
    ("code", "status", "answer"),
    [
        ("20003", 401, Answer.REFUSED_BY_PROVIDER),  # Twilio: authentication failed
        ("10009", 401, Answer.REFUSED_BY_PROVIDER),  # Telnyx: authentication failed
        ("21212", 400, Answer.REFUSED_BY_PROVIDER),  # this provider's sender
        ("21211", 400, Answer.REFUSED_FOR_DESTINATION),  # invalid number
        ("21610", 400, Answer.REFUSED_FOR_DESTINATION),  # opted out (Twilio)
        ("40300", 400, Answer.REFUSED_FOR_DESTINATION),  # opted out (Telnyx)
        ("99999", 400, Answer.REFUSED_FOR_DESTINATION),  # unknown: the cautious reading
    ],
)
def test_a_refusal_is_classed_by_what_it_is_about(code: str, status: int, answer: Answer) -> None:
    verdict = classify(code, status)
    kind = ErrorKind.PERMANENT if verdict.kind == ErrorKind.AMBIGUOUS else verdict.kind
    assert classify_answer(kind, verdict.cause, code=code, http_status=status) == answer


def test_a_refused_connection_is_definitive_and_a_busy_provider_is_not() -> None:
    transient = ErrorKind.TRANSIENT
    assert classify_answer(transient, Cause.PROVIDER, code="connect") == Answer.REFUSED_BY_PROVIDER
    assert classify_answer(transient, code="circuit_open") == Answer.REFUSED_BY_PROVIDER
    assert classify_answer(transient, code="20429", http_status=429) == Answer.BUSY
    assert classify_answer(transient, code="503", http_status=503) == Answer.BUSY
    assert classify_answer(ErrorKind.AMBIGUOUS, code="timeout") == Answer.AMBIGUOUS
    assert classify_answer(None) == Answer.ACCEPTED


@pytest.mark.parametrize(
    ("answer", "lookup", "expected"),
    [
        (Answer.REFUSED_BY_PROVIDER, Lookup.PENDING, Move.NEXT_PROVIDER),
        (Answer.REFUSED_FOR_DESTINATION, Lookup.PENDING, Move.FAIL),
        (Answer.BUSY, Lookup.PENDING, Move.SAME_PROVIDER_LATER),
        (Answer.AMBIGUOUS, Lookup.PENDING, Move.RECONCILE),
        (Answer.AMBIGUOUS, Lookup.FOUND, Move.OBSERVE),
        (Answer.AMBIGUOUS, Lookup.NOT_FOUND, Move.NEXT_PROVIDER),
        (Answer.AMBIGUOUS, Lookup.NOT_SEEN, Move.UNKNOWN),
        (Answer.AMBIGUOUS, Lookup.UNAVAILABLE, Move.UNKNOWN),
        (Answer.ACCEPTED, Lookup.PENDING, Move.OBSERVE),
    ],
)
def test_each_answer_class_has_one_rule(answer: Answer, lookup: Lookup, expected: Move) -> None:
    assert decide(answer, another_provider=True, failover_allowed=True, lookup=lookup).move == (
        expected
    )


@pytest.mark.parametrize("another, allowed", [(False, True), (True, False), (False, False)])
def test_without_another_allowed_provider_nothing_moves_on(another: bool, allowed: bool) -> None:
    for answer in Answer:
        for lookup in Lookup:
            move = decide(answer, another_provider=another, failover_allowed=allowed, lookup=lookup)
            assert move.move != Move.NEXT_PROVIDER
    refused = decide(Answer.REFUSED_BY_PROVIDER, another_provider=another, failover_allowed=allowed)
    assert refused.move == Move.DEFER
    lost = decide(
        Answer.AMBIGUOUS,
        another_provider=another,
        failover_allowed=allowed,
        lookup=Lookup.NOT_FOUND,
    )
    assert lost.move == Move.UNKNOWN


def test_the_documented_table_names_every_rule() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "transports.md").read_text()
    for rule in [*RULES.values(), *AFTER_LOOKUP.values()]:
        assert f"`{rule.move}`" in docs and f"`{rule.otherwise}`" in docs
    for answer in Answer:
        assert f"`{answer}`" in docs, answer


def test_a_primary_refusing_for_its_own_reason_hands_over_to_the_next_provider() -> None:
    run = ChannelRun(["twilio", "telnyx"], failover_allowed=True)
    moved = run.step(Answer.REFUSED_BY_PROVIDER, why="Twilio refused: 20003 authentication failed")
    assert moved.move == Move.NEXT_PROVIDER
    assert [(t.provider, t.number) for t in run.tries] == [("twilio", 1), ("telnyx", 2)]
    assert run.tries[0].moved_on_because == "Twilio refused: 20003 authentication failed"
    assert run.step(Answer.ACCEPTED).move == Move.OBSERVE
    assert run.finished == Move.OBSERVE


def test_an_ambiguous_primary_is_reconciled_before_anyone_else_tries() -> None:
    run = ChannelRun(["twilio", "telnyx"], failover_allowed=True)
    assert run.step(Answer.AMBIGUOUS).move == Move.RECONCILE
    assert run.step(Answer.AMBIGUOUS, Lookup.PENDING).move == Move.RECONCILE
    assert len(run.tries) == 1
    assert run.step(Answer.AMBIGUOUS, Lookup.FOUND).move == Move.OBSERVE
    assert len(run.tries) == 1


def test_a_finished_channel_takes_no_more_answers() -> None:
    run = ChannelRun(["twilio"], failover_allowed=True)
    run.step(Answer.REFUSED_FOR_DESTINATION)
    with pytest.raises(ValueError, match="already ended"):
        run.step(Answer.ACCEPTED)


# -- the property: never two submissions that may have been accepted --------------------


@dataclass
class World:
    """What really happened at the providers (hidden from Herald)."""

    lookup: dict[str, str]
    """Each provider's lookup: `none` (Telnyx), `every_state`, or `sent_only` (Twilio's
    DateSent list, which skips a message still queued or scheduled)."""
    created: dict[str, int] = field(default_factory=dict)


answers = st.sampled_from(["accept", "refuse_provider", "refuse_destination", "busy", "lost"])
lookups = st.sampled_from(["none", "every_state", "sent_only"])


@settings(max_examples=1500, deadline=None)
@given(
    providers=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), lookups),
        min_size=1,
        max_size=4,
        unique_by=lambda p: p[0],
    ),
    script=st.lists(
        st.tuples(answers, st.booleans(), st.booleans(), st.booleans()), min_size=1, max_size=12
    ),
    failover_allowed=st.booleans(),
)
def test_at_most_one_submission_that_may_have_been_accepted_per_channel(
    providers: list[tuple[str, str]],
    script: list[tuple[str, bool, bool, bool]],
    failover_allowed: bool,
) -> None:
    world = World(lookup=dict(providers))
    run = ChannelRun([p for p, _ in providers], failover_allowed=failover_allowed)
    for what, lost_after_creating, visible_yet, held_queued in script:
        if run.finished is not None:
            break
        provider = run.current.provider
        if what == "accept":
            world.created[provider] = world.created.get(provider, 0) + 1
            decision = run.step(Answer.ACCEPTED)
        elif what == "lost":
            # The answer was lost: maybe after the provider created it, which may hold it
            # queued (or scheduled) for longer than the lookup's grace.
            if lost_after_creating:
                world.created[provider] = world.created.get(provider, 0) + 1
            decision = run.step(Answer.AMBIGUOUS)
            while decision.move == Move.RECONCILE:
                # The lookup tells what it can see once the grace has passed.
                kind = world.lookup[provider]
                listed = world.created.get(provider, 0) > 0 and not (
                    held_queued and kind == "sent_only"
                )
                if kind == "none":
                    lookup = Lookup.UNAVAILABLE
                elif not visible_yet:
                    lookup = Lookup.PENDING
                    visible_yet = True  # the grace passes
                elif listed:
                    lookup = Lookup.FOUND
                else:
                    lookup = found_nothing(sees_every_state=kind == "every_state")
                decision = run.step(Answer.AMBIGUOUS, lookup)
        else:
            answer = {
                "refuse_provider": Answer.REFUSED_BY_PROVIDER,
                "refuse_destination": Answer.REFUSED_FOR_DESTINATION,
                "busy": Answer.BUSY,
            }[what]
            decision = run.step(answer)
        assert decision.move != Move.RECONCILE
        # The invariant, against the hidden truth and against Herald's own view.
        assert sum(world.created.values()) <= 1
        assert sum(t.may_be_accepted for t in run.tries) <= 1
        for earlier in run.tries[:-1]:
            assert not earlier.may_be_accepted, "moved on from a try that may exist"
            assert not world.created.get(earlier.provider), "moved on from a provider holding it"


def test_may_be_accepted_is_false_only_for_what_created_nothing() -> None:
    assert may_be_accepted(Answer.ACCEPTED)
    assert may_be_accepted(Answer.AMBIGUOUS) and may_be_accepted(Answer.AMBIGUOUS, Lookup.FOUND)
    assert may_be_accepted(Answer.AMBIGUOUS, Lookup.UNAVAILABLE)
    assert not may_be_accepted(Answer.AMBIGUOUS, Lookup.NOT_FOUND)
    assert may_be_accepted(Answer.AMBIGUOUS, Lookup.NOT_SEEN)


def test_only_a_lookup_that_sees_every_state_can_say_not_found() -> None:
    assert found_nothing(sees_every_state=True) == Lookup.NOT_FOUND
    assert found_nothing(sees_every_state=False) == Lookup.NOT_SEEN
    for answer in (Answer.REFUSED_BY_PROVIDER, Answer.REFUSED_FOR_DESTINATION, Answer.BUSY):
        assert not may_be_accepted(answer)
