"""Provider error classification."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.provider_errors import (
    ERROR_TABLE,
    OPT_OUT_CODES,
    ErrorKind,
    classify,
    is_opt_out,
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
    if str(code).strip() in ERROR_TABLE:
        return
    assert classify(code, status).kind != ErrorKind.PERMANENT


def test_a_stop_reply_error_becomes_a_suppression() -> None:
    assert OPT_OUT_CODES == {"21610"}
    assert is_opt_out(21610) and is_opt_out(" 21610 ")
    assert not is_opt_out("30007") and not is_opt_out(None)
