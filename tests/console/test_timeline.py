"""The words of three stories' timelines, as the console tells them (snapshots): each entry
one sentence a support person can read out, in the order things happened, milliseconds
only where seconds tie. A change of wording shows here as a diff to read."""

from __future__ import annotations

from typing import Any

from api.console.entries import entries_of
from api.console.reads import outcome_sentence

DAY = "2026-12-07T"


def at(clock: str) -> str:
    return f"{DAY}{clock}+00:00"


def decision(clock: str, channel: str, outcome: str = "allow", reason: str = "") -> dict[str, Any]:
    return {
        "id": 1,
        "channel": channel,
        "policy_version": "default@3",
        "outcome": outcome,
        "rule": "transactional",
        "reason": reason or "a transactional message with consent on record",
        "inputs": {},
        "next_eligible_at": None,
        "decided_at": at(clock),
    }


def attempt(
    channel: str,
    number: int,
    state: str,
    prepared: str,
    submitted: str | None,
    *,
    remote_id: str | None = None,
    error_code: str | None = None,
    destination: str = "+44********01",
) -> dict[str, Any]:
    return {
        "channel": channel,
        "number": number,
        "token": f"tok-{channel}-{number}",
        "state": state,
        "remote_id": remote_id,
        "message_id": None,
        "decision_id": 1,
        "template_key": "class-opening",
        "template_version": 3,
        "content_sha256": "ab" * 32,
        "segments": 1,
        "sender": "Herald",
        "sender_address": None,
        "error_code": error_code,
        "prepared_at": at(prepared),
        "submitted_at": at(submitted) if submitted else None,
        "terminal_at": None,
        "pii_readable": True,
        "destination_masked": destination,
    }


def seen(
    clock: str,
    token: str,
    source: str,
    raw: str,
    normalized: str | None,
    *,
    applied: bool = True,
    verdict: str = "applied",
    code: str | None = None,
    conflict: bool = False,
) -> dict[str, Any]:
    return {
        "attempt": token,
        "source": source,
        "raw_status": raw,
        "normalized_status": normalized,
        "provider_code": code,
        "provider_at": None,
        "observed_at": at(clock),
        "verdict": verdict,
        "applied": applied,
        "conflict": conflict,
    }


def action(
    clock: str, name: str, who: str, reason: str, result: str = "accepted", **detail: Any
) -> dict[str, Any]:
    return {
        "action": name,
        "operator": who,
        "operator_role": "operator",
        "reason": reason,
        "outcome": result,
        "detail": detail,
        "at": at(clock),
    }


def doc(state: str, decisions, attempts, observations, actions, cancelled=None) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return {
        "intent": {"id": "i-1", "state": state, "cancelled_at": cancelled},
        "decisions": decisions,
        "attempts": attempts,
        "observations": observations,
        "operator_actions": actions,
    }


def told(story: dict[str, Any]) -> list[str]:
    return [f"{e.time_text} {e.kind}: {e.sentence}" for e in entries_of(story)]


def test_delivered_and_then_our_send_request_timed_out():
    story = doc(
        "delivered",
        [decision("20:04:48.100", "sms")],
        [attempt("sms", 1, "delivered", "20:04:48.210", "20:04:49.400", remote_id="SM42")],
        [
            seen("20:04:49.402", "tok-sms-1", "send", "queued", "submitted"),
            seen("20:04:50.050", "tok-sms-1", "webhook", "delivered", "delivered"),
            seen(
                "20:05:00.700",
                "tok-sms-1",
                "send",
                "timeout",
                "unknown",
                applied=False,
                verdict="stale",
            ),
        ],
        [],
    )
    assert told(story) == [
        "2026-12-07 20:04:48.100 UTC decision: The policy allowed sending by SMS (a "
        "transactional message with consent on record).",
        "2026-12-07 20:04:48.210 UTC attempt: Herald prepared SMS attempt #1 to +44********01 "
        "from template class-opening v3; nothing was sent yet.",
        "2026-12-07 20:04:49.400 UTC attempt: SMS attempt #1 was handed to the carrier "
        "(message id SM42).",
        "2026-12-07 20:04:49.402 UTC observation: The answer to our send request said SMS "
        "attempt #1 was accepted by the carrier.",
        "2026-12-07 20:04:50 UTC observation: A delivery receipt from the carrier said SMS "
        "attempt #1 was delivered.",
        "2026-12-07 20:05:00 UTC observation: Our send request for SMS attempt #1 timed out: "
        "it does not tell whether the carrier took the message. It changed nothing: by then "
        "Herald already knew more (the attempt was then delivered); it is kept as evidence.",
    ]


