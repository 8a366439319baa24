"""Provider error classification."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.provider_errors import (
    ERROR_TABLE,
    OPT_OUT_CODES,
    TELNYX_ERRORS,
    TWILIO_ERRORS,
    Cause,
    ErrorKind,
    classify,
    is_opt_out,
    meaning,
)


@pytest.mark.parametrize("code", ["21211", "21610", "21614", "30004", "30005", "30006", "30007"])
def test_destination_failures_are_permanent(code: str) -> None:
    assert classify(code).kind == ErrorKind.PERMANENT
    assert classify(int(code)).code == code


@pytest.mark.parametrize(
    ("code", "status"),
    [(20429, None), (None, 429), (30001, None), (21611, None), (None, 500), (None, 503)],
)
def test_overload_and_server_errors_are_transient(code: int | None, status: int | None) -> None:
    assert classify(code, status).kind == ErrorKind.TRANSIENT


@pytest.mark.parametrize("code", ["30003", "30008"])
def test_unreachable_and_unknown_errors_are_ambiguous(code: str) -> None:
    assert classify(code).kind == ErrorKind.AMBIGUOUS


def test_a_known_code_wins_over_the_http_status() -> None:
    assert classify("21211", 400).kind == ErrorKind.PERMANENT
    assert classify("21211", 503).kind == ErrorKind.PERMANENT


def test_nothing_at_all_is_ambiguous() -> None:
    result = classify(None)
    assert (result.kind, result.code) == (ErrorKind.AMBIGUOUS, "")
    assert classify(None, 400).code == "HTTP 400"


@given(
    code=st.integers(min_value=0, max_value=99999) | st.text(max_size=8),
    status=st.none() | st.integers(min_value=100, max_value=599),
)
def test_an_unknown_code_is_never_permanent(code: int | str, status: int | None) -> None:
    if str(code).strip() in ERROR_TABLE or status in (401, 403):
        return  # (401 and 403 are about the account, below)
    assert classify(code, status).kind != ErrorKind.PERMANENT


@pytest.mark.parametrize(
    ("code", "status", "table"),
    [
        # Twilio: authentication, an inactive account, a forbidden (suspended, closed) one.
        ("20003", 401, TWILIO_ERRORS),
        ("20005", 401, TWILIO_ERRORS),
        ("20403", 403, TWILIO_ERRORS),
        # Telnyx: authentication, authorization.
        ("10009", 401, TELNYX_ERRORS),
        ("10010", 403, TELNYX_ERRORS),
        # A bare 401/403 (no code, or a code the table does not know: a proxy, SendGrid).
        (None, 401, None),
        (None, 403, None),
        ("20008", 401, TWILIO_ERRORS),
        ("99999", 403, TELNYX_ERRORS),
    ],
)
def test_a_refusal_about_the_account_is_classified_so(
    code: str | None, status: int, table: dict[str, tuple[ErrorKind, str, Cause]] | None
) -> None:
    verdict = classify(code, status, table=table)
    assert verdict.about_the_account
    assert (verdict.kind, verdict.cause) == (ErrorKind.PERMANENT, Cause.PROVIDER)
    assert verdict.code == (code or f"HTTP {status}")
    # In words, for the console: it waits, it does not end the notification.
    assert "never ends the notification" in meaning(code, status)


@pytest.mark.parametrize(
    ("code", "status"), [("21211", 400), ("21610", 400), ("40300", 400), (None, 400)]
)
def test_a_refusal_about_the_destination_or_unknown_is_not_about_the_account(
    code: str | None, status: int
) -> None:
    assert not classify(code, status).about_the_account
    assert "never ends the notification" not in meaning(code, status)


def test_a_stop_reply_error_becomes_a_suppression() -> None:
    # Twilio's 21610 and Telnyx's 40300: an opt-out through either provider holds for all.
    assert OPT_OUT_CODES == {"21610", "40300"}
    assert is_opt_out(21610) and is_opt_out(" 21610 ") and is_opt_out("40300")
    assert not is_opt_out("30007") and not is_opt_out(None)


def test_the_providers_code_spaces_do_not_overlap() -> None:
    # The merged table serves callers that hold only a code (a stored error_code).
    assert not set(TWILIO_ERRORS) & set(TELNYX_ERRORS)
    assert set(ERROR_TABLE) == set(TWILIO_ERRORS) | set(TELNYX_ERRORS)


@pytest.mark.parametrize("code", ["21211", "21610", "21614", "10002", "40300", "40310", "40001"])
def test_a_refusal_about_the_number_or_the_person_is_about_the_destination(code: str) -> None:
    assert classify(code).cause == Cause.DESTINATION


@pytest.mark.parametrize("code", ["20003", "21212", "21408", "10009", "10010", "40305"])
def test_credentials_senders_and_permissions_are_the_providers_own(code: str) -> None:
    verdict = classify(code)
    assert (verdict.kind, verdict.cause) == (ErrorKind.PERMANENT, Cause.PROVIDER)


def test_one_providers_table_does_not_know_the_others_codes() -> None:
    assert classify("40300", 400, table=TWILIO_ERRORS).kind == ErrorKind.AMBIGUOUS
    assert classify("21610", 400, table=TELNYX_ERRORS).kind == ErrorKind.AMBIGUOUS
    assert classify("40300", 400, table=TELNYX_ERRORS).kind == ErrorKind.PERMANENT


def test_an_unknown_code_is_not_said_to_be_the_providers() -> None:
    # Unknown means no failover: the cautious reading.
    assert classify("99999", 400).cause == Cause.UNKNOWN
