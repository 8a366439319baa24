"""Inbound SMS keywords."""

from __future__ import annotations

import pytest

from domain.keywords import classify_keyword


@pytest.mark.parametrize(
    "body", ["STOP", "stop", "  Stop\n", "STOPALL", "unsubscribe", "Cancel", "END", "quit", "Stop."]
)
def test_opt_out_keywords_are_recognized_whatever_the_case(body: str) -> None:
    assert classify_keyword(body) == "opt_out"


@pytest.mark.parametrize("body", ["START", "yes", " Unstop ", "Yes!"])
def test_opt_in_keywords_are_recognized(body: str) -> None:
    assert classify_keyword(body) == "opt_in"


@pytest.mark.parametrize(
    "body", ["", "please stop", "STOP IT", "stopped", "yes please", "START NOW", "S T O P"]
)
def test_a_keyword_must_be_the_whole_message(body: str) -> None:
    assert classify_keyword(body) is None