def test_a_stale_entry_says_what_was_known_then_not_what_the_attempt_came_to():
    # A lookup kept as stale while the attempt was unknown; settled undelivered later.
    story = doc(
        "undelivered",
        [decision("10:00:00.000", "sms")],
        [attempt("sms", 1, "undelivered", "10:00:00.100", "10:00:00.200", remote_id="SM7")],
        [
            seen("10:00:00.300", "tok-sms-1", "send", "queued", "submitted"),
            seen("10:01:00.000", "tok-sms-1", "poll", "unknown", "unknown"),
            seen(
                "10:02:00.000",
                "tok-sms-1",
                "lookup",
                "sent",
                "sent",
                applied=False,
                verdict="stale",
            ),
            seen("10:03:00.000", "tok-sms-1", "operator", "settled", "undelivered"),
        ],
        [],
    )
    [lookup] = [line for line in told(story) if "10:02:00" in line]
    assert "(the attempt was then of unknown outcome)" in lookup, lookup
    assert "undelivered" not in lookup and "not delivered" not in lookup


def test_an_unreachable_handset_then_an_approved_resend_that_was_delivered():
    story = doc(
        "delivered",
        [decision("10:00:00.000", "sms"), decision("10:02:05.010", "sms")],
        [
            attempt(
                "sms",
                1,
                "undelivered",
                "10:00:00.100",
                "10:00:01.000",
                remote_id="SM1",
                error_code="30003",
            ),
            attempt("sms", 2, "delivered", "10:02:05.015", "10:02:06.000", remote_id="SM2"),
        ],
        [
            seen(
                "10:00:40.000", "tok-sms-1", "webhook", "undelivered", "undelivered", code="30003"
            ),
            seen("10:02:09.000", "tok-sms-2", "webhook", "delivered", "delivered"),
        ],
        # Recorded 10 ms after the decision it led to (two activities, either order).
        [
            action(
                "10:02:05.020",
                "approve-resend",
                "ana",
                "caller says the phone is back on",
                channel="sms",
                after="tok-sms-1=undelivered",
            )
        ],
    )
    assert told(story) == [
        "2026-12-07 10:00:00.000 UTC decision: The policy allowed sending by SMS (a "
        "transactional message with consent on record).",
        "2026-12-07 10:00:00.100 UTC attempt: Herald prepared SMS attempt #1 to +44********01 "
        "from template class-opening v3; nothing was sent yet.",
        "2026-12-07 10:00:01 UTC attempt: SMS attempt #1 was handed to the carrier (message id "
        "SM1).",
        "2026-12-07 10:00:40 UTC observation: A delivery receipt from the carrier said SMS "
        "attempt #1 was not delivered. Error 30003: unreachable destination handset (the "
        "message may or may not have gone out: it is settled before anything is sent again).",
        "2026-12-07 10:02:05.020 UTC operator: ana (operator) approved a resend by SMS: “caller "
        "says the phone is back on”.",
        "2026-12-07 10:02:05.010 UTC decision: The policy allowed sending by SMS (a "
        "transactional message with consent on record).",
        "2026-12-07 10:02:05.015 UTC attempt: Herald prepared SMS attempt #2 to +44********01 "
        "from template class-opening v3; nothing was sent yet.",
        "2026-12-07 10:02:06 UTC attempt: SMS attempt #2 was handed to the carrier (message id "
        "SM2).",
        "2026-12-07 10:02:09 UTC observation: A delivery receipt from the carrier said SMS "
        "attempt #2 was delivered.",
    ]
    assert outcome_sentence(story).startswith("Delivered by SMS at")


def test_a_blocked_sms_an_email_fallback_and_a_cancel_after_it_was_handed_on():
    story = doc(
        "cancelled",
        [decision("09:00:00.000", "sms"), decision("09:00:02.000", "email")],
        [
            attempt("sms", 1, "failed", "09:00:00.200", None, error_code="30004"),
            attempt(
                "email", 1, "sent", "09:00:02.100", "09:00:02.900", destination="a***@example.com"
            ),
        ],
        [
            seen("09:00:01.000", "tok-sms-1", "send", "rejected", "failed", code="30004"),
            seen("09:00:03.000", "tok-email-1", "send", "accepted", "sent"),
        ],
        [
            action("09:01:00.000", "cancel", "ana", "the class was called off"),
            action(
                "09:01:30.000",
                "approve-resend",
                "ana",
                "try SMS again",
                result="refused",
                channel="sms",
                why="the intent is cancelled",
            ),
        ],
        cancelled=at("09:01:00.000"),
    )
    assert told(story) == [
        "2026-12-07 09:00:00.000 UTC decision: The policy allowed sending by SMS (a "
        "transactional message with consent on record).",
        "2026-12-07 09:00:00.200 UTC attempt: Herald prepared SMS attempt #1 to +44********01 "
        "from template class-opening v3; nothing was sent yet.",
        "2026-12-07 09:00:01 UTC observation: The carrier refused our send request for SMS "
        "attempt #1. Error 30004: message blocked (permanent: this destination will not work "
        "on this channel; Herald does not retry it).",
        "2026-12-07 09:00:02.000 UTC decision: The policy allowed sending by email (a "
        "transactional message with consent on record).",
        "2026-12-07 09:00:02.100 UTC attempt: Herald prepared email attempt #1 to "
        "a***@example.com from template class-opening v3; nothing was sent yet.",
        "2026-12-07 09:00:02.900 UTC attempt: Email attempt #1 was handed to the mail relay.",
        "2026-12-07 09:00:03 UTC observation: The answer to our send request said email "
        "attempt #1 was sent on by the mail relay, with no delivery receipt yet.",
        "2026-12-07 09:01:00 UTC operator: ana (operator) cancelled the intent: “the class was "
        "called off”.",
        "2026-12-07 09:01:30 UTC operator: ana (operator) asked for a resend by SMS: “try SMS "
        "again”. Refused: the intent is cancelled.",
    ]


def test_the_outcome_names_the_channel_as_people_write_it():
    sms = attempt("sms", 1, "failed", "09:00:00.200", None, error_code="30004")
    email = attempt("email", 1, "delivered", "09:00:02.100", "09:00:02.900")
    delivered = doc("delivered", [], [sms, {**email, "terminal_at": at("09:00:04.000")}], [], [])
    assert outcome_sentence(delivered).startswith("Delivered by email at ")
    sent = doc("sent", [], [{**email, "state": "sent"}], [], [])
    assert outcome_sentence(sent).startswith("Sent by email at ")
    cancelled = doc(
        "cancelled", [], [{**email, "state": "sent"}], [], [], cancelled=at("09:01:00.000")
    )
    assert "the email was handed to the " in outcome_sentence(cancelled)


def test_a_settlement_and_an_expired_window_are_told_in_words():
    story = doc(
        "delivered",
        [],
        [],
        [],
        [
            action(
                "11:00:00.000",
                "settle",
                "ana",
                "carrier confirmed by phone",
                rule="carrier_confirmed",
                outcome="delivered",
                resend_allowed="false",
            ),
            action(
                "12:00:00.000",
                "settlement-expired",
                "herald",
                "the window closed",
                outcome="expired",
            ),
        ],
    )
    assert told(story) == [
        "2026-12-07 11:00:00 UTC operator: ana (operator) settled the unknown outcome as "
        "delivered under the rule carrier_confirmed: “carrier confirmed by phone”. No resend "
        "follows from it.",
        "2026-12-07 12:00:00 UTC operator: The settlement window closed with no decision: the "
        "attempt stays unknown and nothing is sent again.",
    ]


def test_a_review_item_opened_on_demand_is_told_in_words_refusal_included():
    story = doc(
        "unknown",
        [],
        [],
        [],
        [
            action(
                "11:00:00.000",
                "open-review",
                "ana",
                "the member says nothing came",
                channel="sms",
                kind="unknown_outcome",
                item=7,
                reopened="false",
            ),
            action(
                "11:05:00.000",
                "open-review",
                "ana",
                "again",
                "refused",
                channel="sms",
                kind="unknown_outcome",
                why="review item #7 (unknown_outcome) is already open for the sms attempt #1",
            ),
        ],
    )
    assert told(story) == [
        "2026-12-07 11:00:00 UTC operator: ana (operator) opened a review item (unknown_outcome) "
        "for the SMS attempt: “the member says nothing came”.",
        "2026-12-07 11:05:00 UTC operator: ana (operator) asked to open a review item for the "
        "SMS attempt: “again”. Refused: review item #7 (unknown_outcome) is already open for "
        "the sms attempt #1.",
    ]


def test_a_deferral_after_an_account_refusal_is_the_providers_word_not_the_policys():
    refused = {
        **decision("09:00:02", "sms", "defer", "twilio refused (20003: authentication failed)"),
        "rule": "provider.refused",
        "next_eligible_at": at("09:00:32"),
    }
    quiet = {
        **decision("09:00:03", "sms", "defer", "quiet hours"),
        "rule": "quiet_hours",
        "next_eligible_at": at("09:30:00"),
    }
    lines = told(doc("deferred", [refused, quiet], [], [], []))
    assert lines == [
        f"{DAY[:-1]} 09:00:02 UTC decision: The provider refused the SMS for its own reasons; "
        f"it waits until {DAY[:-1]} 09:00:32 UTC: twilio refused (20003: authentication failed).",
        f"{DAY[:-1]} 09:00:03 UTC decision: The policy held the SMS back until "
        f"{DAY[:-1]} 09:30:00 UTC: quiet hours.",
    ]
